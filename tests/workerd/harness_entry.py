"""The Worker's main module in the real-runtime tests: the product's `worker.entry` unchanged, plus
what a request may ask for, so that test suites written against a fresh authority per test and a
ManualClock (the conformance suite, the edge-hosting parity script) can run on one long-lived
deployment.

Never deployed: the real-runtime fixture stages this file as the bundle's main module
(`LocalWorker(main=...)`); the product's entry is staged beside it and does the work.

- `x-archetype-test-namespace: <name>`: every Durable Object the request reaches is the one named
  `<name>/<object name>` (the world directory included), so a namespace sees only the worlds
  created in it, as a fresh deployment would. Without it, objects have their own names.
- `GET /_test/objects/<name>/stats`: what the bench (bench/workerd_runtime.py) reads of an
  object since it was constructed: the RPC calls and alarms it served (Cloudflare bills each as a
  request), the SQL rows its ledger read and wrote (the engine's own counters, summed by
  `DurableObjectSqlPort`), its database size, and the isolate's WebAssembly memory (Pyodide's heap,
  which only grows: a high-water mark of what Python used, against the 128 MB an isolate has).
- `x-archetype-test-now-ms: <ms>`: the request runs at that time. The Worker sends every RPC it
  makes for the request through the object's `clocked(now_ms, method, args)`, which sets that
  object's clock and runs `method`; without the header, `clocked(None, ...)` puts the object back
  on the system clock.

An object on a test clock **holds its alarm**: what it sets with `ctx.storage.setAlarm` is kept
(in the object's key-value storage, so it survives a restart) and answered by `getAlarm`, but
workerd is not given it, as workerd would fire a test timeline's times (in the past) at once.
The test fires it, as the stand-in's `run_alarm` does:

- `POST /_test/objects/<name>/alarm` (with the test's headers): if the object holds an alarm, it is
  handed to workerd for now (`setAlarm`), and the answer waits for workerd to run the object's
  `alarm()` handler: `{"fired": true, "raised": null or the error the handler let out}`; else
  `{"fired": false}`. `GET` answers `{"at": <the held alarm or null>}`, `PUT ?at=<ms>` sets it (on
  the system clock, both are workerd's own alarm).
- `POST /_test/objects/<name>/fault?statements=N`: the next N SQL statements an alarm of the object
  runs fail (`RuntimeError`), as a storage failure would.
- `POST /_test/objects/<name>/fault?fork_writes=N`: after N more pages of a fork's copy written,
  the object's next `fork_write` throws (once), as a crash between two pages would.

An object on the system clock (no header) sets workerd's alarm itself: edge-hosted worlds there
tick on real time.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from archetype.commands.ledger import FORK_COPY_METHODS, LEDGER_METHODS
from archetype.commands.port import SystemClock
from durable_world.ffi import number_or_none, to_py
from worker import entry
from worker.entry import build_app

__all__ = ["Default", "WorldObject"]

NOW_HEADER = "x-archetype-test-now-ms"
NAMESPACE_HEADER = "x-archetype-test-namespace"
OBJECTS_ROUTE = "/_test/objects/"
DIRECTORY_METHODS = frozenset({"directory_register", "directory_world_ids"})
TEST_METHODS = frozenset({"test_fire_alarm", "test_held_alarm", "test_set_alarm", "test_fault", "test_fork_fault"})
HELD_ALARM_KEY = "archetype-test-held-alarm"
FIRE_TIMEOUT_S = 120.0

# Set per request in `Default.fetch`; the ASGI bridge runs the app in a task started from there,
# which carries them to every RPC the request makes.
_request_now: contextvars.ContextVar[int | None] = contextvars.ContextVar("request_now", default=None)
_request_namespace: contextvars.ContextVar[str] = contextvars.ContextVar("request_namespace", default="")


class RpcClock:
    """The time of the RPC an object last served: a test's, or the system's (None)."""

    def __init__(self) -> None:
        self.now: int | None = None
        self._system = SystemClock()

    def now_ms(self) -> int:
        return self._system.now_ms() if self.now is None else self.now


class _FaultySql:
    """`ctx.storage.sql` whose next `failing` statements raise while `armed` (during an alarm)."""

    def __init__(self, sql: Any) -> None:
        self._sql = sql
        self.failing = 0
        self.armed = False

    def exec(self, query: str, *bindings: Any) -> Any:
        if self.armed and self.failing > 0:
            self.failing -= 1
            raise RuntimeError("injected storage failure (tests/workerd/harness_entry.py)")
        return self._sql.exec(query, *bindings)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sql, name)


class _TestStorage:
    """`ctx.storage` with the alarm held while the object is on a test clock, and faults."""

    def __init__(self, storage: Any, clock: RpcClock) -> None:
        self._storage = storage
        self._clock = clock
        self.sql = _FaultySql(storage.sql)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)

    async def getAlarm(self, options: Any = None) -> Any:
        if self._clock.now is None:
            return await self._storage.getAlarm()
        held = number_or_none(await self._storage.get(HELD_ALARM_KEY))
        return None if held is None else int(held)

    async def setAlarm(self, scheduled_time: Any, options: Any = None) -> None:
        if self._clock.now is None:
            await self._storage.setAlarm(scheduled_time)
        else:
            await self._storage.put(HELD_ALARM_KEY, scheduled_time)

    async def deleteAlarm(self, options: Any = None) -> None:
        if self._clock.now is None:
            await self._storage.deleteAlarm()
        else:
            await self._storage.delete(HELD_ALARM_KEY)

    async def fire(self) -> None:
        """Hand the held alarm to workerd, due now."""
        await self._storage.delete(HELD_ALARM_KEY)
        await self._storage.setAlarm(SystemClock().now_ms())


class WorldObject(entry.WorldObject):
    def __init__(self, ctx: Any, env: Any) -> None:
        self.rpc_clock = RpcClock()
        self.test_storage = _TestStorage(ctx.storage, self.rpc_clock)
        self._alarm_ran: asyncio.Future[str | None] | None = None
        self.rpc_calls = self.alarms = 0
        self.fork_writes_left: int | None = None  # test_fork_fault: pages to write before one throws
        # The SDK's context object keeps what it is given: the product's constructor finds this storage.
        ctx.storage = self.test_storage
        super().__init__(ctx, env, clock=self.rpc_clock)

    async def clocked(self, now_ms: Any, method: Any, args: Any = None) -> Any:
        """Run the RPC method `method` at `now_ms` (None: on the system clock)."""
        if method not in (*LEDGER_METHODS, *FORK_COPY_METHODS) and method not in DIRECTORY_METHODS | TEST_METHODS:
            raise ValueError(f"clocked: {method!r} is not an RPC method of the object")
        now = number_or_none(now_ms)
        self.rpc_calls += 1
        self.rpc_clock.now = None if now is None else int(now)
        return await getattr(self, method)(args)

    async def alarm(self, alarm_info: Any = None) -> None:
        self.alarms += 1
        raised: str | None = None
        self.test_storage.sql.armed = True
        try:
            await super().alarm(alarm_info)
        except BaseException as exc:
            raised = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self.test_storage.sql.armed = False
            if self._alarm_ran is not None and not self._alarm_ran.done():
                self._alarm_ran.set_result(raised)

    async def test_fire_alarm(self, args: Any = None) -> dict[str, Any]:
        if await self.test_storage.getAlarm() is None:
            return {"fired": False}
        self._alarm_ran = asyncio.get_running_loop().create_future()
        await self.test_storage.fire()
        raised = await asyncio.wait_for(self._alarm_ran, FIRE_TIMEOUT_S)
        return {"fired": True, "raised": raised}

    async def test_held_alarm(self, args: Any = None) -> dict[str, Any]:
        at = number_or_none(await self.test_storage.getAlarm())
        return {"at": None if at is None else int(at)}

    async def test_set_alarm(self, args: Any = None) -> dict[str, Any]:
        await self.test_storage.setAlarm(int(number_or_none(args) or 0))
        return await self.test_held_alarm()

    async def test_fork_fault(self, args: Any = None) -> dict[str, Any]:
        self.fork_writes_left = int(number_or_none(args) or 0)
        return {"fork_writes": self.fork_writes_left}

    async def fork_write(self, args: Any = None) -> dict[str, Any]:
        """The product's page write of a fork's copy, but for the one test_fork_fault throws."""
        if self.fork_writes_left == 0:
            self.fork_writes_left = None
            raise RuntimeError("injected failure between two pages of a fork's copy (tests/workerd/harness_entry.py)")
        if self.fork_writes_left is not None:
            self.fork_writes_left -= 1
        written: dict[str, Any] = await super().fork_write(args)
        return written

    async def test_fault(self, args: Any = None) -> dict[str, Any]:
        self.test_storage.sql.failing = int(number_or_none(args) or 0)
        return {"statements": self.test_storage.sql.failing}

    async def harness_stats(self) -> dict[str, int]:
        """The figures of `GET /_test/objects/<name>/stats`."""
        import pyodide_js  # only on Pyodide: the module the runtime loaded Python with

        port = self.ledger._port  # the object's DurableObjectSqlPort
        sql = self.ctx.storage.sql
        # the SDK's binding wrapper keeps the first value it read of any attribute: read the JS object's
        size = getattr(sql, "_binding", sql).databaseSize
        return {"rpc_calls": self.rpc_calls, "alarms": self.alarms,
                "rows_read": port.rows_read, "rows_written": port.rows_written,
                "database_bytes": int(size),
                "wasm_memory_bytes": int(pyodide_js._module.HEAP8.length)}  # fmt: skip


class _ClockedStub:
    def __init__(self, stub: Any) -> None:
        self._stub = stub

    def __getattr__(self, method: str) -> Any:
        async def call(args: Any = None) -> Any:
            return await self._stub.clocked(_request_now.get(), method, args)

        return call


class _HarnessNamespace:
    """The WORLDS namespace as the request asks for it: objects of its test namespace, clocked stubs."""

    def __init__(self, namespace: Any) -> None:
        self._namespace = namespace

    def idFromName(self, name: str) -> Any:
        prefix = _request_namespace.get()
        return self._namespace.idFromName(f"{prefix}/{name}" if prefix else name)

    def get(self, object_id: Any) -> _ClockedStub:
        return _ClockedStub(self._namespace.get(object_id))

    def raw_stub(self, name: str) -> Any:
        """The object named `name` in the request's test namespace, called as it is."""
        return self._namespace.get(self.idFromName(name))


class _HarnessEnv:
    """The Worker's env with its WORLDS namespace wrapped."""

    def __init__(self, env: Any) -> None:
        self._env = env
        self.WORLDS = _HarnessNamespace(env.WORLDS)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)


async def _object_route(env: _HarnessEnv, method: str, path: str, query: str) -> Any:
    """The test routes under OBJECTS_ROUTE (see the module's docstring)."""
    from workers import Response

    name, _, action = path.removeprefix(OBJECTS_ROUTE).rpartition("/")
    stub = env.WORLDS.get(env.WORLDS.idFromName(unquote(name)))
    if (method, action) == ("POST", "alarm"):
        return Response.json(await stub.test_fire_alarm())
    if (method, action) == ("GET", "alarm"):
        return Response.json(await stub.test_held_alarm())
    if (method, action) == ("PUT", "alarm"):
        return Response.json(await stub.test_set_alarm(int(parse_qs(query)["at"][0])))
    if (method, action) == ("GET", "stats"):  # not through `clocked`: the reading is not one of the object's requests
        raw = env.WORLDS.raw_stub(unquote(name))
        return Response(json.dumps(to_py(await raw.harness_stats())), headers={"content-type": "application/json"})
    if (method, action) == ("POST", "fault") and "fork_writes" in parse_qs(query):
        return Response.json(await stub.test_fork_fault(int(parse_qs(query)["fork_writes"][0])))
    if (method, action) == ("POST", "fault"):
        statements = int(parse_qs(query).get("statements", ["1"])[0])
        return Response.json(await stub.test_fault(statements))
    return Response.json({"detail": f"no test route {method} {path}"}, status=404)


class Default(entry.Default):
    async def fetch(self, request: Any) -> Any:
        if entry._app is None:  # the product's per-isolate app, over the wrapped namespace
            entry._app = build_app(_HarnessEnv(self.env))
        now = request.headers.get(NOW_HEADER)
        _request_now.set(int(now) if now else None)
        _request_namespace.set(request.headers.get(NAMESPACE_HEADER) or "")
        url = urlsplit(request.url)
        if url.path.startswith(OBJECTS_ROUTE):
            return await _object_route(_HarnessEnv(self.env), str(request.method.value), url.path, url.query)
        return await super().fetch(request)
