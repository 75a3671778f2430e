"""Durable Object SQL billing units, metered: every `ctx.storage.sql.exec` cursor's `rowsRead` and
`rowsWritten` (what Cloudflare bills), summed per named part of the work (an RPC method, a phase).

One meter for the benches that count them (bench/durable_object_billing.py, bench/edge_ticks.py,
bench/cost.py). The object's SQL is the stand-in's engine (tests/support: table rows only) or the
real Durable Object SQL engine (workerd, tests/support/workerd: index rows included, as billed);
`engines` names both.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the stand-in and the workerd fixture live in tests/support

from tests.support.workerd.engine import workerd_sql_engines

ENGINES = ("standin", "workerd")


def sql_engine(engine: str) -> Callable[[Any], Any] | None:
    """The `sql_engine` of a stand-in namespace for `engine` (None: the stand-in's own SQLite)."""
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r}: one of {ENGINES}")
    return workerd_sql_engines() if engine == "workerd" else None


@dataclass
class Figures:
    calls: int = 0  # object requests: RPC calls and alarms
    statements: int = 0
    rows_read: int = 0
    rows_written: int = 0
    alarms_set: int = 0  # setAlarm calls, each billed as a row written

    def __add__(self, other: Figures) -> Figures:
        return Figures(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def per(self, count: float) -> dict[str, float]:
        return {f.name: getattr(self, f.name) / count for f in fields(self)}


class Meter:
    """Sums cursor figures under the part of the work running now (`part`, or an RPC method of a
    wrapped authority); statements outside any part are not counted."""

    def __init__(self) -> None:
        self.totals: dict[str, Figures] = defaultdict(Figures)
        # the same figures per (part, statement): which statement writes which rows
        self.statements: dict[tuple[str, str], Figures] = defaultdict(Figures)
        self.current: str | None = None

    def wrap_sql(self, sql: Any) -> None:
        exec_ = sql.exec

        def metered(query: str, *bindings: Any) -> Any:
            cursor = exec_(query, *bindings)
            if self.current is not None:
                for figures in (self.totals[self.current], self.statements[self.current, query]):
                    figures.statements += 1
                    figures.rows_read += int(cursor.rowsRead)
                    figures.rows_written += int(cursor.rowsWritten)
            return cursor

        sql.exec = metered

    def wrap_storage(self, storage: Any) -> None:
        """Meter an object's `ctx.storage`: its SQL and its setAlarm calls."""
        self.wrap_sql(storage.sql)
        set_alarm = storage.setAlarm

        async def metered(*args: Any) -> Any:
            if self.current is not None:
                self.totals[self.current].alarms_set += 1
            return await set_alarm(*args)

        storage.setAlarm = metered

    def wrap_authority(self, authority: Any) -> None:
        """Count each RPC method of a `DurableObjectAuthority` as a part of its own, one call each."""
        call = authority.rpc

        async def metered(method: str, arguments: Any) -> Any:
            with self.part(method):
                return await call(method, arguments)

        authority.rpc = metered

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        """Count what runs inside under `name`, as one object request."""
        outer, self.current = self.current, name
        self.totals[name].calls += 1
        try:
            yield
        finally:
            self.current = outer

    def total(self) -> Figures:
        return sum(self.totals.values(), Figures())

    def reset(self) -> None:
        self.totals.clear()
        self.statements.clear()
