"""`archetype serve`: the local authority, the shared HTTP application under uvicorn, and a runner
stepping the worlds that have work at a fixed tick rate, all in one process (CPython only).

SIGTERM or SIGINT shuts down in order: admission closes first (admitting routes answer 503
`shutting_down`), the tick in progress finishes, the HTTP server drains its connections, and the
catalog closes. Nothing is left LEASED by a clean shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import importlib
import json
import logging
import os
import re
import secrets
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from archetype.api import create_app
from archetype.api.auth import TOKENS_ENV, TokenTable, TokenTableError
from archetype.audit import AuditLog
from archetype.commands.clock import TickClock
from archetype.commands.errors import CommandError, WorldClosingError, WorldNotFoundError
from archetype.commands.port import Clock, SystemClock
from archetype.dashboard import mount_dashboard
from archetype.docs_ui import mount_docs
from archetype.metrics import Metrics, ObservedAuthority, configure_logging, mount_metrics
from archetype.retention import RetentionPolicy, run_retention
from archetype.runtime import Runtime
from archetype.settings import ConfigurationError, ServeSettings
from archetype.world.operations import DestroyWorld
from archetype.world.world import AsyncWorld
from local_catalog import open_local_authority
from local_catalog.writer import BacklogWorld, WriterThreadAuthority

log = logging.getLogger("archetype.serve")

RUNNER_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@:-]{0,127}")


class DataDirectoryBusyError(ConfigurationError):
    """Another live `archetype serve` already runs on this data directory."""


SERVE_LOCK = "serve.lock"


@contextlib.contextmanager
def hold_data_directory(data: Path, runner_id: str | None) -> Iterator[str]:
    """Hold the data directory, and this runner's id, for the life of the process.

    One `serve` per data directory: two would fight over every world (each load fences the other's
    writer), so a second one is refused by an OS lock on `<data>/serve.lock`, which the OS drops
    when the process dies, however it dies. The runner id is stable across restarts (so a
    restarted runner takes back its own leases at once and a crash is recognised as one).
    """
    runner_id = runner_id or f"serve@{socket.gethostname()}"
    if not RUNNER_ID_PATTERN.fullmatch(runner_id):
        raise ConfigurationError(f"--runner-id {runner_id!r} must match {RUNNER_ID_PATTERN.pattern}")
    with open(data / SERVE_LOCK, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise DataDirectoryBusyError(
                f"{data} is already served by {holder}; stop it, or give this one another --data"
            ) from None
        try:
            handle.truncate(0)
            handle.write(f"runner {runner_id!r} (pid {os.getpid()})")
            handle.flush()
            yield runner_id
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class HeadDeadline(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol (on httptools, the C parser: h11's pure-Python one cost about a
    fifth of an admission request's CPU), except that a connection whose request head (request
    line and headers) is not complete `head_timeout_s` after it opened, or after its previous
    answer, is closed. uvicorn has no such limit: a client trickling its headers would hold a
    connection forever. (A slow body is the app's to refuse: 408 `request_timeout`,
    archetype.api.limits.)"""

    def __init__(self, *args: Any, head_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.head_timeout_s = head_timeout_s
        self._waiting: object = None
        self._heads = self._answers = 0  # a head beyond the answered ones is complete (pipelined ones too)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_head()

    def on_headers_complete(self) -> None:
        self._heads += 1
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        self._answers += 1
        super().on_response_complete()
        self._await_head()

    def _await_head(self) -> None:
        self._waiting = waiting = object()  # a timer only acts on the wait that armed it
        self.loop.call_later(self.head_timeout_s, self._head_late, waiting)

    def _head_late(self, waiting: object) -> None:
        if waiting is not self._waiting:
            return
        if self._heads == self._answers and not self.transport.is_closing():
            self.transport.close()


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # `serve` owns SIGTERM/SIGINT: admission must close before the HTTP server stops.
        yield


def load_tokens(tokens_file: Path | None) -> tuple[TokenTable, str | None]:
    """The token table from `--tokens`, else `$ARCHETYPE_TOKENS`, else one fresh admin token
    (returned too: `serve` prints it once every setting has passed its checks)."""
    try:
        if tokens_file is not None:
            return TokenTable.from_json(tokens_file.read_text()), None
        if os.environ.get(TOKENS_ENV):
            return TokenTable.from_json(os.environ[TOKENS_ENV]), None
    except OSError as exc:
        raise ConfigurationError(f"--tokens {tokens_file}: {exc.strerror}; give the path of a JSON token table") from None
    except TokenTableError as exc:
        raise ConfigurationError(f"{tokens_file or '$' + TOKENS_ENV}: {exc}") from None
    token = secrets.token_urlsafe(24)
    return TokenTable({token: {"principal": "admin", "roles": ["admin"]}}), token


def import_modules(names: tuple[str, ...]) -> list[ModuleType]:
    """Import the modules defining the worlds' components, from the working directory too (as
    `python -m` would: the console script's own directory is what Python puts first)."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    modules = []
    for name in names:
        try:
            modules.append(importlib.import_module(name))
        except ModuleNotFoundError as exc:
            raise ConfigurationError(
                f"--module {name}: cannot import {exc.name!r}; run from the directory that holds it, or add that "
                f"directory to PYTHONPATH"
            ) from None
        except Exception as exc:  # the module's own code failed: say which and why, no traceback
            raise ConfigurationError(f"--module {name}: importing it raised {type(exc).__name__}: {exc}") from None
    return modules


def set_up_modules(runtime: Runtime, modules: list[ModuleType]) -> None:
    """A module's `setup(runtime)` may add processors."""
    for module in modules:
        setup = getattr(module, "setup", None)
        if callable(setup):
            setup(runtime)


def listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything is created on disk, so a busy port changes nothing."""
    # IPPROTO_TCP named, not left 0: asyncio turns Nagle off only on sockets that say they are TCP,
    # and with Nagle on every keep-alive answer after the first waited ~40 ms for a delayed ACK.
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigurationError(f"cannot listen on {host}:{port}: {exc.strerror}; stop what uses it, or pick another --port") from None
    sock.set_inheritable(True)
    return sock


class WorldRunner:
    """Steps the worlds that have work, `tick_rate` passes a second; idle worlds cost nothing.

    A world ticks in a pass when it has processors or PreTick hooks (`AsyncWorld.has_systems`: at every
    tick of its clock), or when one of its open commands is due. Due-ness comes from the catalog's
    index of open commands (`pending_worlds`), never from a walk over every world, and from the
    world's tick clock (archetype.commands.clock, anchored in its ledger row, the rule the Durable
    Object's alarm follows too): a sleeping world woken by a command steps straight to the tick its
    clock reached, and the empty ticks between are coalesced (docs/ledger.md, *Idle worlds*). The
    due worlds of a pass step concurrently, so their ledger calls share group commits. Every
    `sweep_s` the runner lists the worlds once: CLOSING worlds to finish, and (when modules add
    processors on load) new worlds to load and see.
    """

    def __init__(self, runtime: Runtime, catalog: WriterThreadAuthority, metrics: Metrics, tick_rate: float,
                 sweep_s: float = 10.0, concurrency: int = 256, clock: Clock | None = None) -> None:  # fmt: skip
        self.runtime, self.catalog, self.metrics = runtime, catalog, metrics
        self.sweep_s = sweep_s
        self.interval_ms = max(1, round(1000 / tick_rate))
        self.clock = clock or SystemClock()  # the ledger's clock: the worlds' clocks are anchored on it
        self.passes = 0
        self._grid_ms: int | None = None  # the first pass's time: passes fall on this grid
        self.clocks: dict[str, TickClock] = {}  # world -> its tick clock, from its ledger row
        self.ticking: set[str] = set()  # worlds with systems
        self._slots = asyncio.Semaphore(concurrency)
        self._loads_systems = bool(runtime.worlds.on_load)  # modules add processors: a world must be seen
        runtime.worlds.on_load.append(self._loaded)  # after the modules' callbacks: it sees what they added

    def _loaded(self, world: AsyncWorld) -> None:
        if world.has_systems:
            self.ticking.add(world.world_id)

    def pass_ms(self) -> int:
        """This pass's time, on the grid of pass times: the clock rule reads it rather than the
        moment the pass woke, so a few ms of wake-up jitter never moves a world's step to another pass."""
        now = self.clock.now_ms()
        if self._grid_ms is None:
            self._grid_ms = now
        return now - (now - self._grid_ms) % self.interval_ms

    async def _clock_of(self, world_id: str) -> TickClock:
        if world_id not in self.clocks:
            self.clocks[world_id] = TickClock.of(await self.runtime.authority.world_info(world_id), self.interval_ms)
        return self.clocks[world_id]

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        swept = -self.sweep_s
        while not stop.is_set():
            started = loop.time()
            if started - swept >= self.sweep_s:
                swept = started
                await self.sweep(stop)
            self.passes += 1
            await self.run_pass(stop)
            to_next_pass = self.interval_ms - (self.clock.now_ms() - (self._grid_ms or 0)) % self.interval_ms
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=to_next_pass / 1000)

    async def sweep(self, stop: asyncio.Event) -> None:
        try:
            worlds = await self.runtime.authority.list_worlds()
        except Exception:
            log.exception("could not list the worlds; trying again at the next sweep")
            return
        unseen = []
        for world in worlds:
            if stop.is_set():
                return
            if world["status"] == "CLOSING":  # a destroy that stopped between its transactions
                await finish_destroy(self.runtime, world["world_id"])
            elif world["status"] == "ACTIVE" and self._loads_systems and world["world_id"] not in self.clocks:
                self.clocks[world["world_id"]] = TickClock.of(world, self.interval_ms)
                unseen.append(world["world_id"])
        await asyncio.gather(*(self._see(world_id) for world_id in unseen))

    async def _see(self, world_id: str) -> None:
        """Load a world to learn whether the modules give it systems (concurrently: loads share commits)."""
        async with self._slots:
            with contextlib.suppress(Exception):  # a world that cannot load now is retried when it is due
                await self.runtime.worlds.get(world_id)

    async def run_pass(self, stop: asyncio.Event) -> None:
        try:
            pending = await self.catalog.pending_worlds()
        except Exception:
            log.exception("could not read the due worlds; trying again next tick")
            return
        now = self.pass_ms()
        due: dict[str, int] = {}
        for world in pending:
            if world["status"] == "CLOSING":
                await finish_destroy(self.runtime, world["world_id"])
            elif world["status"] == "ACTIVE":
                clock = self.clocks.setdefault(world["world_id"], TickClock.of(world, self.interval_ms))
                at = clock.next_step_at(world["tick_head"], has_systems=False, next_due_tick=world["next_tick"])
                if at is not None and at <= now:
                    due[world["world_id"]] = clock.tick_at(now)
        for world_id in self.ticking - due.keys():
            try:
                clock, head = await self._clock_of(world_id), (await self.runtime.worlds.get(world_id)).tick
            except (WorldClosingError, WorldNotFoundError):
                self.ticking.discard(world_id)
                continue
            except Exception:  # not loadable now (fenced, the catalog did not answer): the next pass tries again
                continue
            if clock.step_to(now, head) is not None:  # due: with systems, every tick of the clock
                due[world_id] = clock.tick_at(now)
        due = {world_id: tick for world_id, tick in due.items() if self.runtime.worlds.retry_due(world_id)}
        if not stop.is_set():
            await asyncio.gather(*(self.step(world_id, tick) for world_id, tick in due.items()))

    async def step(self, world_id: str, tick: int) -> None:
        async with self._slots:
            started, ok = time.perf_counter(), False
            try:
                await self.runtime.worlds.step(world_id, tick)
                ok = True
            except (WorldClosingError, WorldNotFoundError):
                self.ticking.discard(world_id)
                self.clocks.pop(world_id, None)
            except CommandError as exc:  # fenced, or leases taken over: the host reloads it next tick
                log.warning("world %s not stepped: %s: %s", world_id, exc.code, exc.message)
            except Exception:
                pass  # the world host recorded it (STALLED), logged it (rate-limited) and backs off
            self.metrics.observe_tick(world_id, time.perf_counter() - started, ok)


async def finish_destroy(runtime: Runtime, world_id: str) -> None:
    try:
        await runtime.dispatcher.apply(DestroyWorld(world_id=world_id))
    except Exception:
        log.exception("could not finish destroying world %s; trying again next tick", world_id)


async def serve(config: ServeSettings) -> None:
    """Check every setting before anything is created (tokens, modules, the port), then serve."""
    configure_logging(config.log_level, config.log_format)
    tokens, generated = load_tokens(config.tokens_file)
    modules = import_modules(config.modules)
    sock = listen(config.host, config.port)
    try:
        config.data.mkdir(parents=True, exist_ok=True)
        with hold_data_directory(config.data, config.runner_id) as runner_id:
            if generated:
                print(f"no token table given; admin token for this run: {generated}", file=sys.stderr, flush=True)
            await _serve(config, runner_id, tokens, modules, sock)
    finally:
        sock.close()


async def _serve(config: ServeSettings, runner_id: str, tokens: TokenTable, modules: list[ModuleType], sock: socket.socket) -> None:
    metrics = Metrics(config.metrics_worlds)
    catalog = open_local_authority(config.data, synchronous=config.synchronous)
    assert isinstance(catalog, WriterThreadAuthority)  # serve runs on CPython, which has threads
    authority = ObservedAuthority(catalog, metrics)
    async def backlog() -> list[BacklogWorld]:  # the projector's round: the worlds with events pending, not all
        worlds = await catalog.outbox_backlog()
        metrics.observe_backlog(worlds)
        return worlds

    runtime = Runtime(authority, owner=runner_id, audit=AuditLog.open_local(config.data, authority, backlog=backlog))
    set_up_modules(runtime, modules)
    app = create_app(authority, registry=runtime.registry, tokens=tokens, quota=config.quota, worlds=runtime.worlds,
                     audit=runtime.audit, body_timeout_s=config.body_timeout)  # fmt: skip
    mount_docs(app)
    mount_dashboard(app)
    mount_metrics(app, metrics, log_requests=config.log_format == "json")
    # JSON logs: uvicorn's loggers propagate to our formatter, and our access line replaces its own
    json_logs: dict[str, Any] = {"log_config": None, "access_log": False} if config.log_format == "json" else {}
    protocol: Any = functools.partial(HeadDeadline, head_timeout_s=config.body_timeout)  # uvicorn calls it like the class
    server = _Server(uvicorn.Config(app, http=protocol, log_level=config.log_level, lifespan="off", **json_logs))

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not serving.done():
        await asyncio.sleep(0.01)
    if serving.done():
        await runtime.close()
        raise RuntimeError(f"could not serve on {config.host}:{config.port}")
    host, port = server.servers[0].sockets[0].getsockname()[:2]
    print(json.dumps({"serving": f"http://{host}:{port}", "data": str(config.data)}), flush=True)

    runner = asyncio.create_task(WorldRunner(runtime, catalog, metrics, config.tick_rate).run(stop))
    projector = asyncio.create_task(runtime.audit.run_forever(stop))
    retention = asyncio.create_task(run_retention(authority, RetentionPolicy.of(config), stop, config.prune_interval))
    await stop.wait()
    app.state.admission.close()
    await runner
    await projector
    await retention
    server.should_exit = True
    await serving
    await runtime.close()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.remove_signal_handler(sig)
    print(json.dumps({"stopped": True}), flush=True)
