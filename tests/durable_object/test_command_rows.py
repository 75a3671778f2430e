"""What a command's admission and settlement write on the real Durable Object SQL engine, which bills
index entries as rows (docs/storage.md, "Rows per command", schema versions 18, 20 and 22). An admission
due at once is its row and its `commands_by_id` entry; only a command due later than the tick after
the head enters `commands_due` too. A settlement is the command's row and nothing else: its
open-commands entry is removed (free) and it enters no index of settlements. The publication's
events, while few, are written by its world-row write. An index either step used to write, or an
outbox row the publication no longer writes, coming back fails here, not only as a bench figure."""

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


def _admitted(scheduled_tick: int, extra_schema: tuple[str, ...], count: int = COMMANDS) -> tuple[WorkerdSql, int]:
    """A fresh object whose world (tick head -1) was just admitted `count` commands for
    `scheduled_tick` by the ledger's INSERT_COMMANDS (their `admitted` events 1 to `count`), and
    the rows that statement wrote."""
    sql = WorkerdSqlEngine(shared_server(), f"rows-{uuid.uuid4().hex}").sql
    for migration in migrations.MIGRATIONS:
        for statement in migration.statements:
            sql.exec(statement)
    for statement in extra_schema:
        sql.exec(statement)
    sql.exec(ledger_sql.INSERT_WORLD, WORLD, WORLD, 1, 1, 1, "realtime", None)
    rows = [[1 + i, 1 + i, f"c-{i}", 1, scheduled_tick, 0, "spawn", '{"n":1}', "d" * 64, None, "local", 3, None] for i in range(count)]
    assert len(rows[0]) == len(ledger_sql.ADMITTED_COMMAND_VALUES)
    return sql, int(sql.exec(ledger_sql.INSERT_COMMANDS, WORLD, "", 2, 0, json.dumps(rows)).rowsWritten)  # tick 0 is due at once


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


def _publication_rows(count: int) -> tuple[int, int]:
    """Rows the world-row write of a publication settling `count` commands (PUBLISH_HEAD, with their
    events) and the append of the events that did not fit there (APPEND_SPILLED_EVENTS) write."""
    sql, _ = _admitted(0, (), count)
    sequences = json.dumps(list(range(1, count + 1)))
    settled = json.dumps([[sequence, "applied", None] for sequence in range(1, count + 1)])
    sql.exec(ledger_sql.SETTLE, 0, 3, settled, WORLD)
    first = count + 1
    head = sql.exec(ledger_sql.PUBLISH_HEAD, 0, 3, 3, 0, WORLD, "o", "s", first, sequences).rowsWritten
    spilled = sql.exec(ledger_sql.APPEND_SPILLED_EVENTS, first, 3, sequences, WORLD).rowsWritten
    return int(head), int(spilled)


def test_a_publication_writes_its_few_events_with_the_world_row():
    # one settlement: its event is in the world row's tail, written by the write of the head
    assert _publication_rows(1) == (1, 0)
    # ten (over OUTBOX_APPEND_LIMIT's characters): one outbox row, as before version 22
    assert _publication_rows(COMMANDS) == (1, 1)
    # what version 21 wrote for one: an outbox row beside the world row
    sql, _ = _admitted(0, (), 1)
    sql.exec(ledger_sql.SETTLE, 0, 3, json.dumps([[1, "applied", None]]), WORLD)
    appended = sql.exec(ledger_sql.APPEND_EVENTS, 2, 3, "[1]", WORLD, None).rowsWritten
    assert appended + sql.exec(ledger_sql.PUBLISH_HEAD, 0, 3, 3, 0, WORLD, "o", "s", None, "[]").rowsWritten == 2
