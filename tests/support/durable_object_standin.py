"""A stand-in for the Cloudflare Durable Object runtime, to run the REAL Durable Object class here.

workerd cannot run our Python offline, so this module models the parts of the runtime the world
object relies on, with the rules Cloudflare documents (Durable Objects SQL storage API, D1/DO SQL
limits, alarms, Queues producer limits, Python Workers RPC). Its SQL engine is pluggable: by
default `SqliteEngine` below (rung 1 of DESIGN's verification ladder), or the real Durable Object
SQL engine on workerd (tests/support/workerd: rung 2), which tests/durable_object/
test_engine_equivalence.py holds this one to, answer for answer.

- `ctx.storage.sql.exec(query, *bindings)` over a real SQLite file. Statements are vetted by a
  SQLite authorizer, as workerd does: transaction control (BEGIN/COMMIT/ROLLBACK/SAVEPOINT/RELEASE),
  ATTACH/DETACH, TEMP objects and PRAGMAs other than the documented ones are rejected; at most 100
  bound parameters; statements at most 100,000 bytes. Bindings arrive as Pyodide hands them over
  and are bound as the engine binds JS values: every int is a JS number, bound as REAL (so
  `'w/' || (? + 1)` is 'w/2.0'), one from +/-(2**53 - 1) on a BigInt, which the engine refuses; a bool is
  bound as the text 'true'/'false'. Numbers come back as floats (JS doubles),
  rows as dict-like objects with attribute access, through cursors with `toArray()`, `one()`,
  `raw()`, `next()`, `columnNames`, `rowsRead`, `rowsWritten`.
- `ctx.storage.transactionSync(fn)`: atomic, rolled back when `fn` raises, synchronous only.
- one event at a time per object (an input gate held for a whole call: stricter than workerd,
  which lets events interleave at non-storage awaits);
- alarms (`getAlarm`/`setAlarm`/`deleteAlarm`, fired by the test with `run_alarm`), refusing
  the times workerd refuses (<= 0, from 2**63 - 1 nanoseconds on);
- a Queue producer binding whose `sendBatch` enforces the batch limits and can be told to fail;
- RPC through stubs (`idFromName`/`get`/`getByName`) that structured-clone arguments and results
  and reject anything that is not plain data (tuples, models, exceptions, unsafe integers...).

Known simplifications, kept honest: cursors run eagerly, so `rowsRead` counts rows returned plus
rows written (SQLite does not expose rows scanned), and `rowsWritten` counts table rows changed
(Cloudflare also bills each index row updated); one statement per `exec` (Cloudflare runs several
separated by `;`, the ledger never sends more than one); the engine's allowlist of SQL functions
(it refuses e.g. `sqlite_version()`) is not modelled; bytes bind as a blob (under Pyodide they
would cross as a proxy object; the ledger binds none); the SQLite version is CPython's.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import json
import sqlite3
from collections.abc import Callable
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SQL_MAX_BOUND_PARAMETERS = 100
SQL_MAX_STATEMENT_BYTES = 100_000
# The PRAGMAs Cloudflare documents as available to D1 / SQLite-backed Durable Objects.
ALLOWED_PRAGMAS = frozenset({
    "table_list", "table_info", "table_xinfo", "index_list", "index_info", "index_xinfo",
    "quick_check", "foreign_key_check", "foreign_key_list", "case_sensitive_like",
    "ignore_check_constraints", "legacy_alter_table", "recursive_triggers",
    "reverse_unordered_selects", "foreign_keys", "defer_foreign_keys",
})  # fmt: skip
JS_MAX_SAFE_INTEGER = 2**53 - 1
# setAlarm refuses a time from here on: 2**63 - 1 nanoseconds, in milliseconds (observed on workerd).
ALARM_LIMIT_MS = (2**63 - 1) / 1_000_000

QUEUE_MAX_BATCH_MESSAGES = 100
QUEUE_MAX_BATCH_BYTES = 256_000
QUEUE_MAX_MESSAGE_BYTES = 128_000
QUEUE_MESSAGE_OVERHEAD_BYTES = 100
QUEUE_MESSAGE_FIELDS = frozenset({"body", "contentType", "delaySeconds"})

_DENIED_ACTIONS = {
    sqlite3.SQLITE_TRANSACTION: "transaction control (use ctx.storage.transactionSync)",
    sqlite3.SQLITE_SAVEPOINT: "savepoints (use ctx.storage.transactionSync)",
    sqlite3.SQLITE_ATTACH: "ATTACH",
    sqlite3.SQLITE_DETACH: "DETACH",
    sqlite3.SQLITE_CREATE_TEMP_TABLE: "TEMP tables",
    sqlite3.SQLITE_CREATE_TEMP_INDEX: "TEMP indexes",
    sqlite3.SQLITE_CREATE_TEMP_TRIGGER: "TEMP triggers",
    sqlite3.SQLITE_CREATE_TEMP_VIEW: "TEMP views",
    sqlite3.SQLITE_DROP_TEMP_TABLE: "TEMP tables",
    sqlite3.SQLITE_DROP_TEMP_INDEX: "TEMP indexes",
    sqlite3.SQLITE_DROP_TEMP_TRIGGER: "TEMP triggers",
    sqlite3.SQLITE_DROP_TEMP_VIEW: "TEMP views",
}


class SqlError(Exception):
    """What a failing `sql.exec` throws (a JS Error in workerd)."""


class CloneError(TypeError):
    """A value that could not cross the RPC boundary as structured-cloneable plain data."""


class RemoteError(Exception):
    """A non-domain exception thrown out of a Durable Object call: the caller sees a generic JS
    Error with the message only, never the Python class."""


class QueueError(Exception):
    """A Queue producer call rejected by its limits, or a send that failed."""


# -- structured clone -------------------------------------------------------------------------


def check_cloneable(value: Any, path: str = "value") -> None:
    """Reject anything but plain JSON-shaped data; integers must be exact JS numbers."""
    if value is None or isinstance(value, bool | str | float):
        return
    if isinstance(value, int):
        if abs(value) > JS_MAX_SAFE_INTEGER:
            raise CloneError(f"{path}: integer {value} is not exactly representable as a JS number")
        return
    if type(value) is list:
        for index, item in enumerate(value):
            check_cloneable(item, f"{path}[{index}]")
        return
    if type(value) is dict:
        for key, item in value.items():
            if not isinstance(key, str):
                raise CloneError(f"{path}: key {key!r} is not a string")
            check_cloneable(item, f"{path}.{key}")
        return
    raise CloneError(f"{path}: {type(value).__name__} cannot cross the RPC boundary as plain data")


def structured_clone(value: Any) -> Any:
    """The copy the other side receives: a JS number that is integral comes back as a Python int."""
    check_cloneable(value)
    return _clone(value)


def _clone(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if type(value) is list:
        return [_clone(item) for item in value]
    if type(value) is dict:
        return {key: _clone(item) for key, item in value.items()}
    return value


# -- SQL storage ------------------------------------------------------------------------------


class Row(dict):
    """A row object: keys are column names, readable as attributes too (`row.greeting`)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


@dataclass
class IteratorResult:
    done: bool
    value: Any = None


class RawIterator:
    """`cursor.raw()`: the same result rows as column arrays, sharing the cursor's position."""

    def __init__(self, cursor: SqlCursor) -> None:
        self._cursor = cursor

    def next(self) -> IteratorResult:
        row = self._cursor._take()
        return IteratorResult(True) if row is None else IteratorResult(False, list(row))

    def toArray(self) -> list[list[Any]]:
        return [list(row) for row in self._cursor._take_all()]

    def __iter__(self):
        return iter(self.toArray())


class SqlCursor:
    def __init__(self, columns: list[str], rows: list[tuple], rows_read: int, rows_written: int) -> None:
        self.columnNames = columns
        self.rowsRead = rows_read
        self.rowsWritten = rows_written
        self._rows = rows
        self._position = 0

    def _take(self) -> tuple | None:
        if self._position >= len(self._rows):
            return None
        self._position += 1
        return self._rows[self._position - 1]

    def _take_all(self) -> list[tuple]:
        rest = self._rows[self._position :]
        self._position = len(self._rows)
        return rest

    def _object(self, row: tuple) -> Row:
        return Row(zip(self.columnNames, row, strict=True))

    def next(self) -> IteratorResult:
        row = self._take()
        return IteratorResult(True) if row is None else IteratorResult(False, self._object(row))

    def toArray(self) -> list[Row]:
        return [self._object(row) for row in self._take_all()]

    def one(self) -> Row:
        rows = self._take_all()
        if len(rows) != 1:
            raise SqlError(f"Expected exactly one result from SQL query, but got {len(rows)}")
        return self._object(rows[0])

    def raw(self) -> RawIterator:
        return RawIterator(self)

    def __iter__(self):
        return iter(self.toArray())


def _as_js_number(value: Any) -> Any:
    return float(value) if isinstance(value, int) else value


# Pyodide hands a Python int to JavaScript as a number only while its magnitude is below 2**53 - 1,
# as a BigInt from there on (observed in workerd: binding 2**53 - 1 fails with "Cannot convert a
# BigInt value to a number"; durable_world.ffi.sql_binding hands such ints over as floats).
PYODIDE_BIGINT_FROM = 2**53 - 1


def _as_engine_binding(value: Any) -> Any:
    """What the Durable Object engine binds for a value Python passed to `sql.exec`."""
    if isinstance(value, bool):
        return "true" if value else "false"  # a JS boolean is bound as its string
    if isinstance(value, int):
        if abs(value) >= PYODIDE_BIGINT_FROM:  # a BigInt in JavaScript
            raise SqlError("TypeError: Cannot convert a BigInt value to a number")
        return float(value)  # a JS number, bound as REAL
    if value is None or isinstance(value, str | float | bytes):
        return value
    raise SqlError(f"cannot bind a {type(value).__name__}")


class SqlStorage:
    """`ctx.storage.sql`: one SQLite database file per object."""

    def __init__(self, path: Path) -> None:
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._conn.set_authorizer(self._authorize)
        self._trusted = False
        self._denied: str | None = None
        self.statements = 0
        self.rows_written = 0
        self.rows_read = 0

    def _authorize(self, action: int, arg1: Any, arg2: Any, database: Any, source: Any) -> int:
        if self._trusted:
            return sqlite3.SQLITE_OK
        reason = _DENIED_ACTIONS.get(action)
        if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() not in ALLOWED_PRAGMAS:
            reason = f"PRAGMA {arg1}"
        if reason is None and database == "temp":
            reason = "the temp schema"
        if reason is not None:
            self._denied = reason
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    @contextmanager
    def trusted(self):
        """The runtime's own statements (its transaction savepoints) bypass the user rules."""
        self._trusted = True
        try:
            yield self._conn
        finally:
            self._trusted = False

    @property
    def databaseSize(self) -> int:
        with self.trusted() as conn:
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            size = conn.execute("PRAGMA page_size").fetchone()[0]
        return pages * size

    def exec(self, query: str, *bindings: Any) -> SqlCursor:
        if len(query.encode()) > SQL_MAX_STATEMENT_BYTES:
            raise SqlError(f"statement too long: {len(query.encode())} bytes > {SQL_MAX_STATEMENT_BYTES}")
        if len(bindings) > SQL_MAX_BOUND_PARAMETERS:
            raise SqlError(f"too many SQL variables: {len(bindings)} > {SQL_MAX_BOUND_PARAMETERS}")
        bindings = tuple(_as_engine_binding(binding) for binding in bindings)
        self._denied = None
        before = self._conn.total_changes
        try:
            cursor = self._conn.execute(query, bindings)
            rows = cursor.fetchall()
        except sqlite3.ProgrammingError as exc:
            if "one statement" in str(exc):
                raise SqlError("the stand-in runs one statement per exec (the ledger never sends more)") from exc
            raise SqlError(str(exc)) from exc
        except sqlite3.DatabaseError as exc:
            if self._denied is not None:
                raise SqlError(f"not authorized: {self._denied} is not allowed in Durable Object SQL") from exc
            raise SqlError(str(exc)) from exc
        columns = [d[0] for d in cursor.description or ()]
        written = self._conn.total_changes - before
        read = len(rows) + written
        self.statements += 1
        self.rows_written += written
        self.rows_read += read
        return SqlCursor(columns, [tuple(_as_js_number(v) for v in row) for row in rows], read, written)

    def close(self) -> None:
        self._conn.close()


# -- object state -----------------------------------------------------------------------------


class SqliteEngine:
    """The stand-in's SQL engine for one object: `sql` over a SQLite file, `transactionSync` by
    savepoints. A namespace can be given another engine with the same three members (`sql`,
    `transactionSync`, `close`), e.g. the real one in tests/support/workerd/."""

    def __init__(self, path: Path) -> None:
        self.sql = SqlStorage(path)
        self._depth = 0

    def transactionSync(self, fn: Callable[[], Any]) -> Any:
        savepoint = f"_cf_txn_{self._depth}"
        with self.sql.trusted() as conn:
            conn.execute(f"SAVEPOINT {savepoint}")
        self._depth += 1
        try:
            result = fn()
        except BaseException:
            self._depth -= 1
            with self.sql.trusted() as conn:
                conn.execute(f"ROLLBACK TO {savepoint}")
                conn.execute(f"RELEASE {savepoint}")
            raise
        self._depth -= 1
        with self.sql.trusted() as conn:
            conn.execute(f"RELEASE {savepoint}")
        return result

    def close(self) -> None:
        self.sql.close()


@dataclass
class ObjectRecord:
    """What the runtime keeps for one object across evictions: its alarm (its SQL engine keeps its data)."""

    id: DurableObjectId
    gate: asyncio.Lock = field(default_factory=asyncio.Lock)
    alarm: int | None = None
    instance: Any = None
    storage: DurableObjectStorage | None = None


def _synchronously(fn: Callable[[], Any]) -> Any:
    result = fn()
    if inspect.isawaitable(result):
        if inspect.iscoroutine(result):
            result.close()
        raise TypeError("transactionSync callback must complete synchronously")
    return result


class DurableObjectStorage:
    """`ctx.storage`: SQL and transactions from the object's engine, alarms from the runtime."""

    def __init__(self, record: ObjectRecord, engine: Any) -> None:
        self._record = record
        self._engine = engine
        self.sql = engine.sql

    def transactionSync(self, fn: Callable[[], Any]) -> Any:
        return self._engine.transactionSync(functools.partial(_synchronously, fn))

    def close(self) -> None:
        self._engine.close()

    async def getAlarm(self, options: Any = None) -> int | None:
        await asyncio.sleep(0)
        return self._record.alarm

    async def setAlarm(self, scheduled_time: int | float, options: Any = None) -> None:
        if not isinstance(scheduled_time, int | float) or isinstance(scheduled_time, bool):
            raise TypeError("setAlarm takes milliseconds since the epoch")
        # workerd's own refusals (its alarm is 64-bit nanoseconds since the epoch), as it words them
        if scheduled_time <= 0:
            raise TypeError("setAlarm() cannot be called with an alarm time <= 0")
        if scheduled_time >= ALARM_LIMIT_MS:
            raise TypeError("This API doesn't support dates after 2189.")
        await asyncio.sleep(0)
        self._record.alarm = int(scheduled_time)

    async def deleteAlarm(self, options: Any = None) -> None:
        await asyncio.sleep(0)
        self._record.alarm = None


class DurableObjectState:
    """`ctx`: the object's id and storage."""

    def __init__(self, record: ObjectRecord, storage: DurableObjectStorage) -> None:
        self.id = record.id
        self.storage = storage

    def waitUntil(self, awaitable: Any) -> None:
        asyncio.ensure_future(awaitable)


@dataclass(frozen=True)
class DurableObjectId:
    name: str
    hex: str

    def toString(self) -> str:
        return self.hex

    def equals(self, other: DurableObjectId) -> bool:
        return self.hex == other.hex


class DurableObjectStub:
    """Calls go through `namespace._invoke`: cloned in, one at a time, cloned out."""

    def __init__(self, namespace: DurableObjectNamespace, object_id: DurableObjectId) -> None:
        self._namespace = namespace
        self.id = object_id

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            if kwargs:
                raise TypeError("RPC arguments are positional (JavaScript has no keyword arguments)")
            cloned = [structured_clone(arg) for arg in args]
            return await self._namespace._invoke(self.id, name, cloned)

        return call


class DurableObjectNamespace:
    """The namespace binding (`env.WORLDS`) plus the runtime's controls for tests.

    `factory(ctx, env)` builds the object, as the runtime calls the exported class; `env` is the
    bindings object every object (and the Worker) sees. `sql_engine(object_id)` opens an object's
    SQL engine (see `SqliteEngine`); by default a SQLite file per object in `directory`.
    """

    def __init__(self, factory: Callable[[Any, Any], Any], env: Any, directory: Path,
                 sql_engine: Callable[[DurableObjectId], Any] | None = None) -> None:  # fmt: skip
        self._factory = factory
        self.env = env
        self._directory = Path(directory)
        self._directory.mkdir(parents=True, exist_ok=True)
        self._sql_engine = sql_engine or self._sqlite_engine
        self._records: dict[str, ObjectRecord] = {}

    def _sqlite_engine(self, object_id: DurableObjectId) -> SqliteEngine:
        return SqliteEngine(self._directory / f"{object_id.hex}.sqlite3")

    # -- the binding's API --
    def idFromName(self, name: str) -> DurableObjectId:
        return DurableObjectId(name, hashlib.sha256(name.encode()).hexdigest())

    def get(self, object_id: DurableObjectId) -> DurableObjectStub:
        return DurableObjectStub(self, object_id)

    def getByName(self, name: str) -> DurableObjectStub:
        return self.get(self.idFromName(name))

    # -- runtime internals --
    def _record(self, object_id: DurableObjectId) -> ObjectRecord:
        record = self._records.get(object_id.hex)
        if record is None:
            record = ObjectRecord(object_id)
            self._records[object_id.hex] = record
        return record

    def _instance(self, record: ObjectRecord) -> Any:
        if record.instance is None:
            record.storage = DurableObjectStorage(record, self._sql_engine(record.id))
            record.instance = self._factory(DurableObjectState(record, record.storage), self.env)
        return record.instance

    async def _invoke(self, object_id: DurableObjectId, method: str, args: list[Any]) -> Any:
        record = self._record(object_id)
        async with record.gate:
            target = getattr(self._instance(record), method, None)
            if target is None or not callable(target):
                raise RemoteError(f"TypeError: the Durable Object has no RPC method {method!r}")
            try:
                result = target(*args)
                if inspect.isawaitable(result):
                    result = await result
            except Exception as exc:
                raise RemoteError(f"{type(exc).__name__}: {exc}") from exc
            return structured_clone(result)

    # -- test controls --
    def instance(self, name: str) -> Any:
        """The live object for `name` (constructed if needed), to inspect its state."""
        return self._instance(self._record(self.idFromName(name)))

    def storage(self, name: str) -> DurableObjectStorage:
        self.instance(name)
        return self._record(self.idFromName(name)).storage

    def evict(self, name: str) -> None:
        """Drop the object from memory, as the runtime does when idle; storage and alarm stay."""
        record = self._record(self.idFromName(name))
        if record.storage is not None:
            record.storage.close()
        record.instance = record.storage = None

    def alarm_time(self, name: str) -> int | None:
        return self._record(self.idFromName(name)).alarm

    async def run_alarm(self, name: str) -> bool:
        """Fire the object's alarm now if one is set; return whether it ran.

        As in workerd, the alarm is cleared when its handler starts (the handler may set the next
        one), and a handler that throws leaves the alarm set to be retried.
        """
        record = self._record(self.idFromName(name))
        if record.alarm is None:
            return False
        async with record.gate:
            scheduled, record.alarm = record.alarm, None
            instance = self._instance(record)
            try:
                await instance.alarm({"retryCount": 0, "isRetry": False})
            except Exception:
                if record.alarm is None:
                    record.alarm = scheduled
                raise
        return True

    def close(self) -> None:
        for record in self._records.values():
            if record.storage is not None:
                record.storage.close()
            record.instance = record.storage = None


# -- Queue producer binding -------------------------------------------------------------------


def queue_message_bytes(body: Any) -> int:
    return len(json.dumps(body, separators=(",", ":")).encode()) + QUEUE_MESSAGE_OVERHEAD_BYTES


class FakeQueue:
    """A Queue producer binding: `send`/`sendBatch` with Cloudflare's limits; `fail_next` makes
    the next sends reject, as a send that did not reach the queue."""

    def __init__(self) -> None:
        self.batches: list[list[Any]] = []
        self._failures: list[Exception] = []

    @property
    def messages(self) -> list[Any]:
        return [body for batch in self.batches for body in batch]

    def fail_next(self, count: int = 1, error: Exception | None = None) -> None:
        self._failures.extend([error or QueueError("Queue send failed: internal error")] * count)

    async def send(self, body: Any, options: dict[str, Any] | None = None) -> None:
        await self.sendBatch([{"body": body, **(options or {})}])

    async def sendBatch(self, messages: Any, options: Any = None) -> None:
        if type(messages) is not list:
            raise TypeError("sendBatch takes an array of messages")
        if not messages:
            raise QueueError("sendBatch needs at least one message")
        if len(messages) > QUEUE_MAX_BATCH_MESSAGES:
            raise QueueError(f"sendBatch of {len(messages)} messages exceeds {QUEUE_MAX_BATCH_MESSAGES}")
        total = 0
        for index, message in enumerate(messages):
            if type(message) is not dict or "body" not in message or set(message) - QUEUE_MESSAGE_FIELDS:
                raise TypeError(f"message {index} must be {{body, contentType?, delaySeconds?}}")
            check_cloneable(message, f"message {index}")
            size = queue_message_bytes(message["body"])
            if size > QUEUE_MAX_MESSAGE_BYTES:
                raise QueueError(f"message {index} is {size} bytes > {QUEUE_MAX_MESSAGE_BYTES}")
            total += size
        if total > QUEUE_MAX_BATCH_BYTES:
            raise QueueError(f"sendBatch of {total} bytes exceeds {QUEUE_MAX_BATCH_BYTES}")
        await asyncio.sleep(0)  # the send is network I/O: it resolves later
        if self._failures:
            raise self._failures.pop(0)
        self.batches.append([_clone(m["body"]) for m in messages])


# -- wiring -----------------------------------------------------------------------------------


class StandinEnv:
    """`env` with the bindings wrangler.toml declares."""

    def __init__(self, **bindings: Any) -> None:
        self.__dict__.update(bindings)


def world_namespace(directory: Path, clock: Any, *, queue: FakeQueue | None = None,
                    sql_engine: Callable[[DurableObjectId], Any] | None = None,
                    modules: tuple[Any, ...] = (), variables: dict[str, str] | None = None) -> DurableObjectNamespace:  # fmt: skip
    """The WORLDS namespace running the real `WorldObject` (with the user's `modules`, as a bundle
    staged with `--module` carries them), with an audit queue bound and the Worker's `variables`
    (wrangler.toml [vars]) in its env."""
    from durable_world import WorldObject

    env = StandinEnv(AUDIT_QUEUE=queue if queue is not None else FakeQueue(), **(variables or {}))
    factory = functools.partial(WorldObject, clock=clock, modules=modules)
    namespace = DurableObjectNamespace(factory, env, directory, sql_engine)
    env.WORLDS = namespace
    return namespace


@asynccontextmanager
async def standin_authority(directory: Path, clock: Any, *, sql_engine: Callable[[DurableObjectId], Any] | None = None):
    """A `DurableObjectAuthority` in front of the stand-in runtime (for the conformance suite)."""
    from durable_world import DurableObjectAuthority

    namespace = world_namespace(directory, clock, sql_engine=sql_engine)
    try:
        yield DurableObjectAuthority(namespace)
    finally:
        namespace.close()
