"""The command ledger: the one state machine both authorities run, over a `SqlPort`.

Every public method is one atomic transaction whose arguments and results are plain JSON values,
so the local authority calls it in-process and the Durable Object exposes it over RPC unchanged.
The state machine is drawn in docs/ledger.md:

    PENDING --lease--> LEASED --publish--> APPLIED
       ^                 |  \\--fail(permanent)--> REJECTED
       |                 |   \\--fail(retryable, budget left)--> RETRYABLE --lease--> LEASED
       +----release------+    \\--fail(retryable, budget spent) / takeover past budget--> DEAD_LETTER
    any open status --destroy--> CANCELLED

Every named transition appends its outbox event in the same transaction.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from archetype.commands import ledger_sql as q
from archetype.commands.errors import (
    CommandConflictError,
    InvalidCommandError,
    LeaseLostError,
    QuotaExceededError,
    ReservationNotOwnedError,
    StaleWriterError,
    WorldClosingError,
    WorldExistsError,
    WorldNotFoundError,
)
from archetype.commands.identity import command_digest
from archetype.commands.port import Clock, SqlPort

COMMAND_FIELDS = tuple(name.strip() for name in q.COMMAND_COLUMNS.split(","))
WORLD_FIELDS = tuple(name.strip() for name in q.WORLD_COLUMNS.split(","))
OUTBOX_FIELDS = tuple(name.strip() for name in q.OUTBOX_COLUMNS.split(","))
ADMISSION_FIELDS = (
    "command_id", "schema_version", "scheduled_tick", "priority", "operation", "payload",
    "principal", "origin", "max_attempts", "reserved_entity_id",
)  # fmt: skip
ORIGINS = ("local", "gateway")
ERROR_TEXT_LIMIT = 500

# Public operations, in the order docs/ledger.md describes them. The Durable Object exposes exactly these.
LEDGER_METHODS = (
    "create_world", "world_info", "list_worlds", "acquire_writer", "load_state", "reserve_entity_ids",
    "reserve_spawn", "admit", "lease", "release", "fail", "publish", "destroy", "command", "history",
    "manifests", "read_outbox", "read_outbox_columns", "acknowledge_outbox", "watermark",
)  # fmt: skip


def _row(fields: Sequence[str], values: Sequence[Any]) -> dict[str, Any]:
    return dict(zip(fields, values, strict=True))


class Ledger:
    def __init__(self, port: SqlPort, clock: Clock) -> None:
        self._port = port
        self._clock = clock
        port.transaction(self._migrate)

    def _migrate(self) -> None:
        for statement in q.SCHEMA:
            self._port.execute(statement)
        rows = self._port.execute(q.GET_SCHEMA_VERSION)
        if not rows:
            self._port.execute(q.SET_SCHEMA_VERSION, (str(q.SCHEMA_VERSION),))
        elif int(rows[0][0]) != q.SCHEMA_VERSION:
            raise RuntimeError(f"ledger schema version {rows[0][0]} is not {q.SCHEMA_VERSION}; no migration exists")

    # -- helpers (run inside a caller's transaction) --
    def _world(self, world_id: str) -> dict[str, Any]:
        rows = self._port.execute(q.GET_WORLD, (world_id,))
        if not rows:
            raise WorldNotFoundError(f"world {world_id!r} does not exist")
        return _row(WORLD_FIELDS, rows[0])

    def _active_world(self, world_id: str) -> dict[str, Any]:
        world = self._world(world_id)
        if world["status"] != "ACTIVE":
            raise WorldClosingError(f"world {world_id!r} is {world['status']}; it admits nothing")
        return world

    def _writer(self, world_id: str, writer_epoch: int) -> dict[str, Any]:
        world = self._active_world(world_id)
        if world["writer_epoch"] != writer_epoch:
            raise StaleWriterError(
                f"writer epoch {writer_epoch} of world {world_id!r} was superseded by epoch {world['writer_epoch']}"
            )
        return world

    def _append_events(self, world_id: str, command_ids: list[str], event_type: str, now: int) -> None:
        if not command_ids:
            return
        first = self._world(world_id)["next_event_seq"]
        self._write_events(world_id, first, json.dumps(command_ids), event_type, now)
        self._port.execute(q.TAKE_EVENT_SEQS, (len(command_ids), world_id))

    def _write_events(self, world_id: str, first: int, command_ids_json: str, event_type: str, now: int) -> None:
        """Events numbered from `first`; the caller takes those sequence numbers from the world row."""
        self._port.execute(q.APPEND_EVENTS, (first, first, event_type, now, command_ids_json, world_id))

    def _settle(self, world_id: str, command_ids: list[str], status: str, event_type: str, *,
                applied_tick: int | None = None, error: str | None = None) -> None:  # fmt: skip
        now = self._clock.now_ms()
        self._port.execute(
            q.SETTLE_COMMANDS, (status, applied_tick, error, now, world_id, json.dumps(command_ids))
        )
        self._append_events(world_id, command_ids, event_type, now)

    # -- worlds --
    def create_world(self, world_id: str, name: str) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            rows = self._port.execute(q.GET_WORLD, (world_id,))
            if rows:
                existing = _row(WORLD_FIELDS, rows[0])
                if existing["name"] == name and existing["status"] == "ACTIVE":
                    return existing  # an identical retry of the creation
                raise WorldExistsError(f"world {world_id!r} already exists")
            now = self._clock.now_ms()
            self._port.execute(q.INSERT_WORLD, (world_id, name, now, now))
            return self._world(world_id)

        return self._port.transaction(run)

    def world_info(self, world_id: str) -> dict[str, Any]:
        return self._port.transaction(lambda: self._world(world_id))

    def list_worlds(self) -> list[dict[str, Any]]:
        return self._port.transaction(lambda: [_row(WORLD_FIELDS, r) for r in self._port.execute(q.LIST_WORLDS)])

    def acquire_writer(self, world_id: str) -> dict[str, Any]:
        """Fence every earlier writer: their publishes now fail with StaleWriterError."""

        def run() -> dict[str, Any]:
            self._active_world(world_id)
            self._port.execute(q.BUMP_WRITER_EPOCH, (self._clock.now_ms(), world_id))
            return self._world(world_id)

        return self._port.transaction(run)

    def load_state(self, world_id: str, after_entity_id: int = 0, limit: int = 10_000) -> dict[str, Any]:
        """The world's published state at its tick head, one page of entities at a time."""

        def run() -> dict[str, Any]:
            world = self._world(world_id)
            rows = self._port.execute(q.LIST_ENTITIES, (world_id, after_entity_id, limit))
            return {
                "tick_head": world["tick_head"],
                "writer_epoch": world["writer_epoch"],
                "entities": [{"entity_id": r[0], "components": json.loads(r[1])} for r in rows],
            }

        return self._port.transaction(run)

    def reserve_entity_ids(self, world_id: str, count: int) -> int:
        """Take `count` never-used entity ids; return the first. Ids are never handed out twice."""
        if not 1 <= count <= 1_000_000:
            raise InvalidCommandError(f"cannot reserve {count} entity ids (1..1000000)")

        def run() -> int:
            first = self._active_world(world_id)["next_entity_id"]
            self._port.execute(q.TAKE_ENTITY_IDS, (count, self._clock.now_ms(), world_id))
            return first

        return self._port.transaction(run)

    def reserve_spawn(self, world_id: str, command_id: str, request_digest: str, quota: int | None = None,
                      principal: str | None = None, scheduled_tick: int = 0) -> int:  # fmt: skip
        """Bind exactly one entity id to a spawn command; a retry with the same request gets it back.

        With a `quota`, a spawn its admission would refuse reserves nothing (admission charges it).
        """

        def run() -> int:
            rows = self._port.execute(q.GET_RESERVATION, (world_id, command_id))
            if rows:
                if rows[0][1] != request_digest:
                    raise CommandConflictError(f"command {command_id!r} already reserved an entity for another request")
                return rows[0][0]
            if self._port.execute(q.GET_COMMAND, (world_id, command_id)):
                raise CommandConflictError(f"command {command_id!r} already exists and is not this spawn")
            first = self._active_world(world_id)["next_entity_id"]
            if quota is not None:
                self._check_quota(world_id, {(principal or "", scheduled_tick): 1}, quota)
            now = self._clock.now_ms()
            self._port.execute(q.TAKE_ENTITY_IDS, (1, now, world_id))
            self._port.execute(q.INSERT_RESERVATION, (world_id, command_id, first, request_digest, now))
            return first

        return self._port.transaction(run)

    # -- admission --
    def admit(self, world_id: str, commands: list[dict[str, Any]], quota: int | None = None) -> list[dict[str, Any]]:
        """Admit a non-empty batch all-or-nothing; identical replays return their existing identity.

        `quota` caps how many commands one principal may have admitted for one target tick of this
        world; only newly admitted commands count against it.
        """
        if not commands:
            raise InvalidCommandError("a batch needs at least one command")
        rows = [self._admission_row(world_id, c) for c in commands]
        ids = [r["command_id"] for r in rows]
        if len(set(ids)) != len(ids):
            raise InvalidCommandError("a batch names the same command id twice")

        ids_json = json.dumps(ids)

        def run() -> list[dict[str, Any]]:
            world = self._active_world(world_id)
            existing = {r[0]: (r[1], r[2]) for r in self._port.execute(q.FIND_COMMANDS, (ids_json, world_id))}
            fresh = []
            for row in rows:
                if row["command_id"] in existing:
                    if existing[row["command_id"]][0] != row["digest"]:
                        raise CommandConflictError(
                            f"command {row['command_id']!r} was admitted with different content"
                        )
                else:
                    fresh.append(row)
            self._check_reservations(world_id, fresh)
            self._charge_quota(world_id, fresh, quota)
            now = self._clock.now_ms()
            for offset, row in enumerate(fresh):
                row["sequence"] = world["next_sequence"] + offset
            if fresh:
                # one world-row update takes both the command and the event sequence numbers (the
                # world row read above is current: nothing in this transaction appended events yet)
                self._port.execute(q.TAKE_ADMISSION_SEQS, (len(fresh), len(fresh), world_id))
                inserted = [[r[field] for field in q.INSERTED_COMMAND_FIELDS] for r in fresh]
                self._port.execute(q.INSERT_COMMANDS, (world_id, now, now, json.dumps(inserted)))
                fresh_ids = ids_json if len(fresh) == len(rows) else json.dumps([r["command_id"] for r in fresh])
                self._write_events(world_id, world["next_event_seq"], fresh_ids, "admitted", now)
            sequences = {r["command_id"]: r["sequence"] for r in fresh}
            return [
                {
                    "command_id": r["command_id"],
                    "sequence": sequences.get(r["command_id"]) or existing[r["command_id"]][1],
                    "replayed": r["command_id"] not in sequences,
                    "digest": r["digest"],
                }
                for r in rows
            ]

        return self._port.transaction(run)

    def _admission_row(self, world_id: str, command: dict[str, Any]) -> dict[str, Any]:
        unknown = set(command) - set(ADMISSION_FIELDS)
        missing = set(ADMISSION_FIELDS) - set(command)
        if unknown or missing:
            raise InvalidCommandError(f"admission row has unknown {sorted(unknown)} / missing {sorted(missing)} fields")
        if command["origin"] not in ORIGINS:
            raise InvalidCommandError(f"origin must be one of {ORIGINS}")
        row = {**command, "world_id": world_id}
        row["digest"] = command_digest(row)
        return row

    def _check_reservations(self, world_id: str, rows: list[dict[str, Any]]) -> None:
        spawns = [r for r in rows if r["operation"] == "spawn_reserved"]
        if not spawns:
            return
        owned = dict(
            self._port.execute(q.FIND_RESERVATIONS, (json.dumps([r["command_id"] for r in spawns]), world_id))
        )
        for row in spawns:
            if owned.get(row["command_id"]) != row["reserved_entity_id"]:
                raise ReservationNotOwnedError(
                    f"command {row['command_id']!r} does not own a reservation of entity {row['reserved_entity_id']}"
                )

    def _charge_quota(self, world_id: str, rows: list[dict[str, Any]], quota: int | None) -> None:
        if quota is None:
            return
        wanted: dict[tuple[str, int], int] = {}
        for row in rows:
            key = (row["principal"] or "", row["scheduled_tick"])
            wanted[key] = wanted.get(key, 0) + 1
        self._check_quota(world_id, wanted, quota)
        for (principal, tick), count in wanted.items():
            self._port.execute(q.ADD_QUOTA_USAGE, (world_id, principal, tick, count))

    def _check_quota(self, world_id: str, wanted: dict[tuple[str, int], int], quota: int) -> None:
        for (principal, tick), count in wanted.items():
            used_rows = self._port.execute(q.GET_QUOTA_USAGE, (world_id, principal, tick))
            used = used_rows[0][0] if used_rows else 0
            if used + count > quota:
                raise QuotaExceededError(
                    f"{principal or 'trusted caller'} may admit {quota} commands for tick {tick} of world "
                    f"{world_id!r}; {used} already admitted, {count} more asked"
                )

    # -- leasing --
    def lease(self, world_id: str, owner: str, writer_epoch: int, tick: int, limit: int, lease_ms: int) -> list[dict[str, Any]]:
        """Lease due commands in (scheduled_tick, priority, sequence) order; never deletes a row.

        Rows this owner already holds are renewed without a new attempt. A row another owner holds
        stops the lease there until its expiry (order is never skipped); after expiry it is taken
        over, charging an attempt, or dead-lettered if its budget is spent.
        """

        def run() -> list[dict[str, Any]]:
            self._writer(world_id, writer_epoch)
            now = self._clock.now_ms()
            due = [_row(COMMAND_FIELDS, r) for r in self._port.execute(q.DUE_COMMANDS, (world_id, tick, limit))]
            renew, take, dead = [], [], []
            for row in due:
                if row["status"] == "LEASED" and row["lease_owner"] == owner:
                    renew.append(row)
                elif row["status"] == "LEASED" and row["lease_expires_at"] > now:
                    break
                elif row["attempts"] >= row["max_attempts"]:
                    dead.append(row)
                else:
                    take.append(row)
            expires = now + lease_ms
            for rows, charge in ((renew, 0), (take, 1)):
                if rows:
                    ids = json.dumps([r["command_id"] for r in rows])
                    self._port.execute(q.LEASE_COMMANDS, (owner, expires, charge, now, world_id, ids))
            if dead:
                self._settle(world_id, [r["command_id"] for r in dead], "DEAD_LETTER", "dead_lettered",
                             error="attempt budget spent before the lease could be taken over")  # fmt: skip
            taken = {r["command_id"] for r in take}
            leased = sorted(renew + take, key=lambda r: (r["scheduled_tick"], r["priority"], r["sequence"]))
            for row in leased:
                row.update(status="LEASED", lease_owner=owner, lease_expires_at=expires, updated_at=now)
                row["attempts"] += row["command_id"] in taken
            return leased

        return self._port.transaction(run)

    def release(self, world_id: str, owner: str, command_ids: list[str]) -> int:
        """Give leased rows back without charging their attempt (the unprocessed tail of a drain)."""

        def run() -> int:
            self._port.execute(q.RELEASE_COMMANDS, (self._clock.now_ms(), world_id, owner, json.dumps(command_ids)))
            return len(command_ids)

        return self._port.transaction(run)

    def fail(self, world_id: str, owner: str, writer_epoch: int, command_id: str, permanent: bool, error: str) -> str:
        """Settle one failed leased command: REJECTED, RETRYABLE or (budget spent) DEAD_LETTER.

        Like publication, a settlement re-checks the writer epoch and the lease owner.
        """

        def run() -> str:
            self._writer(world_id, writer_epoch)
            rows = self._port.execute(q.GET_COMMAND, (world_id, command_id))
            row = _row(COMMAND_FIELDS, rows[0]) if rows else None
            if row is None or row["status"] != "LEASED" or row["lease_owner"] != owner:
                raise LeaseLostError(f"command {command_id!r} is not leased by {owner!r}")
            text = error[:ERROR_TEXT_LIMIT]
            if permanent:
                status, event = "REJECTED", "rejected"
            elif row["attempts"] >= row["max_attempts"]:
                status, event = "DEAD_LETTER", "dead_lettered"
            else:
                status, event = "RETRYABLE", "retry_scheduled"
            self._settle(world_id, [command_id], status, event, error=text)
            return status

        return self._port.transaction(run)

    # -- publication --
    def publish(self, world_id: str, owner: str, manifest: dict[str, Any], writes: list[dict[str, Any]]) -> dict[str, Any]:
        """Publish one tick: manifest, entity write-set, APPLIED settlements and outbox, tick head.

        A manifest whose commit token is already stored was published before (its answer was
        lost): it is recognised and not replayed.
        """

        def run() -> dict[str, Any]:
            token, tick = manifest["commit_token"], manifest["tick"]
            if self._port.execute(q.GET_TICK_BY_TOKEN, (world_id, token)):
                return {"tick": tick, "published": False}
            world = self._writer(world_id, manifest["writer_epoch"])
            if tick != world["tick_head"] + 1:
                raise StaleWriterError(f"tick {tick} does not follow the published tick head {world['tick_head']}")
            applied = list(manifest["applied_command_ids"])
            ids = json.dumps(applied)
            held = self._port.execute(q.COUNT_LEASED_BY, (world_id, owner, ids))[0][0]
            if held != len(applied):
                raise LeaseLostError(f"{len(applied) - held} of the tick's commands are no longer leased by {owner!r}")
            now = self._clock.now_ms()
            self._port.execute(q.INSERT_TICK, (world_id, tick, token, json.dumps(manifest, sort_keys=True), now))
            encoded = json.dumps(writes)
            self._port.execute(q.UPSERT_ENTITIES, (world_id, tick, encoded))
            self._port.execute(q.DELETE_ENTITIES, (world_id, encoded))
            self._settle(world_id, applied, "APPLIED", "applied", applied_tick=tick)
            self._port.execute(q.SET_TICK_HEAD, (tick, now, world_id))
            return {"tick": tick, "published": True}

        return self._port.transaction(run)

    # -- destroy --
    def destroy(self, world_id: str) -> dict[str, Any]:
        """Close admission, cancel every unsettled command, then mark the world DESTROYED.

        Two transactions: the first makes every later admission fail with WorldClosingError; the
        second cancels what was admitted before it. Re-running finishes an interrupted destroy.
        """

        def close() -> None:
            world = self._world(world_id)
            if world["status"] == "ACTIVE":
                self._port.execute(q.SET_WORLD_STATUS, ("CLOSING", self._clock.now_ms(), world_id))

        def cancel() -> dict[str, Any]:
            if self._world(world_id)["status"] == "DESTROYED":
                return {"cancelled": 0}
            ids = [r[0] for r in self._port.execute(q.OPEN_COMMAND_IDS, (world_id,))]
            if ids:
                self._settle(world_id, ids, "CANCELLED", "cancelled", error="world destroyed")
            self._port.execute(q.SET_WORLD_STATUS, ("DESTROYED", self._clock.now_ms(), world_id))
            return {"cancelled": len(ids)}

        self._port.transaction(close)
        return self._port.transaction(cancel)

    # -- reads --
    def command(self, world_id: str, command_id: str) -> dict[str, Any] | None:
        def run() -> dict[str, Any] | None:
            self._world(world_id)
            rows = self._port.execute(q.GET_COMMAND, (world_id, command_id))
            return _row(COMMAND_FIELDS, rows[0]) if rows else None

        return self._port.transaction(run)

    def history(self, world_id: str, status: str | None = None, after_sequence: int = 0, limit: int = 100) -> list[dict[str, Any]]:
        def run() -> list[dict[str, Any]]:
            self._world(world_id)
            rows = self._port.execute(q.HISTORY, (world_id, after_sequence, status, status, limit))
            return [_row(COMMAND_FIELDS, r) for r in rows]

        return self._port.transaction(run)

    def manifests(self, world_id: str, after_tick: int = -1, limit: int = 100) -> list[dict[str, Any]]:
        return self._port.transaction(
            lambda: [json.loads(r[0]) for r in self._port.execute(q.LIST_TICKS, (world_id, after_tick, limit))]
        )

    # -- outbox --
    def read_outbox(self, world_id: str, after_seq: int = 0, limit: int = 100) -> list[dict[str, Any]]:
        """Unacknowledged events after `after_seq`, in sequence order, one dict per event."""
        return [_row(OUTBOX_FIELDS, r) for r in self._outbox_page(q.READ_OUTBOX, world_id, after_seq, limit)]

    def read_outbox_columns(self, world_id: str, after_seq: int = 0, limit: int = 100) -> dict[str, list[Any]]:
        """The same page as `read_outbox`, column by column (field name -> values): what a columnar
        projector wants, without building a Python object per event."""
        (arrays,) = self._outbox_page(q.READ_OUTBOX_COLUMNS, world_id, after_seq, limit)
        columns = {field: json.loads(array) for field, array in zip(OUTBOX_FIELDS, arrays, strict=True)}
        sequences = columns["event_seq"]
        if sequences != sorted(sequences):  # SQLite keeps the subquery's order; checked, never assumed
            order = sorted(range(len(sequences)), key=sequences.__getitem__)
            columns = {field: [values[i] for i in order] for field, values in columns.items()}
        return columns

    def _outbox_page(self, statement: str, world_id: str, after_seq: int, limit: int) -> list[tuple]:
        def run() -> list[tuple]:
            after = max(after_seq, self._world(world_id)["projected_seq"])
            return self._port.execute(statement, (world_id, after, limit))

        return self._port.transaction(run)

    def acknowledge_outbox(self, world_id: str, up_to_seq: int) -> dict[str, Any]:
        """Record that events up to `up_to_seq` are projected; they leave the outbox."""

        def run() -> dict[str, Any]:
            world = self._world(world_id)
            if up_to_seq >= world["next_event_seq"]:
                raise InvalidCommandError(f"event {up_to_seq} of world {world_id!r} was never written")
            self._port.execute(q.SET_PROJECTED_SEQ, (up_to_seq, world_id, up_to_seq))
            self._port.execute(q.DELETE_OUTBOX_UPTO, (world_id, up_to_seq))
            return self._watermark(world_id)

        return self._port.transaction(run)

    def watermark(self, world_id: str) -> dict[str, Any]:
        return self._port.transaction(lambda: self._watermark(world_id))

    def _watermark(self, world_id: str) -> dict[str, Any]:
        world = self._world(world_id)
        committed = world["next_event_seq"] - 1
        return {
            "world_id": world_id,
            "committed_seq": committed,
            "projected_seq": world["projected_seq"],
            "pending": committed - world["projected_seq"],
        }
