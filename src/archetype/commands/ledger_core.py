"""What every ledger operation stands on: its store (a `SqlPort`, migrated to this code's schema
when the ledger opens it), its clock, and the reads and writes the operations share inside their
transactions: a world's row and its checks, outbox events, the lease map, a command by sequence."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

from archetype.canonical import canonical_text
from archetype.commands import ledger_sql as q
from archetype.commands import migrations
from archetype.commands.errors import (
    InvalidCommandError,
    LedgerSchemaError,
    StaleWriterError,
    TickNotRetainedError,
    WorldClosingError,
    WorldForkingError,
    WorldNotFoundError,
)
from archetype.commands.ledger_rows import HOST_LEASE_MAX_MS, CommandRow, WorldRow
from archetype.commands.port import Clock, SqlPort

COMMAND_FIELDS = tuple(name.strip() for name in q.COMMAND_COLUMNS.split(","))
WORLD_FIELDS = tuple(name.strip() for name in q.WORLD_COLUMNS.split(","))


def named_row(fields: Sequence[str], values: Sequence[Any]) -> dict[str, Any]:
    return dict(zip(fields, values, strict=True))


def check_lease_ms(lease_ms: int, longest: int = HOST_LEASE_MAX_MS) -> None:
    if not 0 < lease_ms <= longest:
        raise InvalidCommandError(f"this lease lasts 1 to {longest:,} ms, not {lease_ms} ms")


def scope_of(principal: str | None) -> str:
    """The namespace of a principal's command ids: its name, or '' for trusted callers."""
    return principal or ""


class LedgerCore:
    """The ledger's store and clock, and the helpers its operations run inside their own
    transaction. Opening one migrates the store to this code's schema."""

    def __init__(self, port: SqlPort, clock: Clock) -> None:
        self._port = port
        self._clock = clock
        port.transaction(self._migrate)

    def _migrate(self) -> None:
        current = 0
        if self._port.execute(migrations.HAS_META)[0][0]:
            rows = self._port.execute(migrations.GET_SCHEMA_VERSION)
            current = int(rows[0][0]) if rows else 0
        if current > migrations.SCHEMA_VERSION:
            raise LedgerSchemaError(
                f"the catalog has ledger schema version {current}, newer than this code's "
                f"{migrations.SCHEMA_VERSION}: open it with a newer archetype"
            )
        for migration in migrations.MIGRATIONS:
            if migration.version > current:
                for statement in migration.statements:
                    self._port.execute(statement)
        if current < migrations.SCHEMA_VERSION:
            self._port.execute(migrations.SET_SCHEMA_VERSION, (str(migrations.SCHEMA_VERSION),))

    # -- helpers (run inside a caller's transaction) --
    def _world(self, world_id: str) -> WorldRow:
        rows = self._port.execute(q.GET_WORLD, (world_id,))
        if not rows:
            self._check_not_forking(world_id)
            raise WorldNotFoundError(f"world {world_id!r} does not exist")
        return cast(WorldRow, named_row(WORLD_FIELDS, rows[0]))

    def _check_not_forking(self, world_id: str) -> None:
        """A fork being copied into this store (on the Durable Object) is no world yet: refused, typed."""
        if self._port.execute(q.GET_FORK_COPY, (world_id,)):
            raise WorldForkingError(f"world {world_id!r} is a fork still being copied from its source: "
                                    "it answers nothing until the copy completes (fork_world again completes it)")

    def _active_world(self, world_id: str) -> WorldRow:
        world = self._world(world_id)
        if world["status"] != "ACTIVE":
            raise WorldClosingError(f"world {world_id!r} is {world['status']}; it admits nothing")
        return world

    def _writer(self, world_id: str, writer_epoch: int) -> WorldRow:
        world = self._active_world(world_id)
        if world["writer_epoch"] != writer_epoch:
            raise StaleWriterError(
                f"writer epoch {writer_epoch} of world {world_id!r} was superseded by epoch {world['writer_epoch']}"
            )
        return world

    def _append_events(self, world_id: str, sequences: list[int], now: int, asked_by: str | None = None) -> None:
        """One event per command, in this order, typed by the status each command is now in;
        `asked_by` (`_asked_by`): the events of an operator's call, naming who asked."""
        if not sequences:
            return
        first = self._world(world_id)["next_event_seq"]
        self._write_events(world_id, first, canonical_text(sequences), now, asked_by)

    def _write_events(self, world_id: str, first: int, sequences_json: str, now: int, asked_by: str | None = None) -> None:
        """Events numbered from `first`, the world's next event sequence number as read in this transaction."""
        self._port.execute(q.APPEND_EVENTS, (first, now, sequences_json, world_id, asked_by))

    def _world_event(self, world_id: str, event_type: str, tick: int, attempts: int, error: str | None,
                     since: int | None, now: int, actor: str | None = None) -> None:  # fmt: skip
        """A world's own outbox event, typed by its health now (a health transition, never a command's),
        naming the `actor` who asked for it (None: the runner's own doing)."""
        event = self._world(world_id)["next_event_seq"]
        self._port.execute(q.APPEND_WORLD_EVENT, (event, event_type, tick, now, attempts, error, since, world_id, actor))

    def _change_leases(self, world_id: str, entries: dict[str, list[Any] | None]) -> None:
        """Set these entries of the world's lease map ([owner, session, expires_at, leased_at] by
        sequence; None removes one): docs/storage.md, "Rows per command"."""
        (text,) = self._port.execute(q.GET_LEASES, (world_id,))[0]
        leases = {} if text is None else json.loads(text)
        for key, entry in entries.items():
            if entry is None:
                leases.pop(key, None)
            else:
                leases[key] = entry
        self._port.execute(q.SET_LEASES, (json.dumps(leases) if leases else None, world_id))

    def _command_at(self, world_id: str, sequence: int) -> CommandRow | None:
        rows = self._port.execute(q.GET_COMMAND_BY_SEQUENCE, (world_id, sequence))
        return cast(CommandRow, named_row(COMMAND_FIELDS, rows[0])) if rows else None

    def _check_retained(self, world: WorldRow, tick: int) -> None:
        """The state at `tick` is held: from the world's oldest retained tick (which retention
        raises) to its tick head."""
        oldest = self._port.execute(q.GET_STATE_FROM_TICK, (world["world_id"],))[0][0]
        if not oldest <= tick <= world["tick_head"]:
            raise TickNotRetainedError(
                f"world {world['world_id']!r} holds its state at ticks {oldest}..{world['tick_head']}, not at tick {tick}"
                " (retention keeps the last keep_ticks ticks: docs/storage.md, \"State at a tick\")"
            )
