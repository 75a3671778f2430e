"""The workerd fixture does what docs/verification.md says it does (rung 2: the real engine).

Transactions are replayed (tests/support/workerd/engine.py): these tests pin down that a commit is
atomic on the real engine, a raising callback leaves nothing, and a replay that would commit
something other than what the caller saw commits nothing, a remembered answer included.
"""

from __future__ import annotations

import uuid

import pytest

from tests.support.durable_object_standin import SqlError
from tests.support.workerd import engine as workerd
from tests.support.workerd.engine import ReplayDivergedError, WorkerdError, WorkerdSqlEngine, shared_server

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def name() -> str:
    return f"fixture-{uuid.uuid4().hex}"


@pytest.fixture
def engine(name) -> WorkerdSqlEngine:
    engine = WorkerdSqlEngine(shared_server(), name)
    engine.sql.exec("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)")
    return engine


def rows(engine, query="SELECT k, v FROM t ORDER BY k"):
    return engine.sql.exec(query).raw().toArray()


def test_a_transaction_sees_its_own_writes_and_commits_them_all(engine, name):
    def body():
        engine.sql.exec("INSERT INTO t VALUES ('a', ?)", 1)
        assert rows(engine, "SELECT count(*) FROM t") == [[1.0]]
        engine.sql.exec("UPDATE t SET v = v + ? WHERE k = 'a'", 10)
        engine.sql.exec("INSERT INTO t VALUES ('b', ?)", 2)
        return rows(engine)

    assert engine.transactionSync(body) == [["a", 11.0], ["b", 2.0]]
    # a fresh client of the same object reads what was committed on the engine
    assert rows(WorkerdSqlEngine(shared_server(), name)) == [["a", 11.0], ["b", 2.0]]


def test_a_raising_callback_leaves_nothing_behind(engine):
    def body():
        engine.sql.exec("INSERT INTO t VALUES ('a', 1)")
        assert rows(engine) == [["a", 1.0]]
        raise KeyError("undo")

    with pytest.raises(KeyError):
        engine.transactionSync(body)
    assert rows(engine) == []


def test_a_failed_statement_is_undone_alone_and_the_transaction_goes_on(engine):
    engine.sql.exec("INSERT INTO t VALUES ('a', 1)")

    def body():
        engine.sql.exec("INSERT INTO t VALUES ('b', 2)")
        with pytest.raises(SqlError, match="UNIQUE"):
            engine.sql.exec("INSERT INTO t VALUES ('c', 3), ('a', 4)")
        engine.sql.exec("INSERT INTO t VALUES ('d', 5)")

    engine.transactionSync(body)
    assert rows(engine) == [["a", 1.0], ["b", 2.0], ["d", 5.0]]


@pytest.mark.parametrize("interfering", ["before the last statement", "after it"])
def test_a_replay_that_answers_otherwise_commits_nothing(engine, name, interfering):
    other_client = WorkerdSqlEngine(shared_server(), name)

    def interfere():  # a write the replay cannot know about: the count it saw changes
        other_client.sql.exec("INSERT INTO t VALUES ('theirs', 0)")

    def body():
        seen = rows(engine, "SELECT count(*) FROM t")
        if interfering == "before the last statement":
            interfere()
        engine.sql.exec("INSERT INTO t VALUES ('mine', ?)", seen[0][0])
        if interfering == "after it":
            interfere()

    with pytest.raises(ReplayDivergedError):
        engine.transactionSync(body)
    assert rows(engine) == [["theirs", 0.0]]


def test_a_remembered_answer_that_no_longer_holds_commits_nothing(engine):
    """An answer seen for an object's history is given to another object with the same history
    without a request; should its state differ (here by a write the fixture never saw), the commit fails."""

    def count_then_insert(engine):
        seen = rows(engine, "SELECT count(*) FROM t")
        engine.sql.exec("INSERT INTO t VALUES ('mine', ?)", seen[0][0])
        return seen

    assert engine.transactionSync(lambda: count_then_insert(engine)) == [[0.0]]
    twin = WorkerdSqlEngine(shared_server(), f"twin-{uuid.uuid4().hex}")
    twin.sql.exec("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)")
    shared_server().run(twin.object_name, [["INSERT INTO t VALUES ('unseen', 7)", []]])
    with pytest.raises(ReplayDivergedError):
        twin.transactionSync(lambda: count_then_insert(twin))
    assert rows(twin) == [["unseen", 7.0]]


def test_transactions_do_not_nest(engine):
    with pytest.raises(SqlError, match="nested"):
        engine.transactionSync(lambda: engine.transactionSync(lambda: None))


def test_without_workerd_the_fixture_fails_rather_than_skips(monkeypatch, tmp_path):
    monkeypatch.setattr(workerd, "WORKERD", tmp_path / "workerd")
    with pytest.raises(WorkerdError, match="dev setup"):
        workerd.WorkerdServer()
