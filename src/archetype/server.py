"""`archetype serve`: the local authority, the shared HTTP application under uvicorn, and a runner
loop stepping every ACTIVE world at a fixed tick rate, all in one process (CPython only).

SIGTERM or SIGINT shuts down in order: admission closes first (admitting routes answer 503
`shutting_down`), the tick in progress finishes, the HTTP server drains its connections, and the
catalog closes. Nothing is left LEASED by a clean shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import os
import secrets
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn

from archetype.api import DEFAULT_QUOTA, create_app
from archetype.api.auth import TOKENS_ENV, TokenTable
from archetype.audit import AuditLog
from archetype.commands.errors import CommandError
from archetype.runtime import Runtime
from archetype.world.operations import Step
from local_catalog import open_local_authority

log = logging.getLogger("archetype.serve")


@dataclass(frozen=True)
class ServeConfig:
    data: Path
    host: str = "127.0.0.1"
    port: int = 8787
    tokens_file: Path | None = None
    tick_rate: float = 10.0
    quota: int | None = DEFAULT_QUOTA
    modules: tuple[str, ...] = field(default_factory=tuple)
    synchronous: str = "FULL"
    log_level: str = "warning"


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # `serve` owns SIGTERM/SIGINT: admission must close before the HTTP server stops.
        yield


def load_tokens(tokens_file: Path | None) -> TokenTable:
    """The token table from `--tokens`, else `$ARCHETYPE_TOKENS`, else one fresh admin token (printed)."""
    if tokens_file is not None:
        return TokenTable.from_json(tokens_file.read_text())
    if os.environ.get(TOKENS_ENV):
        return TokenTable.from_json(os.environ[TOKENS_ENV])
    token = secrets.token_urlsafe(24)
    print(f"no token table given; admin token for this run: {token}", file=sys.stderr, flush=True)
    return TokenTable({token: {"principal": "admin", "roles": ["admin"]}})


def load_modules(runtime: Runtime, modules: tuple[str, ...]) -> None:
    """Import the modules defining the worlds' components; a module's `setup(runtime)` may add processors."""
    for name in modules:
        module = importlib.import_module(name)
        setup = getattr(module, "setup", None)
        if callable(setup):
            setup(runtime)


async def step_active_worlds(runtime: Runtime, stop: asyncio.Event) -> None:
    try:
        worlds = await runtime.authority.call("list_worlds")
    except Exception:
        log.exception("could not list the worlds; trying again next tick")
        return
    for world in worlds:
        if stop.is_set():
            return
        if world["status"] != "ACTIVE":
            continue
        try:
            await runtime.dispatcher.apply(Step(world_id=world["world_id"]))
        except CommandError as exc:  # fenced, closing or destroyed meanwhile: the host reloads it next tick
            log.warning("world %s not stepped: %s: %s", world["world_id"], exc.code, exc.message)
        except Exception:
            log.exception("world %s failed its tick; it is retried next tick", world["world_id"])


async def run_worlds(runtime: Runtime, stop: asyncio.Event, tick_rate: float) -> None:
    loop = asyncio.get_running_loop()
    interval = 1.0 / tick_rate
    while not stop.is_set():
        started = loop.time()
        await step_active_worlds(runtime, stop)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=max(0.0, interval - (loop.time() - started)))


async def serve(config: ServeConfig) -> None:
    tokens = load_tokens(config.tokens_file)
    authority = open_local_authority(config.data, synchronous=config.synchronous)
    runtime = Runtime(authority, owner=f"serve-{os.getpid()}", audit=AuditLog.open_local(config.data, authority))
    load_modules(runtime, config.modules)
    app = create_app(authority, registry=runtime.registry, tokens=tokens, quota=config.quota, worlds=runtime.worlds,
                     audit=runtime.audit)  # fmt: skip
    server = _Server(uvicorn.Config(app, host=config.host, port=config.port, log_level=config.log_level, lifespan="off"))

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    serving = asyncio.create_task(server.serve())
    while not server.started and not serving.done():
        await asyncio.sleep(0.01)
    if serving.done():
        await runtime.close()
        raise RuntimeError(f"could not serve on {config.host}:{config.port}")
    host, port = server.servers[0].sockets[0].getsockname()[:2]
    print(json.dumps({"serving": f"http://{host}:{port}", "data": str(config.data)}), flush=True)

    runner = asyncio.create_task(run_worlds(runtime, stop, config.tick_rate))
    projector = asyncio.create_task(runtime.audit.run_forever(stop))
    await stop.wait()
    app.state.admission.close()
    await runner
    await projector
    server.should_exit = True
    await serving
    await runtime.close()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.remove_signal_handler(sig)
    print(json.dumps({"stopped": True}), flush=True)
