"""What a settlement writes on the real Durable Object SQL engine, which bills index entries as rows
(docs/storage.md, "Rows per command", schema version 18): the command's row and nothing else. Its
open-commands entry is removed (free) and it enters no index of settlements, as it did up to version
17; an index that a settlement enters coming back fails here, not only as a bench figure."""

from __future__ import annotations

import json
import uuid

import pytest

from archetype.commands import ledger_sql, migrations
from tests.support.workerd.engine import WorkerdSqlEngine, shared_server

pytestmark = pytest.mark.timeout(120)

WORLD = "w"
COMMANDS = 10
# the index of settlements versions 5 to 17 had (what prune found the settled commands by)
V17_SETTLED_INDEX = """CREATE INDEX commands_settled ON commands (world_id, updated_at, sequence)
    WHERE status IN ('APPLIED', 'REJECTED', 'CANCELLED')"""


def _settlement_rows(extra_schema: tuple[str, ...]) -> int:
    """Rows the ledger's SETTLE writes settling COMMANDS admitted commands, on a fresh object."""
    sql = WorkerdSqlEngine(shared_server(), f"settle-{uuid.uuid4().hex}").sql
    for migration in migrations.MIGRATIONS:
        for statement in migration.statements:
            sql.exec(statement)
    for statement in extra_schema:
        sql.exec(statement)
    sql.exec(ledger_sql.INSERT_WORLD, WORLD, WORLD, 1, 1, 1, "realtime", None)
    rows = [[f"c-{i}", 1, 0, 0, "spawn", '{"n":1}', "d" * 64, None, "local", 3, None] for i in range(COMMANDS)]
    assert len(rows[0]) == len(ledger_sql.INSERTED_COMMAND_FIELDS)
    sql.exec(ledger_sql.INSERT_COMMANDS, WORLD, "", 1, 2, json.dumps(rows), 1)
    settled = json.dumps([[sequence, "applied", None] for sequence in range(1, COMMANDS + 1)])
    return int(sql.exec(ledger_sql.SETTLE, 0, 3, settled, WORLD).rowsWritten)


def test_a_settlement_writes_the_command_row_alone():
    assert _settlement_rows(()) == COMMANDS
    # the layout before version 18: the row and its entry in the index of settlements
    assert _settlement_rows((V17_SETTLED_INDEX,)) == 2 * COMMANDS
