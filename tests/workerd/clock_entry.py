"""The Worker's main module in the real-runtime tests: the product's `worker.entry`, plus a clock a
test can set per request, so a test's ManualClock reaches the Durable Objects as it reaches a
local authority (the conformance suite compares timestamps byte for byte).

Never deployed: the real-runtime fixture stages this file as the bundle's main module
(`LocalWorker(main=...)`); the product's entry is staged beside it unchanged and does the work.

A request carrying `x-archetype-test-now-ms: <ms>` runs at that time: the Worker sends every RPC
it makes for that request through the object's `clocked(now_ms, method, args)`, which sets the
object's clock and runs `method`. A request without it runs on the system clock (`clocked(None,
...)`), so real-time tests share the deployment. An object's alarm reads the time of the last RPC
it served: alarms fire on the real clock, at times an object on a test clock set on its test
timeline (in the past, so at once); a world stepped by its alarm (edge-hosted) therefore belongs
on the system clock, or its alarm would come back at once until the test clock reaches its tick.
"""

from __future__ import annotations

import contextvars
from typing import Any

from archetype.commands.ledger import LEDGER_METHODS
from archetype.commands.port import SystemClock
from durable_world.ffi import number_or_none
from worker import entry
from worker.entry import build_app

__all__ = ["Default", "WorldObject"]

NOW_HEADER = "x-archetype-test-now-ms"
DIRECTORY_METHODS = frozenset({"directory_register", "directory_world_ids"})

_request_now: contextvars.ContextVar[int | None] = contextvars.ContextVar("request_now", default=None)


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
        super().__init__(ctx, env, clock=self.rpc_clock)

    async def clocked(self, now_ms: Any, method: Any, args: Any = None) -> Any:
        """Run the RPC method `method` at `now_ms` (None: on the system clock)."""
        if method not in LEDGER_METHODS and method not in DIRECTORY_METHODS:
            raise ValueError(f"clocked: {method!r} is not an RPC method of the object")
        now = number_or_none(now_ms)
        self.rpc_clock.now = None if now is None else int(now)
        return await getattr(self, method)(args)


class _ClockedStub:
    def __init__(self, stub: Any) -> None:
        self._stub = stub

    def __getattr__(self, method: str) -> Any:
        async def call(args: Any = None) -> Any:
            return await self._stub.clocked(_request_now.get(), method, args)

        return call


class _ClockedNamespace:
    def __init__(self, namespace: Any) -> None:
        self._namespace = namespace

    def idFromName(self, name: str) -> Any:
        return self._namespace.idFromName(name)

    def get(self, object_id: Any) -> _ClockedStub:
        return _ClockedStub(self._namespace.get(object_id))


class _ClockedEnv:
    """The Worker's env with its WORLDS namespace reaching the objects through `clocked`."""

    def __init__(self, env: Any) -> None:
        self._env = env
        self.WORLDS = _ClockedNamespace(env.WORLDS)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)


class Default(entry.Default):
    async def fetch(self, request: Any) -> Any:
        if entry._app is None:  # the product's per-isolate app, over the clocked namespace
            entry._app = build_app(_ClockedEnv(self.env))
        header = request.headers.get(NOW_HEADER)
        _request_now.set(int(header) if header else None)  # this request's task and the tasks it starts
        return await super().fetch(request)
