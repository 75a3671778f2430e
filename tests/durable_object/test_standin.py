"""The Durable Object stand-in obeys the runtime rules it claims to model (one test per rule)."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import BaseModel

from tests.support.durable_object_standin import (
    CloneError,
    DurableObjectNamespace,
    FakeQueue,
    QueueError,
    RemoteError,
    Row,
    SqlError,
    StandinEnv,
    check_cloneable,
)

pytestmark = pytest.mark.timeout(30)


class Probe:
    """A minimal Durable Object class: enough surface to exercise the runtime."""

    def __init__(self, ctx, env):
        self.ctx = ctx
        self.env = env
        self.events: list[str] = []
        self.alarms = 0
        self.fail_alarm = False

    async def slow(self, label):
        self.events.append(f"enter {label}")
        await asyncio.sleep(0.01)
        self.events.append(f"exit {label}")
        return label

    def echo(self, value):
        return value

    def explode(self):
        raise KeyError("boom")

    def give(self, kind):
        return {"tuple": (1, 2), "model": Thing(x=1), "error": ValueError("no")}[kind]

    async def alarm(self, alarm_info):
        self.alarms += 1
        if self.fail_alarm:
            raise RuntimeError("alarm failed")


class Thing(BaseModel):
    x: int


@pytest.fixture
def namespace(tmp_path):
    ns = DurableObjectNamespace(Probe, StandinEnv(), tmp_path)
    yield ns
    ns.close()


@pytest.fixture
def sql(namespace):
    return namespace.storage("probe").sql


# -- SQL statements --


@pytest.mark.parametrize(
    "statement",
    [
        "BEGIN",
        "BEGIN IMMEDIATE TRANSACTION",
        "COMMIT",
        "ROLLBACK",
        "SAVEPOINT sp",
        "RELEASE sp",
        "ATTACH DATABASE ':memory:' AS other",
        "DETACH DATABASE other",
        "CREATE TEMP TABLE scratch (x)",
        "CREATE TEMPORARY VIEW v AS SELECT 1",
        "CREATE TABLE temp.scratch (x)",
        "PRAGMA user_version",
        "PRAGMA user_version = 3",
        "PRAGMA journal_mode = WAL",
        "PRAGMA synchronous = OFF",
    ],
)
def test_forbidden_statements_are_rejected(sql, statement):
    with pytest.raises(SqlError, match="not authorized"):
        sql.exec(statement)


def test_documented_pragmas_are_allowed(sql):
    sql.exec("CREATE TABLE t (a INTEGER PRIMARY KEY, b TEXT)")
    names = [row.name for row in sql.exec("PRAGMA table_info(t)").toArray()]
    assert names == ["a", "b"]
    assert any(row.name == "t" for row in sql.exec("PRAGMA table_list").toArray())
    sql.exec("PRAGMA foreign_keys = ON")


def test_bound_parameters_are_capped_at_100(sql):
    placeholders = ", ".join("?" * 100)
    assert len(sql.exec(f"SELECT {placeholders}", *range(100)).raw().toArray()[0]) == 100
    with pytest.raises(SqlError, match="too many SQL variables"):
        sql.exec(f"SELECT {placeholders}, ?", *range(101))


def test_statements_are_capped_at_100_kb(sql):
    padding = "x" * (100_000 - len("SELECT ''"))
    assert sql.exec(f"SELECT '{padding}'").one()
    with pytest.raises(SqlError, match="statement too long"):
        sql.exec(f"SELECT '{padding}x'")


def test_only_plain_values_bind(sql):
    with pytest.raises(SqlError, match="cannot bind"):
        sql.exec("SELECT ?", [1, 2])


def test_values_bind_as_the_engine_binds_js_values(sql):
    # a Python int is a JS number: REAL, even where SQL turns it into text
    assert sql.exec("SELECT typeof(?), 'w/' || (? + 1), ?", 1, 1, 2**53 - 2).raw().toArray() == [
        ["real", "w/2.0", 9007199254740990.0]
    ]
    assert sql.exec("SELECT typeof(?), ?, ?", True, True, False).raw().toArray() == [["text", "true", "false"]]
    for bigint in (2**53 - 1, -(2**53 - 1), 2**53 + 1):  # Pyodide's BigInts (ffi.sql_binding passes floats)
        with pytest.raises(SqlError, match="BigInt"):
            sql.exec("SELECT ?", bigint)


# -- cursors --


def test_numbers_come_back_as_doubles_and_rows_as_attribute_dicts(sql):
    sql.exec("CREATE TABLE t (id INTEGER, name TEXT, score REAL)")
    sql.exec("INSERT INTO t VALUES (?, ?, ?), (?, ?, ?)", 1, "a", 0.5, 2, "b", 2.0)
    rows = sql.exec("SELECT id, name, score FROM t ORDER BY id").toArray()
    assert rows == [{"id": 1.0, "name": "a", "score": 0.5}, {"id": 2.0, "name": "b", "score": 2.0}]
    assert isinstance(rows[0], Row) and type(rows[0].id) is float and rows[1].name == "b"
    with pytest.raises(AttributeError):
        rows[0].missing  # noqa: B018 - the access is what raises


def test_one_requires_exactly_one_row(sql):
    sql.exec("CREATE TABLE t (x)")
    with pytest.raises(SqlError, match="got 0"):
        sql.exec("SELECT x FROM t").one()
    sql.exec("INSERT INTO t VALUES (1), (2)")
    with pytest.raises(SqlError, match="got 2"):
        sql.exec("SELECT x FROM t").one()
    assert sql.exec("SELECT count(*) AS n FROM t").one().n == 2.0


def test_raw_rows_are_arrays_sharing_the_cursor_position(sql):
    cursor = sql.exec("SELECT 1 AS a, 'x' AS b UNION ALL SELECT 2, 'y' UNION ALL SELECT 3, 'z'")
    assert cursor.columnNames == ["a", "b"]
    first = cursor.raw().next()
    assert (first.done, first.value) == (False, [1.0, "x"])
    assert cursor.next().value == {"a": 2.0, "b": "y"}
    assert cursor.raw().toArray() == [[3.0, "z"]]
    assert cursor.toArray() == [] and cursor.next().done


def test_cursors_count_rows_read_and_written(sql):
    sql.exec("CREATE TABLE t (x)")
    insert = sql.exec("INSERT INTO t SELECT value FROM json_each(?)", "[1, 2, 3]")
    assert (insert.rowsWritten, insert.rowsRead) == (3, 3)
    update = sql.exec("UPDATE t SET x = x + 1 WHERE x >= 2")
    assert update.rowsWritten == 2
    select = sql.exec("SELECT x FROM t")
    assert (select.rowsWritten, select.rowsRead) == (0, 3)


# -- transactions --


def test_transaction_sync_commits_and_rolls_back(namespace, sql):
    storage = namespace.storage("probe")
    sql.exec("CREATE TABLE t (x)")
    assert storage.transactionSync(lambda: sql.exec("INSERT INTO t VALUES (1)").rowsWritten) == 1

    def failing():
        sql.exec("INSERT INTO t VALUES (2)")
        raise ValueError("undo")

    with pytest.raises(ValueError, match="undo"):
        storage.transactionSync(failing)
    assert sql.exec("SELECT x FROM t").raw().toArray() == [[1.0]]


def test_nested_transaction_rolls_back_only_its_own_work(namespace, sql):
    storage = namespace.storage("probe")
    sql.exec("CREATE TABLE t (x)")

    def inner():
        sql.exec("INSERT INTO t VALUES (2)")
        raise KeyError("inner")

    def outer():
        sql.exec("INSERT INTO t VALUES (1)")
        with pytest.raises(KeyError):
            storage.transactionSync(inner)

    storage.transactionSync(outer)
    assert sql.exec("SELECT x FROM t").raw().toArray() == [[1.0]]


def test_transaction_sync_rejects_async_callbacks(namespace, sql):
    storage = namespace.storage("probe")
    sql.exec("CREATE TABLE t (x)")

    async def callback():
        return None

    def writes_then_returns_coroutine():
        sql.exec("INSERT INTO t VALUES (1)")
        return callback()

    with pytest.raises(TypeError, match="synchronously"):
        storage.transactionSync(writes_then_returns_coroutine)
    assert sql.exec("SELECT count(*) FROM t").raw().toArray() == [[0.0]]


# -- one event at a time --


async def test_one_call_at_a_time_per_object(namespace):
    stub = namespace.getByName("probe")
    assert await asyncio.gather(stub.slow("a"), stub.slow("b")) == ["a", "b"]
    assert namespace.instance("probe").events == ["enter a", "exit a", "enter b", "exit b"]


async def test_different_objects_run_concurrently(namespace):
    await asyncio.gather(namespace.getByName("one").slow("a"), namespace.getByName("two").slow("b"))
    one, two = namespace.instance("one"), namespace.instance("two")
    assert one is not two and one.events == ["enter a", "exit a"] and two.events == ["enter b", "exit b"]


# -- RPC boundary --


@pytest.mark.parametrize(
    "value",
    [(1, 2), {1, 2}, Thing(x=1), ValueError("x"), object(), b"bytes", 2**53, {"nested": [(1,)]}, {1: "int key"}],
)
def test_only_plain_data_can_be_cloned(value):
    with pytest.raises(CloneError):
        check_cloneable(value)


async def test_rpc_arguments_and_results_are_cloned(namespace):
    stub = namespace.getByName("probe")
    value = {"a": [1, 2.5, None, True, "s"], "b": {"c": 3.0}}
    result = await stub.echo(value)
    assert result == {"a": [1, 2.5, None, True, "s"], "b": {"c": 3}} and type(result["b"]["c"]) is int
    assert result is not value
    with pytest.raises(CloneError):
        await stub.echo((1, 2))
    with pytest.raises(TypeError, match="positional"):
        await stub.echo(value=1)


@pytest.mark.parametrize("kind", ["tuple", "model", "error"])
async def test_rpc_results_must_be_plain_data(namespace, kind):
    with pytest.raises(CloneError):
        await namespace.getByName("probe").give(kind)


async def test_exceptions_lose_their_python_class_across_rpc(namespace):
    with pytest.raises(RemoteError, match="KeyError: 'boom'") as caught:
        await namespace.getByName("probe").explode()
    assert not isinstance(caught.value, KeyError)
    with pytest.raises(RemoteError, match="no RPC method"):
        await namespace.getByName("probe").missing()


async def test_ids_are_deterministic_and_storage_survives_eviction(namespace):
    assert namespace.idFromName("w").toString() == namespace.idFromName("w").toString()
    assert namespace.idFromName("w").toString() != namespace.idFromName("v").toString()
    namespace.storage("w").sql.exec("CREATE TABLE kept (x)")
    before = namespace.instance("w")
    namespace.evict("w")
    assert namespace.instance("w") is not before
    assert namespace.storage("w").sql.exec("SELECT name FROM sqlite_master WHERE name = 'kept'").one().name == "kept"


# -- alarms --


async def test_alarm_runs_once_and_is_cleared(namespace):
    storage = namespace.storage("probe")
    assert await storage.getAlarm() is None
    assert not await namespace.run_alarm("probe")
    await storage.setAlarm(1_700_000_000_000)
    assert await storage.getAlarm() == 1_700_000_000_000
    assert await namespace.run_alarm("probe")
    assert namespace.instance("probe").alarms == 1 and await storage.getAlarm() is None
    await storage.setAlarm(5)
    await storage.deleteAlarm()
    assert not await namespace.run_alarm("probe")


async def test_a_failing_alarm_stays_set_for_retry(namespace):
    storage = namespace.storage("probe")
    namespace.instance("probe").fail_alarm = True
    await storage.setAlarm(42)
    with pytest.raises(RuntimeError):
        await namespace.run_alarm("probe")
    assert await storage.getAlarm() == 42


# -- queue --


async def test_queue_accepts_batches_within_limits():
    queue = FakeQueue()
    await queue.sendBatch([{"body": {"n": i}, "contentType": "json"} for i in range(100)])
    await queue.send({"n": 100})
    assert [m["n"] for m in queue.messages] == list(range(101))


@pytest.mark.parametrize(
    "messages, error",
    [
        ([{"body": i} for i in range(101)], "exceeds 100"),
        ([{"body": "x" * 127_000}, {"body": "y" * 127_000}, {"body": "z" * 2_000}], "bytes exceeds 256000"),
        ([{"body": "x" * 128_000}], "bytes > 128000"),
        ([], "at least one"),
    ],
)
async def test_queue_rejects_batches_over_the_limits(messages, error):
    queue = FakeQueue()
    with pytest.raises(QueueError, match=error):
        await queue.sendBatch(messages)
    assert queue.messages == []


@pytest.mark.parametrize("messages", [({"body": 1},), [{"payload": 1}], [{"body": 1, "extra": 2}], [{"body": (1,)}]])
async def test_queue_rejects_malformed_messages(messages):
    with pytest.raises(TypeError):
        await FakeQueue().sendBatch(messages)


async def test_queue_failures_deliver_nothing():
    queue = FakeQueue()
    queue.fail_next()
    with pytest.raises(QueueError):
        await queue.sendBatch([{"body": 1}])
    await queue.sendBatch([{"body": 2}])
    assert queue.messages == [2]
