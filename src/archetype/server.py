"""`archetype serve`: the local authority, the shared HTTP application under uvicorn, and a runner
loop stepping every ACTIVE world at a fixed tick rate, all in one process (CPython only).

SIGTERM or SIGINT shuts down in order: admission closes first (admitting routes answer 503
`shutting_down`), the tick in progress finishes, the HTTP server drains its connections, and the
catalog closes. Nothing is left LEASED by a clean shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import importlib
import json
import logging
import os
import re
import secrets
import signal
import socket
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
from archetype.world.operations import DestroyWorld, Step
from local_catalog import open_local_authority

log = logging.getLogger("archetype.serve")

RUNNER_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@:-]{0,127}")


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
    runner_id: str | None = None


class RunnerBusyError(RuntimeError):
    """Another live process already runs with this runner id on this data directory."""


@contextlib.contextmanager
def runner_identity(data: Path, runner_id: str | None) -> Iterator[str]:
    """Hold this runner's id for the life of the process.

    The id is stable across restarts (so a restarted runner takes back its own leases at once
    and a crash is recognised as one), and exclusive: an OS lock on `<data>/runners/<id>.lock`
    refuses a second live process with the same id. The OS drops the lock when the process dies,
    however it dies.
    """
    runner_id = runner_id or f"serve@{socket.gethostname()}"
    if not RUNNER_ID_PATTERN.fullmatch(runner_id):
        raise ValueError(f"runner id {runner_id!r} must match {RUNNER_ID_PATTERN.pattern}")
    folder = data / "runners"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{runner_id}.lock", "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunnerBusyError(
                f"runner {runner_id!r} is already running on {data}; stop it, or give this one another --runner-id"
            ) from None
        try:
            yield runner_id
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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
        worlds = await runtime.authority.list_worlds()
    except Exception:
        log.exception("could not list the worlds; trying again next tick")
        return
    for world in worlds:
        if stop.is_set():
            return
        if world["status"] == "CLOSING":  # a destroy that stopped between its transactions
            await finish_destroy(runtime, world["world_id"])
        if world["status"] != "ACTIVE":
            continue
        try:
            await runtime.dispatcher.apply(Step(world_id=world["world_id"]))
        except CommandError as exc:  # fenced, closing or destroyed meanwhile: the host reloads it next tick
            log.warning("world %s not stepped: %s: %s", world["world_id"], exc.code, exc.message)
        except Exception:
            log.exception("world %s failed its tick; it is retried next tick", world["world_id"])


async def finish_destroy(runtime: Runtime, world_id: str) -> None:
    try:
        await runtime.dispatcher.apply(DestroyWorld(world_id=world_id))
    except Exception:
        log.exception("could not finish destroying world %s; trying again next tick", world_id)


async def run_worlds(runtime: Runtime, stop: asyncio.Event, tick_rate: float) -> None:
    loop = asyncio.get_running_loop()
    interval = 1.0 / tick_rate
    while not stop.is_set():
        started = loop.time()
        await step_active_worlds(runtime, stop)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=max(0.0, interval - (loop.time() - started)))


async def serve(config: ServeConfig) -> None:
    config.data.mkdir(parents=True, exist_ok=True)
    with runner_identity(config.data, config.runner_id) as runner_id:
        await _serve(config, runner_id)


async def _serve(config: ServeConfig, runner_id: str) -> None:
    tokens = load_tokens(config.tokens_file)
    authority = open_local_authority(config.data, synchronous=config.synchronous)
    runtime = Runtime(authority, owner=runner_id, audit=AuditLog.open_local(config.data, authority))
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
