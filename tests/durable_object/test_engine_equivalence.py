"""The real Durable Object SQL engine (workerd) against the engines that stand in for it.

Rung 2 of the verification ladder. Two claims, checked answer by answer:

- the stand-in's engine (tests/support/durable_object_standin.py: `SqliteEngine`) answers every
  statement with exactly the JS values the real engine gives (numbers as doubles, -0.0, NaN and
  text spelled alike, the same statements refused);
- the ledger's SQL answers alike on its two hosts: the local `sqlite3` port and
  `DurableObjectSqlPort` over the real engine, for every statement in ledger_sql.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from archetype.commands import ledger_sql, migrations
from archetype.commands.authority import InProcessAuthority
from archetype.commands.ledger import Ledger
from archetype.commands.port import ManualClock
from archetype.commands.scheduler import schema_row
from durable_world import DurableObjectSqlPort
from local_catalog.port import SqliteSqlPort
from tests.component_modules.alpha import Health, Position
from tests.conformance.scenario import run_scenario
from tests.conformance.test_component_schemas import raw_spawn, value
from tests.durable_object.test_world_object import ledger_script
from tests.support.durable_object_standin import SqlCursor, SqlError, SqliteEngine
from tests.support.workerd.engine import WorkerdSqlEngine, shared_server

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def real_engine() -> WorkerdSqlEngine:
    return WorkerdSqlEngine(shared_server(), f"equivalence-{uuid.uuid4().hex}")


@pytest.fixture
def standin_engine(tmp_path):
    engine = SqliteEngine(tmp_path / "standin.sqlite3")
    yield engine
    engine.close()


def outcome(engine: Any, query: str, *bindings: Any) -> SqlCursor | SqlError:
    try:
        return engine.sql.exec(query, *bindings)
    except SqlError as error:
        return error


def spelled(result: SqlCursor | SqlError) -> tuple:
    """What a statement gave, exactly: repr tells 1 from 1.0, -0.0 from 0.0 and spells NaN.
    Error messages are each engine's own wording, so only the fact of an error is compared."""
    if isinstance(result, SqlError):
        return ("error",)
    return (result.columnNames, repr(result._rows))  # read without consuming the cursor


def answer(engine: Any, query: str, *bindings: Any) -> tuple:
    return spelled(outcome(engine, query, *bindings))


SETUP = "CREATE TABLE t (i INTEGER, r REAL, x TEXT, n NUMERIC, b BLOB, a)"
# ints from 2**53 - 1 on cross as BigInts (refused); as floats, the doubles ffi.sql_binding passes
NEAR_2_53 = (2**53 - 2, 2**53 - 1, float(2**53 - 1), 2**53, float(2**53), -(2**53), 2**53 + 1, -(2**53) - 1)

CASES: dict[str, list[tuple[Any, ...]]] = {
    "integers near 2**53": [
        *[("SELECT ?, typeof(?), ? - 1", n, n, n) for n in NEAR_2_53],
        ("SELECT CAST(? AS INTEGER) + 1, typeof(CAST(? AS INTEGER) + 1)", float(2**53), float(2**53)),
        ("SELECT 9007199254740993, typeof(9007199254740993), -9007199254740993",),
        ("INSERT INTO t (i, a) VALUES (?, ?)", float(2**53), float(2**53)),
        ("INSERT INTO t (i, a) VALUES (9007199254740993, 9007199254740993)",),
        ("SELECT i, typeof(i), a, typeof(a), i = 9007199254740993 FROM t",),
    ],
    "negative zero": [
        ("SELECT ?, typeof(?), -0.0, 0.0 * -1, ? = 0", -0.0, -0.0, -0.0),
        ("SELECT ? || '', json_quote(?), json_array(?)", -0.0, -0.0, -0.0),
        ("INSERT INTO t (i, r, a) VALUES (?, ?, ?)", -0.0, -0.0, -0.0),
        ("SELECT i, typeof(i), r, typeof(r), a FROM t",),
    ],
    "integral and other floats": [
        ("SELECT ?, typeof(?), ? || '', ? + 1", 3.0, 3.0, 3.0, 3.0),
        # Not compared: how a REAL beyond 15 significant digits or 1e15 renders as text (`? || ''`,
        # `json_array(?)`) differs between SQLite releases (3.43 changed it), and the stand-in
        # runs Python's SQLite, not workerd's. The ledger never renders a REAL as text.
        ("SELECT ?, typeof(?), ?, ?", float("inf"), float("inf"), float("-inf"), 1e308 * 10),
        ("SELECT ?, typeof(?)", float("nan"), float("nan")),
    ],
    "null and booleans": [
        ("SELECT ?, typeof(?), ? IS NULL, coalesce(?, 7)", None, None, None, None),
        ("SELECT ?, typeof(?), ?, ? = 1", True, True, False, True),
        ("INSERT INTO t (i, x, a) VALUES (?, ?, ?)", True, False, None),
        ("SELECT i, typeof(i), x, a, typeof(a) FROM t",),
    ],
    "text and numbers": [
        ("SELECT 'w1' || '/' || (? + 1), 'w1' || '/' || (CAST(? AS INTEGER) + 1)", 1, 1),
        ("SELECT ? || '', CAST(? AS TEXT), printf('%d', ?), printf('%s', ?)", 7, 7, 7, 7),
        ("SELECT ? = '1', ? = 1, ? < 'a', '1' = 1", 1, 1, 1),
        ("SELECT ? / 2, CAST(? AS INTEGER) / 2, 5 / 2, ? % 3", 5, 5, 5),
        ("INSERT INTO t (i, r, x, n, a) VALUES (?, ?, ?, ?, ?)", 5, 5, 5, 5, 5),
        ("INSERT INTO t (i, r, x, n, a) VALUES (?, ?, ?, ?, ?)", 5.5, 5.5, 5.5, 5.5, 5.5),
        ("INSERT INTO t (i, x) VALUES (?, ?)", "12", "12"),
        ("SELECT i, typeof(i), r, typeof(r), x, n, typeof(n), a, typeof(a) FROM t ORDER BY rowid",),
    ],
    "json": [
        ("SELECT json_object('a', ?, 'b', CAST(? AS INTEGER), 'c', ?), json_array(?, ?)", 1, 1, 1.5, 2, None),
        ("SELECT value, typeof(value), key, type FROM json_each(?)", "[1, 1.0, 2.5, -0.0, 9007199254740993, 1e400, null, true]"),
        ("SELECT json_extract(?, '$.n'), typeof(json_extract(?, '$.n')), json_extract(?, '$.n') = ?",
         '{"n": 3}', '{"n": 3}', '{"n": 3}', 3),  # fmt: skip
        ("SELECT json_extract(json_object('n', ?), '$.n')", 4),
        ("SELECT json_group_array(value), json_group_array(value + ?) FROM json_each('[1, 2]')", 1),
        ("SELECT ? + j.key, typeof(? + j.key) FROM json_each('[\"a\", \"b\"]') AS j", 1, 1),
    ],
    "limits and counts": [
        ("SELECT 1 LIMIT ?", 1),
        ("SELECT 1 LIMIT ?", 1.5),
        ("SELECT count(*), sum(value), total(value), avg(value), max(value) FROM json_each('[1, 2, 4]')",),
        ("SELECT " + ", ".join("?" * 100), *range(100)),
        ("SELECT " + ", ".join("?" * 101), *range(101)),
        ("SELECT ?, ?", 1),
    ],
    "statement rules": [
        ("SELECT '" + "x" * (100_000 - len("SELECT ''")) + "'",),
        ("SELECT '" + "x" * (100_001 - len("SELECT ''")) + "'",),
        *[(statement,) for statement in ("BEGIN", "COMMIT", "SAVEPOINT s", "RELEASE s", "ATTACH ':memory:' AS m",
                                          "CREATE TEMP TABLE s (x)", "PRAGMA user_version", "PRAGMA journal_mode",
                                          "PRAGMA foreign_keys = ON", "PRAGMA table_info(t)")],  # fmt: skip
    ],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_standin_answers_like_the_real_engine(case, real_engine, standin_engine):
    for engine in (real_engine, standin_engine):
        engine.sql.exec(SETUP)
    for statement in CASES[case]:
        assert answer(standin_engine, *statement) == answer(real_engine, *statement), statement[0][:200]


# -- a whole run, statement by statement ------------------------------------------------------


class MirroredEngine:
    """A Durable Object SQL engine that runs everything on the real one and on the stand-in's,
    and notes every answer (rows and column names) the stand-in gives differently. Noted, not
    raised: the run's callers catch exceptions, and a raise would leave the engines out of step."""

    def __init__(self, real: WorkerdSqlEngine, standin: SqliteEngine, differences: list[str]) -> None:
        self._real, self._standin, self._differences = real, standin, differences
        self.sql = self

    def exec(self, query: str, *bindings: Any) -> SqlCursor:
        real, standin = outcome(self._real, query, *bindings), outcome(self._standin, query, *bindings)
        if spelled(standin) != spelled(real):
            self._differences.append(f"{query!r} {bindings!r}: stand-in {spelled(standin)}, real {spelled(real)}")
        if isinstance(real, SqlError):
            raise real
        return real

    def transactionSync(self, fn: Callable[[], Any]) -> Any:
        return self._real.transactionSync(lambda: self._standin.transactionSync(fn))


class MirroredPort:
    """A `SqlPort` that runs every statement on the local sqlite3 port and on the Durable Object
    port, and notes every answer (after the ports' number handling) that differs."""

    def __init__(self, local: SqliteSqlPort, durable: DurableObjectSqlPort, differences: list[str]) -> None:
        self._local, self._durable, self._differences = local, durable, differences
        self.statements: set[str] = set()

    def execute(self, sql: str, params=()) -> list[tuple]:
        self.statements.add(sql)
        local, durable = self._local.execute(sql, params), self._durable.execute(sql, params)
        if repr(local) != repr(durable):
            self._differences.append(f"{sql!r} {params!r}: local {local!r}, Durable Object {durable!r}")
        return durable

    def execute_rows(self, each: str, bulk: str, shared, rows) -> None:
        # each port writes the rows its own way (the local one a statement per row, the Durable
        # Object a batch as one): the reads that follow compare what they stored
        self.statements |= {each, bulk} if len(rows) > 1 else {each}
        self._local.execute_rows(each, bulk, shared, rows)
        self._durable.execute_rows(each, bulk, shared, rows)

    def transaction(self, fn):
        return self._local.transaction(lambda: self._durable.transaction(fn))


def ledger_statements() -> set[str]:
    """Every statement ledger_sql.py and migrations.py define (their upper-case strings, but for
    column and status lists and expressions), and every migration's."""
    found = set()
    for module in (ledger_sql, migrations):
        names = [name for name, value in vars(module).items() if name.isupper() and isinstance(value, str)]
        found |= {getattr(module, name) for name in names if not name.endswith(("_COLUMNS", "_STATUSES", "_JOIN", "_EXPR", "_CTE"))}
    return found | {statement for migration in migrations.MIGRATIONS for statement in migration.statements}


async def fork_script(authority) -> None:
    """A fork with its open commands (a catalog method: a Durable Object runs a copy instead, but
    its statements are written for the object's engine too, and checked on it here)."""
    await authority.create_world("w-fork-source", "source")
    epoch = (await authority.acquire_writer("w-fork-source"))["writer_epoch"]
    manifest = {"world_id": "w-fork-source", "tick": 0, "writer_epoch": epoch, "settlements": [], "written_runs": [[1, 1]],
                "commit_token": "t0"}  # fmt: skip
    await authority.publish("w-fork-source", "o", "s", manifest, {"snapshot": True, "chunks": ['[[1,"[]"]]']})
    await authority.admit("w-fork-source", [{**raw_spawn("w-fork-source", "later"), "scheduled_tick": 5}])
    await authority.fork_world("w-fork-source", 0, "w-fork", "fork", True)
    await authority.fork_world("w-fork-source", 0, "w-fork", "fork", True)  # the same fork again
    # batches with a principal and a reserved entity (INSERT_COMMANDS: every value of a row bound) and
    # with neither (INSERT_UNATTRIBUTED_COMMANDS)
    await authority.admit("w-fork-source", [{**raw_spawn("w-fork-source", f"bound-{i}"), "principal": "alice",
                                             "reserved_entity_id": 7} for i in range(2)])  # fmt: skip
    await authority.admit("w-fork-source", [raw_spawn("w-fork-source", f"unattributed-{i}") for i in range(2)])


def copy_script(ledger: Ledger) -> None:
    """The same fork as the Durable Object copies it (docs/ledger.md, "Forks on the Durable
    Object"), both objects' steps in one store here: the plan, the pages, activation, release; the
    source with schemas and a migration to copy."""
    ledger.record_components("w-fork-source", [schema_row(Health), schema_row(Position)])
    epoch = ledger.acquire_writer("w-fork-source")["writer_epoch"]
    ledger.migrate_components("w-fork-source", epoch, {"name": "Position", "from_fingerprint": Health.component_fingerprint(),
                                                       "to_fingerprint": Position.component_fingerprint()}, [], [])  # fmt: skip
    # an open command with a component value: its copy's check reads the schemas as the fork sees them
    ledger.admit("w-fork-source", [{**raw_spawn("w-fork-source", "placed", value(Position, x=1.0, y=2.0)), "scheduled_tick": 5}])
    plan = ledger.fork_plan("w-fork-source", "w-copy", 0, "copy", True)
    assert not ledger.fork_begin("w-copy", "w-fork-source", 0, "copy")["started"]
    cursor = ledger.fork_begin("w-copy", "w-fork-source", 0, "copy", plan)["cursor"]
    while cursor is not None:
        cursor = ledger.fork_write("w-copy", ledger.fork_page("w-fork-source", "w-copy", cursor))
    ledger.fork_activate("w-copy")
    ledger.fork_release("w-fork-source", "w-copy")


async def test_every_ledger_statement_answers_alike_on_the_local_port_the_real_engine_and_the_standin(
    tmp_path, real_engine, standin_engine
):
    clock = ManualClock()
    local = SqliteSqlPort(tmp_path / "local.sqlite3")
    engines_differ: list[str] = []
    hosts_differ: list[str] = []
    durable = DurableObjectSqlPort(MirroredEngine(real_engine, standin_engine, engines_differ))
    port = MirroredPort(local, durable, hosts_differ)
    ledger = Ledger(port, clock)
    authority = InProcessAuthority(ledger, close=local.close)
    try:
        await run_scenario(authority, clock)
        await ledger_script(authority, clock)
        await fork_script(authority)
        copy_script(ledger)
        await authority.list_worlds()
        port.execute(ledger_sql.PENDING_WORLDS)  # the local catalog's runner read, not a ledger method
        port.execute(ledger_sql.BACKLOG_WORLDS)  # the local catalog's audit projector read, not a ledger method
        Ledger(port, clock)  # re-opened: reads the schema version it wrote
    finally:
        await authority.close()
    assert ledger_statements() - port.statements == set()
    assert hosts_differ == []
    assert engines_differ == []
