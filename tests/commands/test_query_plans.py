"""Every ledger statement reaches its rows through an index: none scans a table whose size grows
with a world's history, and none probes a JSON array once per row of a table (the quadratic plan
SQLite picks for an UPDATE ... FROM json_each left to itself: 10,000 settlements took 100 s).
Checked on SQLite's own query plans, so a statement that regresses fails here, not in a benchmark."""

from __future__ import annotations

import re
import sqlite3

import pytest

from archetype.commands import ledger_sql, migrations

GROWING = ("commands", "outbox", "state_snapshots", "state_deltas", "ticks", "spawn_reservations", "quota_usage")
# Statements allowed to visit every row of a world: a fork with its open commands reads its source's
# retained commands once (an admin's rare act: an index by scheduled tick would cost every admission
# a write).
WHOLE_WORLD = {"OPEN_AT_TICK"}
# A fork's activation on the Durable Object lists its commands for their admitted events: every
# command the new world has is a copy it was just given.
WHOLE_WORLD |= {"FORKED_SEQUENCES"}
# A world lease's takeover ends the other owners' command leases: it reads the world's entries of
# the partial index of LEASED commands (what its hosts' ticks hold), never its settled history.
WHOLE_WORLD |= {"EXPIRE_OTHER_OWNERS_LEASES"}
# Statements that read the first entry of an index in its own order (LIMIT 1, no sort): one row.
FIRST_ENTRY = {"NEXT_DUE_TICK"}
# Statements that read the catalog's open commands through their partial index (which worlds have
# work): what is open, never a world's settled history.
OPEN_INDEX = {"PENDING_WORLDS"}
# Statements that read a world's open commands (schema version 20: docs/storage.md): the entries of the
# due index (a world's open commands due later, whichever it asks for) and the commands' key from the
# world's floor (those due at once), never the settled ones below it.
OPEN_READS = {"DUE_COMMANDS", "NEXT_DUE_TICK", "OPEN_SEQUENCES", "OPEN_COMMANDS_NAMING", "PENDING_WORLDS"}
FROM_THE_FLOOR = "USING PRIMARY KEY (world_id=? AND sequence>?)"
# Prune walks the commands' key in its order up to the first command admitted after its horizon
# (schema version 18: there is no index of settlements), reading the commands older than the horizon,
# never the window's.
WALKS_TO_HORIZON = {"PRUNE_COMMANDS"}


def statements() -> dict[str, str]:
    found = {
        name: value
        for name, value in vars(ledger_sql).items()
        if name.isupper() and isinstance(value, str) and not name.endswith(("_COLUMNS", "_STATUSES", "_JOIN", "_EXPR", "_CTE"))
    }
    # the admission's statements chosen by what a batch holds
    found.update({f"ADMISSION_READS{list(key)}": sql for key, sql in ledger_sql.ADMISSION_READS.items()})
    for key, (each, bulk, _) in ledger_sql.ADMITTED_INSERTS.items():
        found.update({f"ADMITTED_INSERTS{list(key)}.each": each, f"ADMITTED_INSERTS{list(key)}.bulk": bulk})
    return found


def plan(sql: str) -> list[str]:
    db = sqlite3.connect(":memory:")
    for migration in migrations.MIGRATIONS:
        for statement in migration.statements:
            db.execute(statement)
    numbered = {int(n) for n in re.findall(r"\?(\d+)", sql)}
    count = max(numbered) if numbered else sql.count("?")
    return [row[3] for row in db.execute("EXPLAIN QUERY PLAN " + sql, [None] * count)]


def growing_tables(sql: str) -> dict[str, str]:
    """The names a plan may call each growing table by in this statement: its own and its aliases
    (a plan names `commands AS c` as `c`)."""
    aliases = {alias: table for table, alias in re.findall(r"\b(\w+)\s+AS\s+(\w+)", sql) if table in GROWING}
    return {table: table for table in GROWING} | aliases


def last_entries(sql: str) -> set[str]:
    """The tables (by the names the plan gives them) this statement reads a `max()` of: a search of a
    world's rows of one such is SQLite reading the last entry of the key, one row however many."""
    return set(re.findall(r"\bmax\((\w+)\.", sql))


@pytest.mark.parametrize("name", sorted(statements()))
def test_no_statement_scans_a_growing_table(name):
    steps = plan(statements()[name])
    tables = growing_tables(statements()[name])
    for step in steps:
        table = re.match(r"(SCAN|SEARCH) (\w+)", step)
        if table is None or table.group(2) not in tables:
            continue
        if name in OPEN_INDEX and table.group(1) == "SCAN":
            assert step.endswith("USING INDEX commands_due"), steps
            continue
        assert table.group(1) == "SEARCH", f"{name} scans {tables[table.group(2)]}: {steps}"
        keyed = re.search(r"\((.*)\)", step)
        by_world_only = keyed is not None and keyed.group(1) == "world_id=?"
        if by_world_only and table.group(2) in last_entries(statements()[name]):
            assert step.endswith("USING PRIMARY KEY (world_id=?)"), steps  # max() of the key: its last entry, one row
        elif name in OPEN_READS and step.endswith(("USING INDEX commands_due (world_id=?)", FROM_THE_FLOOR)):
            pass
        elif name in FIRST_ENTRY:
            assert "LIMIT 1" in statements()[name] and not any("TEMP B-TREE" in s for s in steps), steps
        elif name in WALKS_TO_HORIZON and by_world_only:
            assert step.endswith("USING PRIMARY KEY (world_id=?)"), steps  # in key order: it stops at the horizon
        elif name not in WHOLE_WORLD:
            assert not by_world_only, f"{name} visits every row of a world in {tables[table.group(2)]}: {steps}"


def test_the_check_sees_the_quadratic_plan():
    quadratic = """UPDATE commands SET status = 'APPLIED'
        FROM (SELECT json_extract(value, '$[0]') AS sequence FROM json_each(?)) AS s
        WHERE commands.world_id = ? AND commands.sequence = s.sequence"""
    assert any(step.endswith("(world_id=?)") for step in plan(quadratic))


def test_the_check_sees_a_table_by_its_alias():
    assert growing_tables("SELECT 1 FROM commands AS c JOIN held AS h")["c"] == "commands"
    steps = plan("SELECT c.status FROM commands AS c WHERE c.world_id = ?")
    assert any(step.startswith("SEARCH c ") and step.endswith("(world_id=?)") for step in steps), steps


@pytest.mark.parametrize("name", sorted(OPEN_READS))
def test_every_read_of_open_commands_reads_the_due_index_and_walks_from_the_floor(name):
    steps = plan(statements()[name])
    assert any("USING INDEX commands_due" in step for step in steps), steps
    assert any(re.match(r"SEARCH \w+ " + re.escape(FROM_THE_FLOOR), step) for step in steps), steps


# The statements every admission runs: a temporary b-tree (DISTINCT, ORDER BY or GROUP BY without an
# index to follow) is built and torn down on every run, quota or not, however few rows it sorts.
ADMISSION = sorted(name for name in statements() if name.startswith(("ADMISSION_READ", "INSERT_COMMAND", "ADMITTED_INSERTS")))
# The admission read reads the world's last command as the first entry of its key in reverse order
FIRST_ENTRY |= {name for name in ADMISSION if name.startswith("ADMISSION_READ")}


@pytest.mark.parametrize("name", ADMISSION)
def test_admission_builds_no_temporary_b_tree(name):
    steps = plan(statements()[name])
    assert not any("TEMP B-TREE" in step for step in steps), steps


@pytest.mark.parametrize("name", [name for name in ADMISSION if name.startswith("ADMISSION_READ")])
def test_admission_reads_the_last_command_once(name):
    """Its next command and event numbers both read the world's last command: one seek of it, the
    key's last entry (in reverse order, LIMIT 1: no temporary b-tree above, so no other is read)."""
    sql = statements()[name]
    tables = growing_tables(sql)
    keyed = [step for step in plan(sql) if re.match(r"SEARCH \w+ USING PRIMARY KEY \(world_id=\?(?: AND sequence=\?)?\)", step)
             and tables.get(step.split()[1]) == "commands"]  # fmt: skip
    assert len(keyed) == 1, keyed
