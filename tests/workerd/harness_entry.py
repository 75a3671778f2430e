"""The Worker's main module in the real-runtime tests: the product's `worker.entry` unchanged, plus
two things a request may ask for, so that test suites written against a fresh authority per test
and a ManualClock (the conformance suite) can run on one long-lived deployment.

Never deployed: the real-runtime fixture stages this file as the bundle's main module
(`LocalWorker(main=...)`); the product's entry is staged beside it and does the work.

- `x-archetype-test-namespace: <name>`: every Durable Object the request reaches is the one named
  `<name>/<object name>` (the world directory included), so a namespace sees only the worlds
  created in it, as a fresh deployment would. Without it, objects have their own names.
- `GET /__harness/objects/<name>/stats`: what the bench (bench/workerd_runtime.py) reads of an
  object since it was constructed: the RPC calls and alarms it served (Cloudflare bills each as a
  request), the SQL rows its ledger read and wrote (the engine's own counters, summed by
  `DurableObjectSqlPort`), its database size, and the isolate's WebAssembly memory (Pyodide's heap,
  which only grows: a high-water mark of what Python used, against the 128 MB an isolate has).
- `x-archetype-test-now-ms: <ms>`: the request runs at that time. The Worker sends every RPC it
  makes for the request through the object's `clocked(now_ms, method, args)`, which sets that
  object's clock and runs `method`; without the header, `clocked(None, ...)` puts the object back
  on the system clock. An object's alarm reads the time of the last RPC it served; workerd fires
  alarms on the real clock, at times an object on a test clock set on its test timeline (in the
  past, so at once): a world its alarm steps (edge-hosted) belongs on the system clock.
"""

from __future__ import annotations

import contextvars
import json
from typing import Any
from urllib.parse import urlsplit

from archetype.commands.ledger import LEDGER_METHODS
from archetype.commands.port import SystemClock
from durable_world.ffi import number_or_none, to_py
from worker import entry
from worker.entry import build_app

__all__ = ["Default", "WorldObject"]

NOW_HEADER = "x-archetype-test-now-ms"
NAMESPACE_HEADER = "x-archetype-test-namespace"
OBJECTS_PATH = "/__harness/objects/"
DIRECTORY_METHODS = frozenset({"directory_register", "directory_world_ids"})

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


class WorldObject(entry.WorldObject):
    def __init__(self, ctx: Any, env: Any) -> None:
        self.rpc_clock = RpcClock()
        self.rpc_calls = self.alarms = 0
        super().__init__(ctx, env, clock=self.rpc_clock)

    async def alarm(self, alarm_info: Any = None) -> None:
        self.alarms += 1
        await super().alarm(alarm_info)

    async def clocked(self, now_ms: Any, method: Any, args: Any = None) -> Any:
        """Run the RPC method `method` at `now_ms` (None: on the system clock)."""
        if method not in LEDGER_METHODS and method not in DIRECTORY_METHODS:
            raise ValueError(f"clocked: {method!r} is not an RPC method of the object")
        now = number_or_none(now_ms)
        self.rpc_calls += 1
        self.rpc_clock.now = None if now is None else int(now)
        return await getattr(self, method)(args)

    async def harness_stats(self) -> dict[str, int]:
        """The figures of `GET /__harness/objects/<name>/stats`."""
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


class _HarnessEnv:
    """The Worker's env with its WORLDS namespace wrapped."""

    def __init__(self, env: Any) -> None:
        self._env = env
        self.WORLDS = _HarnessNamespace(env.WORLDS)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)


class Default(entry.Default):
    async def fetch(self, request: Any) -> Any:
        if entry._app is None:  # the product's per-isolate app, over the wrapped namespace
            entry._app = build_app(_HarnessEnv(self.env))
        now = request.headers.get(NOW_HEADER)
        _request_now.set(int(now) if now else None)
        _request_namespace.set(request.headers.get(NAMESPACE_HEADER) or "")
        path = urlsplit(request.url).path
        if path.startswith(OBJECTS_PATH) and path.endswith("/stats"):
            from workers import Response  # only on the runtime

            namespace = _HarnessNamespace(self.env.WORLDS)
            name = path[len(OBJECTS_PATH) : -len("/stats")]
            stats = to_py(await namespace._namespace.get(namespace.idFromName(name)).harness_stats())
            return Response(json.dumps(stats), headers={"content-type": "application/json"})
        return await super().fetch(request)
