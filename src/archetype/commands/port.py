"""The SQL port the ledger runs over, and the clock it reads.

Both authorities are SQLite underneath: the local catalog (`sqlite3`) and the Durable Object
(`ctx.storage.sql`). The ledger's SQL is written for the stricter of the two: no BEGIN/COMMIT/
SAVEPOINT, ATTACH, TEMP objects or PRAGMA user_version in statements, at most 100 bound
parameters (bulk work goes through `json_each(?)`), integers within +/-(2**53-1).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class SqlPort(Protocol):
    def execute(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        """Run one statement; return every row as a tuple (integers as int)."""

    def execute_rows(self, each: str, bulk: str, shared: Sequence[object], rows: Sequence[Sequence[object]]) -> None:
        """Write `rows` (one or more) by whichever of two statements writing the same rows this port
        runs cheaper: `each` once per row, bound to `shared` and then that row's values, or `bulk`
        once, bound to `shared` and then the rows as one JSON array of arrays."""

    def transaction(self, fn: Callable[[], T]) -> T:
        """Run `fn` atomically; roll back and re-raise if it raises."""


@dataclass(frozen=True)
class StorageFault:
    """Why the storage's writes fail (a full disk: `storage_unavailable`, docs/errors.md) and since
    when (ms): what `GET /health` says until a write succeeds again."""

    message: str
    since_ms: int


class Clock(Protocol):
    def now_ms(self) -> int: ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock tests move by hand, so both authorities see the same timestamps."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self._now = now_ms

    def now_ms(self) -> int:
        return self._now

    def advance(self, ms: int) -> None:
        self._now += ms
