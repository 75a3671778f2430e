"""`SqlPort` over the standard library's sqlite3.

WAL journal, `BEGIN IMMEDIATE` per transaction (the write lock is taken up front, so two
processes never deadlock upgrading a read), handed from one of our writers to the next by the
kernel rather than polled for (`local_catalog.writer_lock`), a busy timeout for waiting on any
other writer, and
`synchronous=FULL` by default: a committed transaction survives power loss, not only a process
crash. `synchronous="NORMAL"` trades the last transactions before a power loss for speed.

A writer's port remembers a write the storage refused (`write_fault`: a full disk, an I/O error)
until a transaction that changed rows commits: that is the catalog's health (`GET /health`).
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from archetype.commands.errors import StorageUnavailableError, storage_unavailable
from archetype.commands.port import StorageFault, SystemClock
from archetype.world.error_text import error_text

if TYPE_CHECKING:
    from local_catalog.writer_lock import WriterLock

T = TypeVar("T")

SYNCHRONOUS_MODES = ("FULL", "NORMAL")


def _raise_storage_error(exc: sqlite3.Error) -> NoReturn:
    """Raise what sqlite3 raised: a full disk or an I/O error as StorageUnavailableError (typed,
    retryable: a 503 over HTTP); anything else as it is."""
    refusal = storage_unavailable(exc)
    if refusal is None:
        raise exc
    raise refusal from exc


class SqliteSqlPort:
    def __init__(self, path: str | Path, *, synchronous: str = "FULL", busy_timeout_ms: int = 30_000,
                 read_only: bool = False) -> None:  # fmt: skip
        """`read_only`: a reader's connection (`local_catalog.reader`): `query_only`, and each
        transaction a deferred one, a snapshot taken without the write lock."""
        if synchronous not in SYNCHRONOUS_MODES:
            raise ValueError(f"synchronous must be one of {SYNCHRONOUS_MODES}")
        self.path = Path(path)
        self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute(f"PRAGMA synchronous = {synchronous}")
        # every statement through one cursor (a port serves one thread at a time: the writer
        # thread, the reader's), fetched whole before the next: Connection.execute makes and
        # drops a cursor per statement, and an admission runs five
        self._cursor = self._conn.cursor()
        self._begin = "BEGIN IMMEDIATE"
        self._depth = 0
        self._writer_lock: WriterLock | None = None
        self.write_fault: StorageFault | None = None  # the storage refused a write, and none succeeded since
        if read_only:
            self._conn.execute("PRAGMA query_only = ON")
            self._begin = "BEGIN DEFERRED"
        elif sys.platform != "emscripten":  # Pyodide: one process, one writer, and no flock worth the name
            from local_catalog.writer_lock import WriterLock

            self._writer_lock = WriterLock(self.path, busy_timeout_ms / 1000)

    def execute(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        try:
            return self._cursor.execute(sql, tuple(params)).fetchall()
        except sqlite3.Error as exc:
            _raise_storage_error(exc)

    def execute_rows(self, each: str, bulk: str, shared: Sequence[object], rows: Sequence[Sequence[object]]) -> None:
        # `each` stepped once per row, prepared once: a JSON array of the rows costs SQLite its
        # parse and a path per value, more than the rows' b-tree inserts (ledger_sql.INSERT_COMMAND);
        # a row alone through `execute` (executemany's set-up for one row is ~2k instructions more);
        # each row's parameters joined in C (`tuple.__add__` through `map`), not by a comprehension
        try:
            if len(rows) == 1:
                self._cursor.execute(each, (*shared, *rows[0]))
            else:
                self._cursor.executemany(each, map(tuple(shared).__add__, map(tuple, rows)))
        except sqlite3.Error as exc:
            _raise_storage_error(exc)

    def transaction(self, fn: Callable[[], T]) -> T:
        if self._depth:
            return fn()  # already inside a transaction: it is all one atomic unit
        return self._immediate(fn)

    def _immediate(self, fn: Callable[[], T]) -> T:
        """`fn` inside one BEGIN IMMEDIATE (a reader's: DEFERRED) .. COMMIT, rolled back when it or
        the commit raises; a storage failure is the `write_fault` until rows are written again."""
        changes = self._conn.total_changes
        try:
            result = self._commit(fn)
        except StorageUnavailableError as exc:
            fault = self.write_fault
            self.write_fault = StorageFault(error_text(exc), fault.since_ms if fault else SystemClock().now_ms())
            raise
        if self.write_fault is not None and self._conn.total_changes != changes:
            self.write_fault = None
        return result

    def _commit(self, fn: Callable[[], T]) -> T:
        """`_immediate`'s transaction. (Written out rather than as context managers: this runs once
        per admission, and generator context managers were a measurable share of its CPU.)"""
        lock = self._writer_lock
        if lock is not None:
            lock.acquire()
        try:
            self._cursor.execute(self._begin)
            self._depth += 1
            try:
                result = fn()
            except BaseException:
                self._depth -= 1
                if self._conn.in_transaction:  # SQLite rolls back by itself after a full disk or an I/O error
                    self._cursor.execute("ROLLBACK")
                raise
            self._depth -= 1
            try:
                self._cursor.execute("COMMIT")
            except BaseException:
                if self._conn.in_transaction:
                    self._cursor.execute("ROLLBACK")
                raise
            return result
        except sqlite3.Error as exc:
            _raise_storage_error(exc)
        finally:
            if lock is not None:
                lock.release()

    def group(self, calls: Sequence[Callable[[], T]]) -> list[T | Exception]:
        """Run several calls as one transaction, one commit (group commit): each call inside its
        own savepoint, so a call that raises rolls back only its own writes and answers its own
        exception, never its neighbours'. Every result exists only once the commit did; a failed
        commit fails them all. A call alone runs as it is: its own transactions (destroy's several)."""
        if len(calls) == 1:
            try:
                return [calls[0]()]
            except Exception as exc:
                return [exc]
        return self._immediate(lambda: [self.attempt(call) for call in calls])

    def attempt(self, call: Callable[[], T]) -> T | Exception:
        """`call` inside a savepoint of the transaction in progress: what it raised is rolled back
        and answered, and the rest of the transaction goes on."""
        self._cursor.execute("SAVEPOINT call")
        try:
            result: T | Exception = call()
        except Exception as exc:
            if not self._conn.in_transaction:  # SQLite rolled the whole transaction back (a full disk): it fails whole
                raise
            self._cursor.execute("ROLLBACK TO call")
            result = exc
        self._cursor.execute("RELEASE call")
        return result

    def close(self) -> None:
        self._conn.close()
        if self._writer_lock is not None:
            self._writer_lock.close()
