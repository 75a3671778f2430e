"""What a command's admission and settlement write on the real Durable Object SQL engine, which bills
index entries as rows (docs/storage.md, "Rows per command", schema versions 18 and 20). An admission
due at once is its row and its `commands_by_id` entry; only a command due later than the tick after
the head enters `commands_due` too. A settlement is the command's row and nothing else: its
open-commands entry is removed (free) and it enters no index of settlements. An index either step
used to write coming back fails here, not only as a bench figure."""

from __future__ import annotations

import json
import uuid

import pytest

from archetype.commands import ledger_sql, migrations
from tests.support.workerd.engine import WorkerdSql, WorkerdSqlEngine, shared_server

pytestmark = pytest.mark.timeout(120)

WORLD = "w"
COMMANDS = 10
# the index of open commands versions 13 to 19 had (every open command an entry)
V19_DUE_INDEX = ("DROP INDEX commands_due",
                 "CREATE INDEX commands_due ON commands (world_id, scheduled_tick, priority, sequence) WHERE is_open = 1")
# the index of settlements versions 5 to 17 had (what prune found the settled commands by)
V17_SETTLED_INDEX = ("""CREATE INDEX commands_settled ON commands (world_id, updated_at, sequence)
    WHERE status IN ('APPLIED', 'REJECTED', 'CANCELLED')""",)


def _admitted(scheduled_tick: int, extra_schema: tuple[str, ...]) -> tuple[WorkerdSql, int]:
    """A fresh object whose world (tick head -1) was just admitted COMMANDS commands for
    `scheduled_tick` by the ledger's INSERT_COMMANDS, and the rows that statement wrote."""
    sql = WorkerdSqlEngine(shared_server(), f"rows-{uuid.uuid4().hex}").sql
    for migration in migrations.MIGRATIONS:
        for statement in migration.statements:
            sql.exec(statement)
    for statement in extra_schema:
        sql.exec(statement)
    sql.exec(ledger_sql.INSERT_WORLD, WORLD, WORLD, 1, 1, 1, "realtime", None)
    rows = [[f"c-{i}", 1, scheduled_tick, 0, "spawn", '{"n":1}', "d" * 64, None, "local", 3, None] for i in range(COMMANDS)]
    assert len(rows[0]) == len(ledger_sql.INSERTED_COMMAND_FIELDS)
    return sql, int(sql.exec(ledger_sql.INSERT_COMMANDS, WORLD, "", 1, 2, json.dumps(rows), 1).rowsWritten)


def _admission_rows(scheduled_tick: int, extra_schema: tuple[str, ...] = ()) -> int:
    return _admitted(scheduled_tick, extra_schema)[1]


def _settlement_rows(extra_schema: tuple[str, ...] = ()) -> int:
    """Rows the ledger's SETTLE writes settling COMMANDS commands admitted due at once."""
    sql, _ = _admitted(0, extra_schema)
    settled = json.dumps([[sequence, "applied", None] for sequence in range(1, COMMANDS + 1)])
    return int(sql.exec(ledger_sql.SETTLE, 0, 3, settled, WORLD).rowsWritten)


def test_a_command_due_at_once_writes_its_row_and_its_id_entry_alone():
    assert _admission_rows(0) == 2 * COMMANDS  # tick 0 follows the head (-1): due at once
    assert _admission_rows(1) == 3 * COMMANDS  # due later: the due index's entry too
    # the layout before version 20: every open command in the due index
    assert _admission_rows(0, V19_DUE_INDEX) == 3 * COMMANDS


def test_a_settlement_writes_the_command_row_alone():
    assert _settlement_rows() == COMMANDS
    # the layout before version 18: the row and its entry in the index of settlements
    assert _settlement_rows(V17_SETTLED_INDEX) == 2 * COMMANDS
