"""The Python half of the Pyodide harness. It runs INSIDE the real interpreter (npm `pyodide` in
Node, started by tests/pyodide/host.mjs), never under CPython, and plays the parts of the Workers
runtime that workerd implements around a Python Worker:

- installs the pinned, hashed wheel set of requirements-pyodide.lock (the same one the bundle
  vendors), or, for the bundle check, uses nothing but a staged bundle and its python_modules/;
- provides the runtime-internal `_cloudflare.import_patch_manager`, so the SDK's own package
  patches run (`_workers_sdk_package_patches`: anyio.to_thread runs inline, Pyodide has no threads);
- calls into the Worker and the Durable Objects with workerd's conventions (its
  `introspection.wrapper_func`): an entrypoint class is constructed with the raw JS `ctx` and `env`
  (the SDK wraps them), every RPC argument goes through `workers.python_from_rpc`, every result
  through `workers.python_to_rpc`, `fetch` receives the converted Request, `alarm` the raw JS info;
- the storage engine behind the JS `ctx.storage.sql` (the seam of workers_runtime.mjs): Pyodide's
  sqlite3 with the stand-in's Durable Object SQL rules, until the workerd-backed engine replaces it.

Tests call functions here and in tests/pyodide/scenarios.py by name (host.mjs `call`), with JSON
keyword arguments and a JSON result.
"""

from __future__ import annotations

import importlib
import inspect
import json
import site
import sys
import time
import types
from pathlib import Path
from typing import Any

import js
import workers_runtime
from pyodide.ffi import JsProxy, create_proxy, jsnull, to_js

ROOT = Path(__file__).resolve().parents[2]


def boot(mode: str) -> str:
    """Make the interpreter a Worker's: packages installed (mode "src") or already on the path
    (mode "bundle"), the runtime internals in place; answer the timings as JSON."""
    timings: dict[str, float] = {}
    if mode == "src":
        from worker.stage import locked_wheels, unpack

        started = time.perf_counter()
        unpack(locked_wheels(), Path(site.getsitepackages()[0]))
        timings["install_wheels_ms"] = (time.perf_counter() - started) * 1000
    _install_runtime_internals()
    if mode == "src":
        started = time.perf_counter()
        for module in ("archetype.world", "archetype.commands", "archetype.api", "durable_world", "worker.entry"):
            importlib.import_module(module)
        timings["import_project_ms"] = (time.perf_counter() - started) * 1000
    return json.dumps(timings)


def _install_runtime_internals() -> None:
    """workerd's import patch manager runs a registered context around a module's execution; here
    the module is imported first and the context run after it, which is the same for patches that
    act after their `yield`, as the SDK's do."""
    cloudflare = types.ModuleType("_cloudflare")
    manager = types.ModuleType("_cloudflare.import_patch_manager")

    def register_exec_patch(name: str):
        def register(context):
            with context(importlib.import_module(name)):
                pass
            return context

        return register

    manager.register_exec_patch = register_exec_patch
    cloudflare.import_patch_manager = manager
    sys.modules.update({"_cloudflare": cloudflare, "_cloudflare.import_patch_manager": manager})
    import _workers_sdk_package_patches  # noqa: F401  (the SDK's patches, applied on import)


async def call(function: str, kwargs_json: str) -> str:
    module_name, _, name = function.partition(":")
    result = getattr(importlib.import_module(module_name), name)(**json.loads(kwargs_json))
    if inspect.isawaitable(result):
        result = await result
    return json.dumps(result)


# -- workerd's calling conventions ---------------------------------------------------------------


async def rpc_call(instance: Any, method: str, args: JsProxy) -> Any:
    """One RPC into a Durable Object as workerd makes it (introspection.wrapper_func)."""
    from workers import python_from_rpc, python_to_rpc

    result = getattr(instance, method)(*[python_from_rpc(arg) for arg in args])
    if inspect.isawaitable(result):
        result = await result
    return python_to_rpc(result)


async def alarm_call(instance: Any, info: JsProxy) -> None:
    # `alarm` is one of the handlers workerd calls directly, with the raw JS argument.
    await instance.alarm(info)


# -- the seam's default storage engine -----------------------------------------------------------


class SqliteEngine:
    """SQL for one Durable Object: the stand-in's engine (Pyodide's sqlite3 in memory, statements
    vetted by its authorizer and limits, numbers bound and answered as workerd does), behind the
    JS calling convention of the seam."""

    def __init__(self) -> None:
        from tests.support.durable_object_standin import SqliteEngine as StandinEngine

        self._engine = StandinEngine(":memory:")

    @staticmethod
    def _binding(value: Any) -> Any:
        if value is jsnull:
            return None
        if isinstance(value, JsProxy):  # an ArrayBuffer or a typed array
            return bytes(value.to_py())
        if isinstance(value, int):  # a JS number (the seam refused BigInts) that Pyodide made an int
            return float(value)
        return value

    def exec(self, query: str, bindings: JsProxy) -> str:
        from tests.support.durable_object_standin import SqlError

        try:
            cursor = self._engine.sql.exec(query, *[self._binding(value) for value in bindings])
        except SqlError as exc:
            return json.dumps({"error": str(exc)})
        rows = cursor.raw().toArray()
        if any(isinstance(value, bytes) for row in rows for value in row):
            return json.dumps({"error": "the harness engine does not answer BLOBs (the ledger stores none)"})
        return json.dumps({"columnNames": cursor.columnNames, "rows": rows,
                           "rowsRead": cursor.rowsRead, "rowsWritten": cursor.rowsWritten})  # fmt: skip

    def transaction(self, fn: JsProxy) -> Any:
        return self._engine.transactionSync(fn)


# -- deployments ---------------------------------------------------------------------------------


class HarnessClock:
    """The Durable Objects' clock: a test's ManualClock reaches it through `x-harness-now-ms`."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now = now_ms

    def now_ms(self) -> int:
        return self.now


def _js_object(**fields: Any) -> JsProxy:
    return to_js(fields, dict_converter=js.Object.fromEntries)


class Deployment:
    """One deployment of wrangler.toml's Worker: the WORLDS namespace running the real
    `WorldObject`, the AUDIT_QUEUE producer, the ARCHETYPE_TOKENS secret, and the `Default` entry."""

    def __init__(self, *, tokens: dict[str, Any], entry: str = "worker.entry", modules: tuple[str, ...] = ()) -> None:
        self.entry = importlib.import_module(entry)
        WorldObject = self.entry.WorldObject  # the class the runtime finds among main's exports
        # as a bundle staged with `--module` carries them (None: the entry's own worker.modules)
        hooked = tuple(importlib.import_module(name) for name in modules) or None

        self.clock = HarnessClock()
        self.queue = workers_runtime.WorkerQueue.new()
        # `engine` is the seam: each object's storage engine (the workerd-backed one can replace it)
        hooks = _js_object(
            construct=create_proxy(lambda state, env: WorldObject(state, env, clock=self.clock, modules=hooked)),
            invoke=create_proxy(rpc_call),
            alarm=create_proxy(alarm_call),
            engine=create_proxy(lambda: create_proxy(SqliteEngine())),
        )
        self.namespace = workers_runtime.DurableObjectNamespace.new(hooks)
        self.env = js.Object.new()
        self.env.WORLDS = self.namespace
        self.env.ARCHETYPE_TOKENS = json.dumps(tokens)
        self.env.AUDIT_QUEUE = self.queue
        self.namespace.env = self.env

    async def fetch(self, request: JsProxy) -> JsProxy:
        from workers import python_from_rpc, python_to_rpc

        worker = self.entry.Default(workers_runtime.ExecutionContext.new(), self.env)
        return python_to_rpc(await worker.fetch(python_from_rpc(request)))


current: Deployment | None = None


def deploy(tokens: dict[str, Any], entry: str = "worker.entry", modules: list[str] | None = None) -> dict[str, Any]:
    """Replace the deployment the HTTP server serves. A new deployment is a new isolate: the
    Worker's per-isolate app is dropped with the old one. `entry`:
    the Worker's main module (`entry` in a staged bundle, whose root holds wrangler's main);
    `modules`: the user's modules (the module hook) the objects run."""
    global current
    importlib.import_module(entry)._app = None
    current = Deployment(tokens=tokens, entry=entry, modules=tuple(modules or ()))
    import _pyodide_entrypoint_helper

    _pyodide_entrypoint_helper.cloudflareWorkersModule.env = current.env
    return {"entry": entry}


async def fetch(request: JsProxy, now_ms: Any = None) -> JsProxy:
    if current is None:
        raise RuntimeError("no deployment: call harness:deploy first")
    if isinstance(now_ms, int | float):
        current.clock.now = int(now_ms)
    return await current.fetch(request)


# -- controls over the current deployment --------------------------------------------------------


def queue_messages() -> list[Any]:
    return json.loads(js.JSON.stringify(current.queue.messages))


def fail_queue(count: int = 1) -> None:
    current.queue.failNext(count)


async def run_alarm(world_id: str, now_ms: int | None = None) -> bool:
    """Fire the object's alarm (at `now_ms` on the objects' clock, when given)."""
    if now_ms is not None:
        current.clock.now = now_ms
    return bool(await current.namespace.runAlarm(world_id))


def alarm_time(world_id: str) -> Any:
    value = current.namespace.alarmTime(world_id)
    return None if value is jsnull else value


def evict(world_id: str) -> None:
    current.namespace.evict(world_id)


# -- the staged bundle ---------------------------------------------------------------------------


async def bundle_check(bundle: str) -> dict[str, Any]:
    """In an interpreter booted on a `wrangler deploy --dry-run` output (host.mjs `boot` with a
    bundle): import the Worker's main module as the runtime does, serve one request through it,
    and list every loaded module that came from neither the bundle, the standard library nor
    this harness."""
    deploy({"t-admin": {"principal": "ops", "roles": ["admin"]}}, entry="entry")
    entry = current.entry
    init = _js_object(method="POST", headers=_js_object(Authorization="Bearer t-admin", **{"Content-Type": "application/json"}),
                      body=json.dumps({"name": "bundled", "world_id": "w-bundle"}))  # fmt: skip
    response = await fetch(js.Request.new("http://worker.test/worlds", init))
    stdlib = str(Path(json.__file__).parents[1])  # the package json lives in the standard library
    outside = sorted(
        name for name, module in list(sys.modules.items())
        if (path := getattr(module, "__file__", None)) and not path.startswith((bundle, stdlib, str(ROOT / "tests")))
    )  # fmt: skip
    from workers import DurableObject, WorkerEntrypoint

    return {
        "status": response.status,
        "body": json.loads(await response.text()),
        "entry_classes": [issubclass(entry.Default, WorkerEntrypoint), issubclass(entry.WorldObject, DurableObject)],
        "outside": outside,
        "loaded_from_bundle": sorted({name.split(".")[0] for name, m in sys.modules.items()
                                      if str(getattr(m, "__file__", "") or "").startswith(bundle)}),  # fmt: skip
    }

