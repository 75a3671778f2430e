"""The catalog's write lock between processes (local_catalog.writer_lock): real processes on a real file."""

from __future__ import annotations

import contextlib
import fcntl
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from local_catalog import SqliteSqlPort

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def catalog(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.sqlite3"
    SqliteSqlPort(path).execute("CREATE TABLE t (who TEXT)")
    return path


@contextlib.contextmanager
def other_writer(catalog: Path, *args: str, until: str) -> Iterator[subprocess.Popen[str]]:
    """tests/local_catalog/busy_writer.py in a process of its own, once it printed `until`."""
    child = subprocess.Popen([sys.executable, "-m", "tests.local_catalog.busy_writer", str(catalog), *args], cwd=ROOT,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline() == f"{until}\n"
        yield child
    finally:
        child.kill()
        child.wait()


def writer_lock_is_free(catalog: Path) -> bool:
    with open(f"{catalog}-writer") as probe:
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True


def rows(port: SqliteSqlPort, who: str) -> int:
    return port.execute("SELECT count(*) FROM t WHERE who = ?", (who,))[0][0]


def test_a_small_writer_waits_about_one_transaction_of_a_busy_writer_in_another_process(catalog):
    """SQLite's busy handler polls (sleeps of up to 100 ms), and a writer committing back to back
    has the lock again each time it looks: before, the first small write starved until the busy
    writer stopped (worst of 20: 1.9-2.6 s, on 2 cores). The kernel hands the lock over: worst
    8-10 ms here, up to 31 ms with three processes spinning on the CPU."""
    port = SqliteSqlPort(catalog)
    waits = []
    with other_writer(catalog, "busy", "2.5", until="ready") as busy:
        for _ in range(20):
            started = time.perf_counter()
            port.transaction(lambda: port.execute("INSERT INTO t (who) VALUES ('small')"))
            waits.append(time.perf_counter() - started)
            time.sleep(0.01)
        still_busy = busy.poll() is None
    assert max(waits) < 0.5, f"ms waited: {[round(w * 1000) for w in waits]}"
    assert still_busy, "the busy writer stopped before the small one was done: nothing was measured"


def test_the_lock_is_released_on_rollback_on_an_exception_and_held_for_the_whole_outer_transaction(catalog):
    port = SqliteSqlPort(catalog)
    port.execute("PRAGMA foreign_keys = ON")
    port.execute("CREATE TABLE parents (id INTEGER PRIMARY KEY)")
    port.execute("CREATE TABLE children (parent INTEGER REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED)")

    def nested() -> None:
        port.transaction(lambda: port.execute("INSERT INTO t (who) VALUES ('inner')"))
        assert not writer_lock_is_free(catalog)  # the inner transaction is part of the outer one

    def interrupted() -> None:
        port.execute("INSERT INTO t (who) VALUES ('lost')")
        raise KeyboardInterrupt

    port.transaction(nested)
    assert writer_lock_is_free(catalog)
    with pytest.raises(sqlite3.IntegrityError):  # the COMMIT fails, and the port rolls back
        port.transaction(lambda: port.execute("INSERT INTO children VALUES (404)"))
    assert writer_lock_is_free(catalog)
    with pytest.raises(KeyboardInterrupt):
        port.transaction(interrupted)
    assert writer_lock_is_free(catalog)
    port.group([lambda: port.execute("INSERT INTO t (who) VALUES ('grouped')"), lambda: 1 / 0])
    assert writer_lock_is_free(catalog)
    assert (rows(port, "inner"), rows(port, "lost"), rows(port, "grouped")) == (1, 0, 1)


def test_a_writer_killed_while_holding_the_lock_does_not_block_the_next(catalog):
    port = SqliteSqlPort(catalog)
    wrote = threading.Event()
    with other_writer(catalog, "hold", until="holding") as holder:
        waiting = threading.Thread(target=lambda: (port.transaction(lambda: port.execute("INSERT INTO t VALUES ('next')")),
                                                   wrote.set()))  # fmt: skip
        waiting.start()
        assert not wrote.wait(0.3)
        holder.kill()  # SIGKILL: no ROLLBACK, no unlock of its own
        killed = time.perf_counter()
        assert wrote.wait(60)
        assert time.perf_counter() - killed < 10  # the kernel dropped its lock: not the 30 s busy timeout
        waiting.join()
    assert rows(port, "next") == 1


def test_a_writer_that_cannot_get_the_lock_in_time_fails_as_sqlite_would_and_writes_nothing(catalog):
    port = SqliteSqlPort(catalog, busy_timeout_ms=300)
    with other_writer(catalog, "hold", until="holding") as holder:
        assert port.execute("SELECT count(*) FROM t") == [(0,)]  # reads take no lock
        started = time.perf_counter()
        with pytest.raises(sqlite3.OperationalError, match="database is locked"):
            port.transaction(lambda: port.execute("INSERT INTO t (who) VALUES ('late')"))
        assert 0.3 <= time.perf_counter() - started < 10  # waited its busy timeout, then gave up (no wait forever)
        holder.kill()
        holder.wait()
    assert rows(port, "late") == 0
    port.transaction(lambda: port.execute("INSERT INTO t (who) VALUES ('after')"))  # the wait given up on let go
    assert rows(port, "after") == 1 and writer_lock_is_free(catalog)
