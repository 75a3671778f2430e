"""`SqlPort` over the standard library's sqlite3.

WAL journal, `BEGIN IMMEDIATE` per transaction (the write lock is taken up front, so two
processes never deadlock upgrading a read), a busy timeout for waiting on other processes, and
`synchronous=FULL` by default: a committed transaction survives power loss, not only a process
crash. `synchronous="NORMAL"` trades the last transactions before a power loss for speed.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

SYNCHRONOUS_MODES = ("FULL", "NORMAL")


class SqliteSqlPort:
    def __init__(self, path: str | Path, *, synchronous: str = "FULL", busy_timeout_ms: int = 30_000) -> None:
        if synchronous not in SYNCHRONOUS_MODES:
            raise ValueError(f"synchronous must be one of {SYNCHRONOUS_MODES}")
        self.path = Path(path)
        self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute(f"PRAGMA synchronous = {synchronous}")
        self._depth = 0

    def execute(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        return self._conn.execute(sql, tuple(params)).fetchall()

    def transaction(self, fn: Callable[[], T]) -> T:
        if self._depth:
            return fn()  # already inside a transaction: it is all one atomic unit
        self._conn.execute("BEGIN IMMEDIATE")
        self._depth += 1
        try:
            result = fn()
        except BaseException:
            self._depth -= 1
            self._conn.execute("ROLLBACK")
            raise
        self._depth -= 1
        try:
            self._conn.execute("COMMIT")
        except BaseException:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise
        return result

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
        self._conn.execute("BEGIN IMMEDIATE")
        self._depth += 1
        results: list[T | Exception] = []
        try:
            for call in calls:
                self._conn.execute("SAVEPOINT call")
                try:
                    results.append(call())
                except Exception as exc:
                    self._conn.execute("ROLLBACK TO call")
                    results.append(exc)
                self._conn.execute("RELEASE call")
        except BaseException:
            self._depth -= 1
            self._conn.execute("ROLLBACK")
            raise
        self._depth -= 1
        try:
            self._conn.execute("COMMIT")
        except BaseException:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise
        return results

    def close(self) -> None:
        self._conn.close()
