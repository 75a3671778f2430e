"""Admission (docs/ledger.md, "Admission"): entity ids and spawn reservations taken ahead of a
spawn, and `admit`, a batch of one principal's commands admitted all-or-nothing in one
transaction with idempotency (an identical replay answers the existing identity, other content
under the same id is a conflict), the component check, and the per-tick quota."""

from __future__ import annotations

import operator
from typing import Any, cast

from archetype.canonical import canonical_text, loads
from archetype.commands import ledger_sql as q
from archetype.commands.component_check import Found, check_found
from archetype.commands.errors import (
    CommandConflictError,
    InvalidCommandError,
    QuotaExceededError,
    ReservationNotOwnedError,
    WorldClosingError,
    WorldNotFoundError,
)
from archetype.commands.identity import command_digest
from archetype.commands.ledger_core import LedgerCore, scope_of
from archetype.commands.ledger_rows import MAX_RESERVE, AdmissionRow, Admitted, CommandId, Quota, ReserveCount, Tick
from archetype.world.component_schema import occurrences
from archetype.world.operations import Name

ADMISSION_KEYS = frozenset(AdmissionRow.__annotations__)
# The order a row's keys come in from the scheduler (and AdmissionRow's): compared before the set,
# a tuple of the same interned keys compares by identity, where the set hashes each key again.
_ADMISSION_ORDER = tuple(AdmissionRow.__annotations__)
# The statements writing admitted commands and the submitted values their rows bind (ledger_sql.ADMITTED_INSERTS),
# by whether some row of the batch has each of ledger_sql.NULLABLE_COMMAND_FIELDS
_INSERTS = {
    tuple(field not in nulls for field in q.NULLABLE_COMMAND_FIELDS): (each, bulk, operator.itemgetter(*fields))
    for nulls, (each, bulk, fields) in q.ADMITTED_INSERTS.items()
}
ORIGINS = ("local", "gateway")


def _command_label(command_id: str) -> str:
    return f"command {command_id!r}"


def runs_at(scheduled_tick: int, tick_head: int) -> int:
    """The tick a command admitted now runs at: its target, or the next tick for a target already
    past (docs/ledger.md, "Ordering and leasing"). Quotas count this tick; a redrive is due at it."""
    return max(scheduled_tick, tick_head + 1)


class AdmissionOperations(LedgerCore):
    """The ledger's admission: `reserve_entity_ids`, `reserve_spawn` and `admit`."""

    def reserve_entity_ids(self, world_id: str, count: ReserveCount) -> int:
        """Take `count` never-used entity ids; return the first. Ids are never handed out twice."""
        if not 1 <= count <= MAX_RESERVE:
            raise InvalidCommandError(f"cannot reserve {count} entity ids (1..{MAX_RESERVE})")

        def run() -> int:
            first = self._active_world(world_id)["next_entity_id"]
            self._port.execute(q.TAKE_ENTITY_IDS, (count, self._clock.now_ms(), world_id))
            return first

        return self._port.transaction(run)

    def reserve_spawn(self, world_id: str, command_id: CommandId, principal: Name | None, request_digest: str,
                      scheduled_tick: Tick, quota: Quota | None = None) -> int:  # fmt: skip
        """Bind exactly one entity id to a principal's spawn command; the same request gets it back.

        A different request under that command id conflicts and allocates nothing. With a `quota`,
        a spawn its admission would refuse reserves nothing (admission charges it).
        """
        scope = scope_of(principal)

        def run() -> int:
            rows = self._port.execute(q.GET_RESERVATION, (world_id, scope, command_id))
            if rows:
                if rows[0][1] != request_digest:
                    raise CommandConflictError(f"command {command_id!r} already reserved an entity for another request")
                return cast(int, rows[0][0])
            if self._port.execute(q.GET_COMMAND, (world_id, scope, command_id)):
                raise CommandConflictError(f"command {command_id!r} already exists and is not this spawn")
            world = self._active_world(world_id)
            first = world["next_entity_id"]
            if quota is not None:
                tick = runs_at(scheduled_tick, world["tick_head"])
                used = self._port.execute(q.GET_QUOTA_USAGE, (world_id, scope, tick))
                self._check_quota(world_id, scope, {tick: 1}, quota, {tick: used[0][0]} if used else {})
            now = self._clock.now_ms()
            self._port.execute(q.TAKE_ENTITY_IDS, (1, now, world_id))
            self._port.execute(q.INSERT_RESERVATION, (world_id, scope, command_id, first, request_digest, now))
            return first

        return self._port.transaction(run)

    # -- admission --
    def admit(self, world_id: str, commands: list[AdmissionRow], quota: Quota | None = None) -> list[Admitted]:
        """Admit a non-empty batch of one principal all-or-nothing; identical replays return their
        existing identity.

        `quota` caps how many commands one principal may have admitted for one tick of this world,
        counted at the tick each runs at (`runs_at`: a target tick already past runs at the next
        one); only newly admitted commands count against it.
        """
        if not commands:
            raise InvalidCommandError("a batch needs at least one command")
        # One pass over the batch makes each row and gathers what the read below binds. Each payload
        # is parsed once, before the transaction, so the one read also answers the recorded schemas
        # its components name; what a payload's parse raised is raised where the check of a new row
        # would meet it (a replay is not checked).
        rows: list[dict[str, Any]] = []
        ids: list[str] = []
        scopes = set()
        parsed: list[list[Any] | Exception] = []
        named: set[str] = set()
        principals = reservations = False
        for command in commands:
            row = self._admission_row(world_id, command)
            rows.append(row)
            ids.append(row["command_id"])
            scopes.add(row["scope"])
            if row["principal"] is not None:
                principals = True
            if row["reserved_entity_id"] is not None:
                reservations = True
            try:
                found = occurrences(loads(row["payload"]))
            except Exception as exc:
                parsed.append(exc)
                continue
            parsed.append(found)
            for occurrence in found:
                named.add(occurrence[2])
        if len(set(ids)) != len(ids):
            raise InvalidCommandError("a batch names the same command id twice")
        if len(scopes) != 1:
            raise InvalidCommandError("a batch is admitted for one principal")
        (scope,) = scopes
        insert_each, insert_bulk, inserted_values = _INSERTS[principals, reservations]
        # (JSON parameters through the one prebuilt encoder: json.dumps builds an encoder per call; one
        # id or one fingerprint bound as it is: ledger_sql.ADMISSION_READS)
        read = q.ADMISSION_READS[quota is not None, len(ids) == 1, len(named) == 1]
        read_params: tuple[Any, ...] = (world_id, scope, ids[0] if len(ids) == 1 else canonical_text(ids),
                                        next(iter(named)) if len(named) == 1 else canonical_text(sorted(named)))  # fmt: skip
        if quota is not None:
            read_params = (*read_params, canonical_text(sorted({r["scheduled_tick"] for r in rows})))

        def run() -> list[Admitted]:
            world: tuple[Any, ...] | None = None
            existing: dict[str, tuple[str, int]] = {}
            reserved: dict[str, tuple[int, str]] = {}
            known: dict[str, tuple[Any, ...]] = {}
            used: dict[int, int] = {}
            # (each row indexed as it is: `kind, *values` made a list of every row and a tuple again)
            for answer in self._port.execute(read, read_params):
                kind = answer[0]
                if kind == "command":
                    if answer[2] is not None:
                        existing[answer[1]] = (answer[2], answer[3])
                    if answer[4] is not None:
                        reserved[answer[1]] = (answer[4], answer[5])
                elif kind == "component":
                    known[answer[2]] = answer[1:]
                elif kind == "world":
                    world = answer[1:]
                else:
                    used[answer[1]] = answer[2]
            if world is None:
                raise WorldNotFoundError(f"world {world_id!r} does not exist")
            if world[0] != "ACTIVE":
                raise WorldClosingError(f"world {world_id!r} is {world[0]}; it admits nothing")
            # the sequence numbers read above are current (this transaction has written no command
            # or event yet), and the rows written below take them, in batch order: no world row to
            # update, and no outbox row (each row carries its `admitted` event: ledger_sql.READ_OUTBOX)
            next_sequence, next_event_seq = world[1], world[2]
            admitted: list[Admitted] = []
            inserted: list[tuple[Any, ...]] = []  # the new rows' values (ledger_sql.ADMITTED_COMMAND_VALUES)
            checked: Found = []  # the new rows' ids and their payloads' occurrences
            unparsed: Exception | None = None  # the first new row's payload that did not parse
            ticks: list[int] = []  # with a quota: the new rows' target ticks
            for row, found in zip(rows, parsed, strict=True):
                command_id = row["command_id"]
                replayed = existing.get(command_id)
                if replayed is not None:
                    if replayed[0] != row["digest"]:
                        raise CommandConflictError(f"command {command_id!r} was admitted with different content")
                    admitted.append({"command_id": command_id, "sequence": replayed[1], "replayed": True, "digest": row["digest"]})
                    continue
                reservation = reserved.get(command_id)
                if row["operation"] == "spawn_reserved" and reservation is None:
                    raise ReservationNotOwnedError(
                        f"command {command_id!r} owns no spawn reservation (of entity {row['reserved_entity_id']})"
                    )
                if reservation is not None and reservation != (row["reserved_entity_id"], row["request_digest"]):
                    raise CommandConflictError(
                        f"command {command_id!r} is bound to a spawn reservation that this command does not fulfil"
                    )
                sequence = next_sequence + len(inserted)
                inserted.append((sequence, next_event_seq + len(inserted), *inserted_values(row)))
                admitted.append({"command_id": command_id, "sequence": sequence, "replayed": False, "digest": row["digest"]})
                if isinstance(found, Exception):
                    if unparsed is None:
                        unparsed = found
                elif found:
                    checked.append((command_id, found))
                if quota is not None:
                    ticks.append(row["scheduled_tick"])
            # a new row's payload that did not parse is refused before any component is checked
            if unparsed is not None:
                raise unparsed
            check_found(world_id, checked, known, _command_label)
            if quota is not None:
                self._charge_quota(world_id, scope, [runs_at(tick, world[3]) for tick in ticks], quota, used)
            if inserted:
                shared = (world_id, scope, self._clock.now_ms(), world[3] + 1)
                self._port.execute_rows(insert_each, insert_bulk, shared, inserted)
            return admitted

        return self._port.transaction(run)

    def _admission_row(self, world_id: str, command: AdmissionRow) -> dict[str, Any]:
        if tuple(command) != _ADMISSION_ORDER and command.keys() != ADMISSION_KEYS:
            unknown = set(command) - ADMISSION_KEYS
            missing = ADMISSION_KEYS - set(command)
            raise InvalidCommandError(f"admission row has unknown {sorted(unknown)} / missing {sorted(missing)} fields")
        if command["origin"] not in ORIGINS:
            raise InvalidCommandError(f"origin must be one of {ORIGINS}")
        row: dict[str, Any] = {**command, "world_id": world_id, "scope": scope_of(command["principal"])}
        row["digest"] = command_digest(row)
        return row

    def _charge_quota(self, world_id: str, scope: str, ticks: list[int], quota: int, used: dict[int, int]) -> None:
        """One command more of `scope` at each of these ticks (the ticks they run at)."""
        wanted: dict[int, int] = {}
        for tick in ticks:
            wanted[tick] = wanted.get(tick, 0) + 1
        self._check_quota(world_id, scope, wanted, quota, used)
        for tick, count in wanted.items():
            self._port.execute(q.ADD_QUOTA_USAGE, (world_id, scope, tick, count))

    def _check_quota(self, world_id: str, scope: str, wanted: dict[int, int], quota: int, used: dict[int, int]) -> None:
        """`wanted` more commands of `scope` running at each tick fit the quota, `used` counting those admitted already."""
        for tick, count in wanted.items():
            if used.get(tick, 0) + count > quota:
                raise QuotaExceededError(
                    f"{scope or 'trusted caller'} may admit {quota} commands running at tick {tick} of world "
                    f"{world_id!r} (a tick already past runs at the next one); {used.get(tick, 0)} already admitted, "
                    f"{count} more asked"
                )
