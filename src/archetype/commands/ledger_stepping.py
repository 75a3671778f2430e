"""Stepping a world (docs/ledger.md, "Ordering and leasing" to "Health"): a runner's session
leases the commands due at a tick, guards the one it materializes, and publishes the tick (its
settlements, manifest and state, in one transaction), or records the tick's failure; a session
released, or a crash found by the guard, puts its commands back."""

from __future__ import annotations

import json
import re
from typing import Any, cast

from archetype.canonical import MAX_SAFE_INTEGER, canonical_text
from archetype.commands import ledger_sql as q
from archetype.commands.errors import InvalidCommandError, LeaseLostError, StaleWriterError
from archetype.commands.ledger_core import COMMAND_FIELDS, LedgerCore, check_lease_ms, named_row
from archetype.commands.ledger_rows import (
    COMMAND_LEASE_MAX_MS,
    CommandLeaseMs,
    CommandSequence,
    Epoch,
    LeasedRow,
    ManifestRow,
    PageLimit,
    Published,
    StateWrite,
    Tick,
    WallMs,
    WorldRow,
)
from archetype.world import columnar
from archetype.world.commit import OUTCOMES
from archetype.world.error_text import ERROR_TEXT_LIMIT
from archetype.world.limits import STATE_CHUNK_LIMIT
from archetype.world.operations import Label, Name

CRASH_ERROR = "its runner stopped while materializing it (crash guard)"
# `{"first":<first entity id>,` opens a columnar chunk, `[[<first entity id>,` one of per-entity
# entries (docs/storage.md); the ledger reads no more of it at publish.
_CHUNK_HEAD = re.compile(r'(?:\{"first":|\[\[)([1-9][0-9]{0,15}),')
# What a snapshot of no entity stores (docs/storage.md, "State at a tick"): a chunk of no id, under
# first id 0, which no entity has.
EMPTY_SNAPSHOT = '{"first":0,"last":0,"removed":[],"sections":[]}'


class SteppingOperations(LedgerCore):
    """The ledger's stepping: `lease`, `guard`, `publish`, `record_tick_failure`, `retry_world`
    and `release`."""

    # -- leasing --
    def lease(self, world_id: str, owner: Label, session: Label, writer_epoch: Epoch, tick: Tick, limit: PageLimit,
              lease_ms: CommandLeaseMs) -> list[LeasedRow]:  # fmt: skip
        """Lease due commands in (scheduled_tick, priority, sequence) order; never deletes a row,
        never charges an attempt.

        Rows this session holds are renewed. Rows held by another session of the same owner (the
        runner restarted) or by an expired lease of another owner are taken over at once and
        marked `suspect`. A row another owner holds unexpired stops the lease there (order is never
        skipped). First, a crash guard left by another session charges its command one attempt
        (and that command stays suspect).
        """
        check_lease_ms(lease_ms, COMMAND_LEASE_MAX_MS)

        def run() -> list[LeasedRow]:
            world = self._writer(world_id, writer_epoch)
            now = self._clock.now_ms()
            charged = None
            if world["guard_session"] is not None and world["guard_session"] != session:
                charged = self._charge_crash(world_id, world["guard_sequence"], now)
            due = self._port.execute(q.DUE_COMMANDS, (world_id, tick, limit))
            taken: list[LeasedRow] = []
            for values in due:
                row = named_row(COMMAND_FIELDS, values[:-1])
                held_by = (row["lease_owner"], values[-1])
                suspect = row["sequence"] == charged
                if row["status"] == "LEASED" and held_by != (owner, session):
                    if row["lease_owner"] != owner and row["lease_expires_at"] > now:
                        break
                    suspect = True
                taken.append(cast(LeasedRow, {**row, "suspect": suspect}))
            expires = now + lease_ms
            if taken:  # one write of the world's lease map, none of the commands' rows
                self._change_leases(world_id, {str(r["sequence"]): [owner, session, expires, now] for r in taken})
            for leased in taken:
                leased.update({"status": "LEASED", "lease_owner": owner, "lease_expires_at": expires, "updated_at": now})
            return taken

        return self._port.transaction(run)

    def _charge_crash(self, world_id: str, sequence: int | None, now: int) -> int | None:
        """Charge the guarded command of a dead session one attempt; answer its sequence if charged."""
        self._port.execute(q.SET_GUARD, (None, None, world_id))
        row = None if sequence is None else self._command_at(world_id, sequence)
        if row is None or row["status"] != "LEASED":
            return None
        self._port.execute(q.CHARGE_CRASH, (CRASH_ERROR, now, world_id, sequence))
        self._change_leases(world_id, {str(sequence): None})
        self._append_events(world_id, [row["sequence"]], now)
        return row["sequence"]

    def guard(self, world_id: str, owner: Label, session: Label, writer_epoch: Epoch, sequence: CommandSequence | None) -> None:
        """Name the command this session is about to materialize in guarded mode (None: no command).

        If the session dies before it moves the guard on, the next lease by another session
        charges that command one attempt: this is how a command that kills its runner ends up
        dead-lettered after its budget, while the commands around it are never charged.
        """

        def run() -> None:
            self._writer(world_id, writer_epoch)
            if sequence is not None and not self._port.execute(q.IS_HELD, (world_id, sequence, owner, session))[0][0]:
                raise LeaseLostError(f"command #{sequence} of world {world_id!r} is not leased by this session")
            self._port.execute(q.SET_GUARD, (sequence, None if sequence is None else session, world_id))

        self._port.transaction(run)

    # -- publication --
    def publish(self, world_id: str, owner: Label, session: Label, manifest: ManifestRow,
                writes: StateWrite, due_ms: WallMs | None = None) -> Published:  # fmt: skip
        """Publish one tick: manifest, state write (a snapshot replacing the world's state, or a
        delta overlaying it: one row per chunk), every settlement of the tick with its outbox
        event (in the manifest's order), the release of what the session still holds, and the
        tick head. A lockstep world publishes every tick (the tick after the head, nothing
        skipped), and its clock anchor moves to it: `due_ms` when it was due (the host's
        `TickClock.due_at`; None: now) and how late it published (docs/ledger.md, "Tick modes").

        A manifest whose commit token is already stored was published before (its answer was
        lost): it is recognised and not replayed.
        """
        if due_ms is not None and abs(due_ms) > MAX_SAFE_INTEGER:
            raise InvalidCommandError(f"due_ms {due_ms} is outside +/-(2**53-1)")

        def run() -> Published:
            token, tick = manifest["commit_token"], manifest["tick"]
            if self._port.execute(q.GET_TICK_BY_TOKEN, (world_id, tick, token)):
                return {"tick": tick, "published": False}
            world = self._writer(world_id, manifest["writer_epoch"])
            if tick <= world["tick_head"]:  # a later tick than head + 1 coalesces the empty ticks between
                raise StaleWriterError(f"tick {tick} does not follow the published tick head {world['tick_head']}")
            if world["tick_mode"] == "lockstep" and tick != world["tick_head"] + 1:
                raise InvalidCommandError(
                    f"world {world_id!r} is lockstep: every tick runs, so tick {tick} cannot follow tick {world['tick_head']}"
                )
            settlements = manifest["settlements"]
            self._check_settlements(world_id, owner, session, settlements)
            if not columnar.valid_runs(manifest["written_runs"]):
                raise InvalidCommandError(
                    "a manifest's written_runs are ascending [first, last] runs of entity ids, neither overlapping "
                    "nor adjacent (docs/storage.md)"
                )
            now = self._clock.now_ms()
            self._port.execute(q.INSERT_TICK, (world_id, tick, token, json.dumps(manifest, sort_keys=True), now))
            self._write_state(world_id, tick, writes)
            settled_sequences = [s["sequence"] for s in settlements]
            events = canonical_text(settled_sequences)
            if settlements:
                settled = [[s["sequence"], s["outcome"], s["error"]] for s in settlements]
                self._port.execute(q.SETTLE, (tick, now, json.dumps(settled), world_id))
            first_event = self._world(world_id)["next_event_seq"] if settlements else None
            self._release_rows(world_id, owner, session, now, set(settled_sequences))
            due = now if due_ms is None else min(due_ms, now)  # never due after it published (clock skew)
            # The session's lease entries go with the head's write, and the settlements' events with it
            # when they fit in the world row's outbox tail; otherwise they are an outbox row's (too many
            # to fit there: not offered to the tail at all).
            offered = events if len(settlements) <= q.OUTBOX_APPEND_LIMIT // q.EVENT_CHARS_MIN else "[]"
            self._port.execute(q.PUBLISH_HEAD, (tick, now, due, max(0, now - due), world_id, owner, session,
                                                first_event, offered))  # fmt: skip
            if settlements:
                self._port.execute(q.APPEND_SPILLED_EVENTS, (first_event, now, events, world_id))
            if world["health"] == "STALLED":
                self._port.execute(q.CLEAR_HEALTH, (world_id,))
                self._world_event(world_id, "world_recovered", tick, world["failed_attempts"], world["health_error"],
                                  world["stalled_since"], now)  # fmt: skip
            return {"tick": tick, "published": True}

        return self._port.transaction(run)

    def _write_state(self, world_id: str, tick: int, writes: StateWrite) -> None:
        chunks = writes["chunks"]
        firsts = []
        for chunk in chunks:
            head = _CHUNK_HEAD.match(chunk)
            if head is None or not chunk.endswith("]]" if chunk[0] == "[" else "]}") or len(chunk) > STATE_CHUNK_LIMIT:
                raise InvalidCommandError(
                    f"a state chunk is a columnar chunk or a JSON array of [entity_id, components] entries of at most "
                    f"{STATE_CHUNK_LIMIT:,} characters (docs/storage.md)"
                )
            firsts.append(int(head.group(1)))
        # Nothing published is deleted here: the state at every tick of the retention window stays
        # readable (docs/storage.md, "State at a tick"); retention deletes what no retained tick reads.
        replaces = bool(writes.get("replaces_deltas"))
        if writes["snapshot"]:
            if replaces:
                raise InvalidCommandError("a snapshot replaces the whole state; replaces_deltas is for a delta")
            if firsts != sorted(set(firsts)):
                raise InvalidCommandError("a snapshot's chunks cover ascending entity ranges")
            if not chunks:  # no entity left: the snapshot still marks its tick, or the one before would read on
                firsts, chunks = [0], [EMPTY_SNAPSHOT]
            for first, chunk in zip(firsts, chunks, strict=True):
                self._port.execute(q.INSERT_STATE_CHUNK, (world_id, tick, first, chunk))
            return
        if replaces and not chunks:
            raise InvalidCommandError("a delta that replaces the deltas carries the chunks that replace them")
        for part, chunk in enumerate(chunks):
            self._port.execute(q.INSERT_STATE_DELTA, (world_id, tick, part, chunk, int(replaces)))

    def _check_settlements(self, world_id: str, owner: str, session: str, settlements: list[Any]) -> None:
        """Every settled command is held by this session, named rightly, settled once, with a known
        outcome, and the manifest lists them in ledger order: no tick ever applies out of order."""
        for s in settlements:
            if s["outcome"] not in OUTCOMES:
                raise InvalidCommandError(f"settlement outcome {s['outcome']!r} is not one of {OUTCOMES}")
            if s["error"] is not None and len(s["error"]) > ERROR_TEXT_LIMIT:
                raise InvalidCommandError(f"a settlement error is limited to {ERROR_TEXT_LIMIT} characters")
        listed = [(s["sequence"], s["command_id"]) for s in settlements]
        if len({sequence for sequence, _ in listed}) != len(listed):
            raise InvalidCommandError("the manifest settles a command twice")
        sequences = json.dumps([sequence for sequence, _ in listed])
        held = [(r[0], r[1]) for r in self._port.execute(q.HELD_IN_ORDER, (world_id, owner, session, sequences))]
        if len(held) != len(listed):
            raise LeaseLostError(f"{len(listed) - len(held)} of the tick's commands are no longer leased by this session")
        if held != listed:
            raise InvalidCommandError("the manifest lists its commands out of (scheduled_tick, priority, sequence) order")

    # -- health --
    def record_tick_failure(self, world_id: str, owner: Label, session: Label, writer_epoch: Epoch, tick: Tick, error: str,
                            release: bool = True) -> WorldRow:  # fmt: skip
        """Record that the writer's tick `tick` failed before it was prepared (a hook or processor
        raised, the authority did not answer): one more failed attempt, the error, and the first
        failure since the last published tick stalls the world (ACTIVE -> STALLED, with its
        `world_stalled` event). The next published tick makes it ACTIVE again (`world_recovered`).

        With `release`, what the session holds is given back uncharged in the same transaction, so
        a stalled world holds no lease; a writer keeping a prepared tick passes False (its
        republication needs them). No command is charged: the tick, not a command, failed.
        """
        if len(error) > ERROR_TEXT_LIMIT:
            raise InvalidCommandError(f"a tick failure's error is limited to {ERROR_TEXT_LIMIT} characters")

        def run() -> WorldRow:
            world = self._writer(world_id, writer_epoch)
            now = self._clock.now_ms()
            self._port.execute(q.RECORD_TICK_FAILURE, (error, now, now, world_id))
            if release:
                self._release(world_id, owner, session, now)
            if world["health"] == "ACTIVE":
                self._world_event(world_id, "world_stalled", tick, world["failed_attempts"] + 1, error, now, now)
            return self._world(world_id)

        return self._port.transaction(run)

    def retry_world(self, world_id: str, actor: Name | None = None) -> WorldRow:
        """An operator's "retry now" for a STALLED world whose cause was fixed: its failed attempts
        start again from 0, with a `world_retry_requested` event carrying the attempts so far and
        naming the operator (`actor`, the principal that asked; None in-process). A
        runner waiting out the backoff those attempts set sees the count fall below what it
        recorded, and retries at once. The world stays STALLED until a tick publishes. Asking for a
        world that is not stalled, or asking twice, changes nothing."""

        def run() -> WorldRow:
            world = self._active_world(world_id)
            if world["health"] != "STALLED" or world["failed_attempts"] == 0:
                return world
            now = self._clock.now_ms()
            self._port.execute(q.RETRY_WORLD, (now, world_id))
            self._world_event(world_id, "world_retry_requested", world["tick_head"] + 1, world["failed_attempts"],
                              world["health_error"], world["stalled_since"], now, actor)  # fmt: skip
            return self._world(world_id)

        return self._port.transaction(run)

    def release(self, world_id: str, owner: Label, session: Label, writer_epoch: Epoch) -> int:
        """Give back everything this session holds, uncharged (a runner shutting down cleanly):
        PENDING, or RETRYABLE if it was ever attempted. Bookkeeping: no event. Answers how many."""

        def run() -> int:
            self._writer(world_id, writer_epoch)
            return self._release(world_id, owner, session, self._clock.now_ms())

        return self._port.transaction(run)

    def _release(self, world_id: str, owner: str, session: str, now: int) -> int:
        held = self._release_rows(world_id, owner, session, now, set())
        self._port.execute(q.DROP_SESSION_LEASES, (world_id, owner, session))
        world = self._world(world_id)
        if world["guard_session"] == session:
            self._port.execute(q.SET_GUARD, (None, None, world_id))
        return held

    def _release_rows(self, world_id: str, owner: str, session: str, now: int, settled: set[int]) -> int:
        """Write the commands this session holds, but those just `settled`, as released (their lease
        entries are the caller's to drop); answer how many it held."""
        held = [r[0] for r in self._port.execute(q.SESSION_LEASES, (world_id, owner, session))]
        tail = [sequence for sequence in held if sequence not in settled]
        if tail:
            self._port.execute(q.RELEASE_ROWS, (now, world_id, json.dumps(tail)))
        return len(held)
