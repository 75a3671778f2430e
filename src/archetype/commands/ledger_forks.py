"""Forks: a new world made of another as it was at a tick (docs/ledger.md, "Forks"). In one
store (the local catalog) `fork_world` copies it in one transaction; between two Durable Objects
the source's object fixes a plan and answers its pages, and the fork's object writes them
(`FORK_COPY_METHODS`; docs/ledger.md, "Forks on the Durable Object")."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

from archetype.canonical import MAX_SAFE_INTEGER, canonical_json
from archetype.commands import ledger_sql as q
from archetype.commands.component_check import check_components
from archetype.commands.errors import InvalidCommandError, WorldExistsError, WorldNotFoundError
from archetype.commands.identity import command_digest
from archetype.commands.ledger_core import COMMAND_FIELDS, WORLD_FIELDS, LedgerCore, named_row
from archetype.commands.ledger_rows import CommandRow, ForkBegun, ForkCursor, ForkPage, ForkPlan, TickPosition, WorldRow
from archetype.commands.state_pages import STATE_READ_CHUNKS, state_at
from archetype.world.operations import Name

# One page of a fork's copy: the rows one RPC carries (each at most a 2 MB row of the Durable
# Object's), at most this many and about this many bytes (an RPC carries 32 MiB), one row at least;
# and how many leading columns of each part's rows are its key (where the next page starts).
FORK_PAGE_ROWS = STATE_READ_CHUNKS
FORK_PAGE_BYTES = 8_000_000
FORK_PAGE_KEYS = {"snapshot": 1, "deltas": 2, "rows": 2}
# The open commands' copies a fork plan freezes per statement (a bound value stays within a row's 2 MB).
FREEZE_BATCH_BYTES = 1_000_000


def _check_fork(source_world_id: str, at_tick: int, world_id: str) -> None:
    if not (type(at_tick) is int and -1 <= at_tick <= MAX_SAFE_INTEGER):
        raise InvalidCommandError("fork_world takes a tick -1..2**53-1")
    if world_id == source_world_id:
        raise InvalidCommandError("a fork is another world: give it its own world id")


def _weight(row: Sequence[Any]) -> int:
    return sum(len(value) for value in row if isinstance(value, str))


def _within_bytes(rows: list[list[Any]]) -> list[list[Any]]:
    """The first rows within FORK_PAGE_BYTES of text (one at least)."""
    total = 0
    for index, row in enumerate(rows):
        total += _weight(row)
        if index and total > FORK_PAGE_BYTES:
            return rows[:index]
    return rows


def _batches(copies: list[list[Any]]) -> list[list[list[Any]]]:
    """The copies in order, in batches of about FREEZE_BATCH_BYTES of text."""
    batches: list[list[list[Any]]] = []
    size = 0
    for copy in copies:
        weight = _weight(copy)
        if not batches or size + weight > FREEZE_BATCH_BYTES:
            batches.append([])
            size = 0
        batches[-1].append(copy)
        size += weight
    return batches


class ForkOperations(LedgerCore):
    """The ledger's forks: `fork_world` in one store, and the Durable Objects' steps of a copy."""

    def fork_world(self, source_world_id: str, at_tick: TickPosition, world_id: str, name: Name,
                   with_open_commands: bool = False, actor: Name | None = None) -> WorldRow:  # fmt: skip
        """A new world `world_id` made of `source_world_id` as it was at `at_tick` (any tick of its
        retention window), in one transaction (docs/ledger.md, "Forks"): its published state and
        component schemas, tick head `at_tick`, the source's tick mode, a clock of its own from
        now, and, `with_open_commands`, a PENDING copy of each command scheduled after `at_tick`
        that was open at it (the same sequence and command id, its identity the fork's, linked to
        its original by `forked_from`). A `world_forked` event on both worlds names the other, and
        the `actor` who asked (None: in-process). The same fork again answers the fork as it is;
        another world under that id is `world_exists`."""
        _check_fork(source_world_id, at_tick, world_id)

        def run() -> WorldRow:
            source = self._world(source_world_id)
            existing = self._existing_fork(world_id, source_world_id, at_tick, name)
            if existing is not None:
                return existing
            self._check_retained(source, at_tick)
            now = self._clock.now_ms()
            copies = self._fork_copies(source_world_id, world_id, at_tick, with_open_commands, now)
            event = source["next_event_seq"]
            self._port.execute(q.INSERT_FORK, (world_id, name, at_tick, source["next_entity_id"], source["next_sequence"],
                                               event, now, source["tick_mode"], source["tick_interval_ms"], source_world_id))  # fmt: skip
            at = state_at(self._port, source_world_id, at_tick)
            if at.snapshot_tick is not None:
                self._port.execute(q.COPY_STATE_SNAPSHOT, (world_id, source_world_id, at.snapshot_tick))
            self._port.execute(q.COPY_STATE_DELTAS, (world_id, source_world_id, at.deltas_from, at_tick))
            self._port.execute(q.COPY_COMPONENTS, (world_id, source_world_id))
            self._port.execute(q.COPY_MIGRATIONS, (world_id, source_world_id, at_tick))
            if copies:
                self._port.execute(q.INSERT_FORKED_COMMANDS, (world_id, now, json.dumps(copies)))
            for world in (source_world_id, world_id):
                self._fork_event(world, event, source_world_id, world_id, at_tick, len(copies), now, actor)
            if copies:
                self._write_events(world_id, event + 1, json.dumps([c[1] for c in copies]), now)
            return self._world(world_id)

        return self._port.transaction(run)

    def _existing_fork(self, world_id: str, source_world_id: str, at_tick: int, name: str) -> WorldRow | None:
        """The world under the fork's id if it is this fork (the same fork again), None if there is
        none; `world_exists` if it is another world."""
        rows = self._port.execute(q.GET_WORLD, (world_id,))
        if not rows:
            return None
        existing = cast(WorldRow, named_row(WORLD_FIELDS, rows[0]))
        origin = tuple(self._port.execute(q.GET_FORK_ORIGIN, (world_id,))[0])
        if origin == (source_world_id, at_tick) and existing["name"] == name and existing["status"] == "ACTIVE":
            return existing  # an identical retry of the fork
        raise WorldExistsError(f"world {world_id!r} already exists")

    def _fork_copies(self, source_world_id: str, world_id: str, at_tick: int, with_open_commands: bool,
                     now: int) -> list[list[Any]]:  # fmt: skip
        """The fork's copies of the source's commands open at `at_tick` (none unless
        `with_open_commands`), as INSERT_FORKED_COMMANDS takes them, each passing admission's
        component check as the fork sees it: the source's recorded schemas, superseded only by the
        migrations of ticks up to `at_tick` (the fork's own)."""
        if not with_open_commands:
            return []
        left = self._port.execute(q.LEFT_TICK_AT, (source_world_id, at_tick))[0][0]
        cutoff = now if left is None else left - 1
        open_then = self._port.execute(q.OPEN_AT_TICK, (source_world_id, at_tick, cutoff))
        copies = [self._forked_command(world_id, cast(CommandRow, named_row(COMMAND_FIELDS, r[:-1])), r[-1]) for r in open_then]
        at_fork = (source_world_id, at_tick)
        check_components(world_id, [(f"command {c[2]!r}", c[7]) for c in copies],
                         lambda fps: self._port.execute(q.FIND_COMPONENTS_AT_TICK, (json.dumps(fps), *at_fork)))  # fmt: skip
        return copies

    def _fork_event(self, world_id: str, event: int, source_world_id: str, fork_world_id: str, at_tick: int,
                    commands: int, now: int, actor: Name | None) -> None:  # fmt: skip
        """The `world_forked` event of a fork on one of its two worlds."""
        record = json.dumps({"source_world_id": source_world_id, "world_id": fork_world_id, "at_tick": at_tick,
                             "commands": commands, "actor": actor}, sort_keys=True)  # fmt: skip
        self._port.execute(q.APPEND_SCHEMA_EVENT, (world_id, event, f"world-fork/{fork_world_id}", "world_forked",
                                                   "fork_world", at_tick, now, record))  # fmt: skip

    @staticmethod
    def _forked_command(world_id: str, original: CommandRow, scope: str) -> list[Any]:
        """A fork's copy of a command open at the fork's tick, as INSERT_FORKED_COMMANDS takes it:
        its sequence, command id and content, its payload naming the fork (a payload names its
        world), its identity (digest) the fork's."""
        payload = json.loads(original["payload"])
        if "world_id" in payload:
            payload["world_id"] = world_id
        row: dict[str, Any] = {**original, "world_id": world_id, "payload": canonical_json(payload)}
        row["digest"] = command_digest(row)
        return [scope, original["sequence"], *(row[field] for field in q.INSERTED_COMMAND_FIELDS), original["sequence"]]

    # -- forks on the Durable Object (docs/ledger.md, "Forks on the Durable Object"): the source's
    # object fixes a plan (`fork_plan`) and answers its pages (`fork_page`); the fork's object
    # records the plan (`fork_begin`), writes each page with its progress (`fork_write`), and
    # activates the fork (`fork_activate`); the source then lets the plan go (`fork_release`) --
    def fork_plan(self, world_id: str, fork_world_id: str, at_tick: TickPosition, name: Name,
                  with_open_commands: bool = False, actor: Name | None = None) -> ForkPlan:  # fmt: skip
        """On the source's object, in one transaction: fix the fork of `world_id` at `at_tick` as
        `fork_world_id`, write the source's `world_forked` event (naming `actor`, as the plan does
        for the fork's), and freeze what later activity
        could change (recorded schemas, migrations up to `at_tick`, the open commands' copies);
        the state rows the fork copies stay (retention keeps them until `fork_release`). The same
        plan again answers it as it is; another fork under that id is `world_exists`."""
        _check_fork(world_id, at_tick, fork_world_id)

        def run() -> ForkPlan:
            source = self._world(world_id)
            rows = self._port.execute(q.GET_FORK_PLAN, (world_id, fork_world_id))
            if rows:
                fixed = cast(ForkPlan, json.loads(rows[0][0]))
                if (fixed["at_tick"], fixed["name"]) != (at_tick, name):
                    raise WorldExistsError(f"world {fork_world_id!r} already exists")
                return fixed
            self._check_retained(source, at_tick)
            now = self._clock.now_ms()
            copies = self._fork_copies(world_id, fork_world_id, at_tick, with_open_commands, now)
            at = state_at(self._port, world_id, at_tick)
            plan: ForkPlan = {
                "source_world_id": world_id, "world_id": fork_world_id, "name": name, "at_tick": at_tick,
                "forked_at": now, "event_seq": source["next_event_seq"], "next_sequence": source["next_sequence"],
                "next_entity_id": source["next_entity_id"], "tick_mode": source["tick_mode"],
                "tick_interval_ms": source["tick_interval_ms"], "snapshot_tick": at.snapshot_tick,
                "deltas_from": at.deltas_from, "last_part": self._port.execute(q.NEXT_DELTA_PART, (world_id, at_tick))[0][0] - 1,
                "commands": len(copies), "actor": actor,
            }  # fmt: skip
            self._port.execute(q.INSERT_FORK_PLAN, (world_id, fork_world_id, at_tick, json.dumps(plan)))
            self._port.execute(q.FREEZE_FORK_COMPONENTS, (world_id, fork_world_id))
            self._port.execute(q.FREEZE_FORK_MIGRATIONS, (world_id, fork_world_id, at_tick))
            for batch in _batches(copies):
                self._port.execute(q.FREEZE_FORK_COMMANDS, (world_id, fork_world_id, json.dumps(batch)))
            self._fork_event(world_id, plan["event_seq"], world_id, fork_world_id, at_tick, len(copies), now, actor)
            return plan

        return self._port.transaction(run)

    def fork_page(self, world_id: str, fork_world_id: str, cursor: list[Any]) -> ForkPage:
        """On the source's object: the page of the fork's copy at `cursor` (at most FORK_PAGE_ROWS
        rows and about FORK_PAGE_BYTES, one row at least): the snapshot's chunks, then the deltas
        over it up to the fork's tick, then the frozen rows; `next` is the cursor after it (None:
        the copy is complete)."""

        def run() -> ForkPage:
            rows = self._port.execute(q.GET_FORK_PLAN, (world_id, fork_world_id))
            if not rows or rows[0][1]:
                raise InvalidCommandError(f"world {world_id!r} has no fork {fork_world_id!r} being copied")
            plan = cast(ForkPlan, json.loads(rows[0][0]))
            if not (isinstance(cursor, list) and cursor and cursor[0] in FORK_PAGE_KEYS
                    and len(cursor) == FORK_PAGE_KEYS[cursor[0]] + 1):  # fmt: skip
                raise InvalidCommandError(f"no page of a fork's copy starts at {cursor!r}")
            part, *after = cursor
            if part == "snapshot":
                found = [] if plan["snapshot_tick"] is None else self._port.execute(
                    q.FORK_SNAPSHOT_PAGE, (world_id, plan["snapshot_tick"], after[0], FORK_PAGE_ROWS))  # fmt: skip
                start: ForkCursor = ["deltas", plan["deltas_from"], -1]
            elif part == "deltas":
                found = self._port.execute(q.FORK_DELTAS_PAGE, (world_id, after[0], after[1], plan["at_tick"],
                                                                plan["last_part"], FORK_PAGE_ROWS))  # fmt: skip
                start = ["rows", "", 0]
            else:  # the frozen rows
                found = self._port.execute(q.FORK_ROWS_PAGE, (world_id, fork_world_id, after[0], after[1], FORK_PAGE_ROWS))
                start = None
            page = _within_bytes([list(row) for row in found])
            if len(page) == len(found) < FORK_PAGE_ROWS:  # the part is copied: the next page starts the next part
                return {"cursor": cursor, "rows": page, "next": start}
            return {"cursor": cursor, "rows": page, "next": [part, *page[-1][: FORK_PAGE_KEYS[part]]]}

        return self._port.transaction(run)

    def fork_release(self, world_id: str, fork_world_id: str) -> None:
        """On the source's object, once the fork is active: drop the plan's frozen rows and stop
        keeping its state rows (the plan itself stays: it answers the same fork again)."""

        def run() -> None:
            self._port.execute(q.RELEASE_FORK_PLAN, (world_id, fork_world_id))
            self._port.execute(q.DROP_FORK_ROWS, (world_id, fork_world_id))

        self._port.transaction(run)

    def fork_begin(self, world_id: str, source_world_id: str, at_tick: TickPosition, name: Name,
                   plan: ForkPlan | None = None) -> ForkBegun:  # fmt: skip
        """On the fork's object: where the fork of `source_world_id` at `at_tick` as `world_id`
        stands. `world`: it is active (the same fork again); else `cursor`, the page to copy next
        (None: all copied) of the copy in progress, recording `plan` first if none is (`started`
        False: there is none and no plan was given). Another world or fork under that id is
        `world_exists`."""
        _check_fork(source_world_id, at_tick, world_id)

        def run() -> ForkBegun:
            existing = self._existing_fork(world_id, source_world_id, at_tick, name)
            if existing is not None:
                return {"world": existing, "started": True, "cursor": None}
            rows = self._port.execute(q.GET_FORK_COPY, (world_id,))
            if rows:
                recorded = cast(ForkPlan, json.loads(rows[0][0]))
                if (recorded["source_world_id"], recorded["at_tick"], recorded["name"]) != (source_world_id, at_tick, name):
                    raise WorldExistsError(f"world {world_id!r} already exists")
                return {"world": None, "started": True, "cursor": json.loads(rows[0][1] or "null")}
            if plan is None:
                return {"world": None, "started": False, "cursor": None}
            start: ForkCursor = ["snapshot", -1]
            self._port.execute(q.INSERT_FORK_COPY, (world_id, json.dumps(plan), json.dumps(start)))
            return {"world": None, "started": True, "cursor": start}

        return self._port.transaction(run)

    def fork_write(self, world_id: str, page: ForkPage) -> ForkCursor:
        """On the fork's object: write one page of the copy and the cursor after it, in one
        transaction, so a copy interrupted anywhere resumes at the first page not written; a page
        not at the copy's cursor (one already written) writes nothing. Answers the cursor."""

        def run() -> ForkCursor:
            rows = self._port.execute(q.GET_FORK_COPY, (world_id,))
            if not rows:
                raise WorldNotFoundError(f"world {world_id!r} is not being copied")
            plan, cursor = cast(ForkPlan, json.loads(rows[0][0])), json.loads(rows[0][1] or "null")
            if page["cursor"] != cursor:
                return cast(ForkCursor, cursor)
            part = cursor[0]
            for row in page["rows"]:
                if part == "snapshot":
                    self._port.execute(q.INSERT_STATE_CHUNK, (world_id, plan["snapshot_tick"], row[0], row[1]))
                elif part == "deltas":
                    self._port.execute(q.INSERT_STATE_DELTA, (world_id, *row[:4]))
                elif row[0] == "component":
                    self._port.execute(q.INSERT_FORKED_COMPONENT, (world_id, *json.loads(row[2])))
                elif row[0] == "migration":
                    self._port.execute(q.INSERT_FORKED_MIGRATION, (world_id, *json.loads(row[2])))
                else:
                    self._port.execute(q.INSERT_FORKED_COMMANDS, (world_id, plan["forked_at"], f"[{row[2]}]"))
            self._port.execute(q.ADVANCE_FORK_COPY, (None if page["next"] is None else json.dumps(page["next"]), world_id))
            return page["next"]

        return self._port.transaction(run)

    def fork_activate(self, world_id: str) -> WorldRow:
        """On the fork's object, once every page is written: the fork's world row (its clock from
        now), its `world_forked` event and its copies' `admitted` events, as `fork_world` writes
        them, in one transaction; from then on it is a world like any other. An active fork answers
        its row."""

        def run() -> WorldRow:
            if self._port.execute(q.GET_WORLD, (world_id,)):
                return self._world(world_id)
            rows = self._port.execute(q.GET_FORK_COPY, (world_id,))
            if not rows:
                raise WorldNotFoundError(f"world {world_id!r} does not exist")
            if rows[0][1] is not None:
                raise InvalidCommandError(f"the copy of fork {world_id!r} is not complete: fork_world again completes it")
            plan = cast(ForkPlan, json.loads(rows[0][0]))
            event, forked_at = plan["event_seq"], plan["forked_at"]
            self._port.execute(q.DROP_FORK_COPY, (world_id,))
            self._port.execute(q.INSERT_FORK, (world_id, plan["name"], plan["at_tick"], plan["next_entity_id"],
                                               plan["next_sequence"], event, self._clock.now_ms(), plan["tick_mode"],
                                               plan["tick_interval_ms"], plan["source_world_id"]))  # fmt: skip
            # .get: a plan fixed before plans named the actor names nobody
            self._fork_event(world_id, event, plan["source_world_id"], world_id, plan["at_tick"], plan["commands"], forked_at,
                             plan.get("actor"))  # fmt: skip
            sequences = [sequence for (sequence,) in self._port.execute(q.FORKED_SEQUENCES, (world_id,))]
            if sequences:
                self._write_events(world_id, event + 1, json.dumps(sequences), forked_at)
            return self._world(world_id)

        return self._port.transaction(run)
