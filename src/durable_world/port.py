"""`SqlPort` over a SQLite-backed Durable Object's `ctx.storage`.

Statements run through `ctx.storage.sql.exec(sql, *params)`, transactions through
`ctx.storage.transactionSync(fn)`. The Durable Object hands every number back as a JS double, so
integral values are turned back into `int` here: the ledger keeps integers within +/-(2**53-1) and has
no REAL columns, so an integral double is always an integer the ledger wrote.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from archetype.canonical import canonical_text
from archetype.commands.errors import storage_unavailable
from durable_world.ffi import sql_binding, to_py

T = TypeVar("T")


def _number(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


class DurableObjectSqlPort:
    """`rows_read` and `rows_written` sum the engine's own counters (each cursor's final
    `rowsRead`/`rowsWritten`, what Cloudflare bills) over every statement this port ran."""

    def __init__(self, storage: Any) -> None:
        self._storage = storage
        self._sql = storage.sql
        self.rows_read = 0
        self.rows_written = 0

    def execute(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        # raw() rows are column arrays in select order, which is what the ledger indexes by;
        # toArray() consumes the cursor now, before any await can let another event in.
        try:
            cursor = self._sql.exec(sql, *[sql_binding(p) for p in params])
            rows = to_py(cursor.raw().toArray())
        except Exception as exc:  # the object's storage is full ("database or disk is full: SQLITE_FULL"): typed
            refusal = storage_unavailable(exc)
            if refusal is None:
                raise
            raise refusal from exc
        self.rows_read += int(cursor.rowsRead)  # final once the cursor is consumed
        self.rows_written += int(cursor.rowsWritten)
        return [tuple(_number(v) for v in row) for row in rows]

    def execute_rows(self, each: str, bulk: str, shared: Sequence[object], rows: Sequence[Sequence[object]]) -> None:
        # Every statement is a crossing into JavaScript: several rows are one, through their JSON
        # array; a row alone binds its values (no JSON to parse).
        if len(rows) == 1:
            self.execute(each, (*shared, *rows[0]))
        else:
            self.execute(bulk, (*shared, canonical_text(rows)))

    def transaction(self, fn: Callable[[], T]) -> T:
        # The callback's result and exception are kept on the Python side: crossing the JS
        # transactionSync frame would otherwise turn them into proxies / a generic JS error.
        outcome: dict[str, Any] = {}

        def body() -> None:
            try:
                outcome["value"] = fn()
            except BaseException as exc:
                outcome["error"] = exc
                raise

        try:
            self._storage.transactionSync(body)
        except BaseException as exc:
            if "error" in outcome:
                raise outcome["error"] from None
            refusal = storage_unavailable(exc)  # the commit itself could not write
            if refusal is None:
                raise
            raise refusal from exc
        return outcome["value"]
