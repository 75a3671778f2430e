"""`archetype serve`: the local authority and the shared HTTP application under uvicorn in one
process, and a runner stepping the worlds that have work at a fixed tick rate in another, its
stepping process (archetype.stepper; CPython only). Several serves, with distinct runner ids, may
share one data directory, and remote runners (`archetype runner`, archetype.remote_runner) may join
them over HTTP: all of them register in the ledger's runner registry and split the worlds under
world leases (`RunnerRegistry`, `WorldRunner`; docs/cli.md, "Cooperating runners").

SIGTERM or SIGINT (to the serve process) shuts down in order: admission closes first (admitting
routes answer 503 `shutting_down`), the stepping process finishes its tick in progress and exits,
the HTTP server drains its connections, and the catalog closes. Nothing is left LEASED by a clean
shutdown, and its world leases are given back, so the other runners take its worlds over at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import gc
import hashlib
import importlib
import json
import logging
import os
import secrets
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import IO, Any, Protocol

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from archetype.api import create_app
from archetype.api.app import HttpApp
from archetype.api.auth import TOKENS_ENV, TokenTable, TokenTableError
from archetype.audit import AuditLog
from archetype.commands.authority import Authority
from archetype.commands.clock import TickClock
from archetype.commands.errors import (
    LeaseLostError,
    RunnerIdHeldError,
    StaleWriterError,
    WorldClosingError,
    WorldEdgeHostedError,
    WorldLeaseHeldError,
    WorldNotFoundError,
)
from archetype.commands.failure_streak import FailureStreak
from archetype.commands.ledger import RUNNER_ID_PATTERN
from archetype.commands.ledger_rows import PendingWorld, RunnerRow, WorldRow
from archetype.commands.port import Clock, SystemClock
from archetype.dashboard import mount_dashboard
from archetype.docs_ui import mount_docs
from archetype.metrics import Metrics, ObservedAuthority, configure_logging, mount_metrics
from archetype.retention import RetentionPolicy, run_retention
from archetype.runtime import Runtime
from archetype.settings import ConfigurationError, ServeSettings
from archetype.stepper import Reporter, Stepper
from archetype.world.error_text import error_text, safe_text
from archetype.world.operations import DestroyWorld
from archetype.world.world import AsyncWorld
from local_catalog import open_local_authority
from local_catalog.writer import BacklogWorld, WriterThreadAuthority

log = logging.getLogger("archetype.serve")

class RunnerBusyError(ConfigurationError):
    """A live runner (a `serve` on this data directory, or any runner in the registry) already runs this runner id."""


RUNNERS_DIR = "runners"  # <data>/runners/<runner id>.lock: held by the live process of that id
DUTIES_LOCK = "serve.lock"  # held by the one runner doing the singleton duties (audit projector, retention)


def hold_lock(path: Path) -> IO[str] | None:
    """`path` opened and exclusively flock'ed, or None when a live process holds it."""
    handle = open(path, "a+")  # stays open for as long as the lock is held
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def _holder(path: Path) -> str:
    with contextlib.suppress(OSError):
        return path.read_text().strip() or "another process"
    return "another process"


def host_of(world_id: str, runners: list[str]) -> str:
    """The runner that should host `world_id` among the live `runners` (rendezvous hashing): each
    runner's fair share, and when a runner joins or dies only the worlds it gains or loses move."""
    return max(runners, key=lambda runner: hashlib.blake2b(f"{runner}\0{world_id}".encode(), digest_size=8).digest())


class Runners:
    """This `serve` process's hold on its data directory, beside its registration in the ledger's
    runner registry (`RunnerRegistry`, which says which runners are live).

    Each process holds `<data>/runners/<runner id>.lock` for its life (the OS drops it however the
    process dies). The registry cannot refuse a second `serve` of the same id on the same data
    directory (same host, same directory: the same instance, which is how a restarted runner gets
    its id back at once); the lock refuses it, at once and with one line. One of the processes,
    whoever holds `<data>/serve.lock`, does the singleton duties: the audit projector (one writer of
    the Iceberg table) and retention, which only a process beside the catalog file can do. When it
    dies another takes them on.
    """

    def __init__(self, data: Path, runner_id: str, handle: IO[str], pid: int | None = None) -> None:
        self.data, self.runner_id = data, runner_id
        self.pid = pid or os.getpid()  # the serve process's, which the operator signals
        self.handle = handle  # the runner id's lock, shared with the stepping process (archetype.stepper)
        self._duties: IO[str] | None = None

    def take_duties(self) -> bool:
        """Whether this runner does the singleton duties: it holds their lock, or takes it now."""
        if self._duties is None:
            self._duties = hold_lock(self.data / DUTIES_LOCK)
            if self._duties is not None:
                self._duties.truncate(0)
                self._duties.write(f"runner {self.runner_id!r} (pid {self.pid})")
                self._duties.flush()
        return self._duties is not None

    def close(self) -> None:
        for handle in (self._duties, self.handle):
            if handle is not None:
                handle.close()  # closing the descriptor drops its flock


@contextlib.contextmanager
def hold_data_directory(data: Path, runner_id: str | None) -> Iterator[Runners]:
    """Hold this runner's id on the data directory for the life of the process.

    Several runners share a data directory, each under its own stable id (a restarted runner takes
    back its own leases at once, and a crash is recognised as one); the same id twice is refused,
    with one line. Which worlds each steps is decided by the runner registry and world leases
    (docs/ledger.md).
    """
    runner_id = runner_id or f"serve@{socket.gethostname()}"
    if not RUNNER_ID_PATTERN.fullmatch(runner_id):
        raise ConfigurationError(f"--runner-id {runner_id!r} must match {RUNNER_ID_PATTERN.pattern}")
    (data / RUNNERS_DIR).mkdir(exist_ok=True)
    path = data / RUNNERS_DIR / f"{runner_id}.lock"
    handle = hold_lock(path)
    if handle is None:
        raise RunnerBusyError(
            f"{data} is already served by {_holder(path)}; give this one another --runner-id to join it as a "
            f"cooperating runner, or another --data"
        )
    handle.truncate(0)
    handle.write(f"runner {runner_id!r} (pid {os.getpid()})")
    handle.flush()
    runners = Runners(data, runner_id, handle)
    try:
        yield runners
    finally:
        runners.close()


def serve_instance(data: Path) -> str:
    """Where a `serve` runs, as the runner registry tells a restart from another process: the same
    host and data directory are the same runner restarted (its own lock file refuses a second live one)."""
    return f"serve@{socket.gethostname()}:{data.resolve()}"


class RunnerCatalog(Protocol):
    """What a `WorldRunner` reads and writes besides its worlds' own ledger calls: the due-time index
    and the runner registry. Every `Authority` has them: the local catalog, the HTTP authority (over
    the runner protocol), the Durable Objects."""

    async def pending_worlds(self) -> list[PendingWorld]: ...
    async def hosted_worlds(self, owner: str) -> list[WorldRow]: ...
    async def claim_world(self, world_id: str, owner: str, lease_ms: int) -> WorldRow: ...
    async def release_world(self, world_id: str, owner: str, writer_epoch: int) -> WorldRow: ...
    async def register_runner(self, runner_id: str, instance: str, lease_ms: int) -> RunnerRow: ...
    async def leave_runner(self, runner_id: str, instance: str) -> RunnerRow | None: ...
    async def live_runners(self) -> list[RunnerRow]: ...


class RunnerRegistry:
    """This runner's registration in the ledger's runner registry (docs/ledger.md, "The runner
    registry"). Every runner of a catalog registers there, `serve`'s and remote ones alike, so the
    live registrations are one list that `host_of` splits the worlds among. A registration lasts
    `lease_ms` unrenewed: a runner that dies leaves the list when it expires, one that stops
    cleanly leaves it at once."""

    def __init__(self, catalog: RunnerCatalog, runner_id: str, instance: str, lease_ms: int) -> None:
        self.catalog, self.runner_id, self.instance, self.lease_ms = catalog, runner_id, instance, lease_ms
        self._beats = FailureStreak(log, f"runner {runner_id}")
        # False once another process took the id over (this one's registration had expired): world
        # leases name the runner id, so they cannot tell the two apart, and this one must step nothing.
        self.held = True

    async def join(self) -> None:
        """Register, or refuse with one line: another process holds this id live."""
        try:
            await self.catalog.register_runner(self.runner_id, self.instance, self.lease_ms)
        except RunnerIdHeldError as exc:
            raise RunnerBusyError(f"{exc.message}; give this runner another --runner-id") from None

    async def beat(self) -> None:
        """Renew the registration. Refused when another process took the id over after it expired:
        this runner then steps nothing (`held`), and takes the id back once that one's registration
        expired."""
        try:
            await self.catalog.register_runner(self.runner_id, self.instance, self.lease_ms)
            self.held = True
            self._beats.succeeded("its registration is renewed again")
        except RunnerIdHeldError as exc:
            if self.held:
                log.error("runner %s is not live: %s; stepping nothing until it is", self.runner_id, safe_text(exc.message))
            self.held = False
        except Exception as exc:  # the catalog did not answer: the registration holds until it expires
            self._beats.failed(exc, "renewing its registration failed; trying again")

    async def keep(self, stop: asyncio.Event, every_s: float) -> None:
        """Renew the registration every `every_s` until `stop`, then leave the registry: the share of
        a runner stopping cleanly moves at once (its world leases are given back at close)."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=every_s)
            if stop.is_set():
                await self.leave()
                return
            await self.beat()

    async def live(self) -> list[str]:
        """The live runner ids, sorted; none while this runner does not hold its own id (no share is its)."""
        return [row["runner_id"] for row in await self.catalog.live_runners()] if self.held else []

    async def leave(self) -> None:
        try:
            await self.catalog.leave_runner(self.runner_id, self.instance)
        except Exception as exc:  # it expires by itself: the others take its share a lease later
            log.warning("runner %s could not leave the runner registry: %s", self.runner_id, error_text(exc))


class OneWrite:
    """The transport of one answer as uvicorn writes it, except that the response head is held
    until the body's first write and goes out with it: one send call and one segment per answer
    instead of two (uvicorn writes the head when the app starts its answer; a send on loopback
    costs about as much CPU as a small route's work, and the client wakes up once, not twice).
    Every answer but HEAD's has a body write (uvicorn writes an empty body too)."""

    __slots__ = ("cycle", "head", "transport")

    def __init__(self, transport: asyncio.Transport, cycle: Any) -> None:
        self.transport, self.cycle = transport, cycle
        self.head: bytes | None = b""  # None once the head went out

    def write(self, data: bytes) -> None:
        if self.cycle.response_started and self.head is not None:
            if not self.head:  # the head, written the moment the answer started
                self.head = data
                return
            data, self.head = self.head + data, None
        self.transport.write(data)

    def close(self) -> None:  # an app that failed after starting its answer: what it started goes out first
        if self.head:
            self.transport.write(self.head)
        self.head = None
        self.transport.close()

    def is_closing(self) -> bool:
        return self.transport.is_closing()


class HeadDeadline(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol (on httptools, the C parser: h11's pure-Python one cost about a
    fifth of an admission request's CPU), except that a connection whose request head (request
    line and headers) is not complete `head_timeout_s` after it opened, or after its previous
    answer, is closed. uvicorn has no such limit: a client trickling its headers would hold a
    connection forever. (A slow body is the app's to refuse: 408 `request_timeout`,
    archetype.api.limits.) Each answer is one write (OneWrite), and uvicorn's access line is not
    formatted per request when its logger would drop it."""

    def __init__(self, *args: Any, head_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.access_log = self.access_log and self.access_logger.isEnabledFor(logging.INFO)
        self.head_timeout_s = head_timeout_s
        self._head_due = 0.0  # loop time by which the awaited head must be complete
        self._head_timer: asyncio.TimerHandle | None = None
        self._heads = self._answers = 0  # a head beyond the answered ones is complete (pipelined ones too)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_head()

    def on_headers_complete(self) -> None:
        self._heads += 1
        super().on_headers_complete()
        # a cycle for this head (not an upgrade), whose answer has a body write (not HEAD's) to carry its head
        if self.cycle is not None and self.cycle.scope is self.scope and self.scope["method"] != "HEAD":
            self.cycle.transport = OneWrite(self.transport, self.cycle)  # type: ignore[assignment]  # what the cycle calls

    def on_response_complete(self) -> None:
        self._answers += 1
        super().on_response_complete()
        self._await_head()

    def _await_head(self) -> None:
        # One timer per connection, moved on lazily: a timer per answer (each living head_timeout_s)
        # kept tens of thousands alive at 32 in flight, each a callback the loop and the collector carry.
        self._head_due = self.loop.time() + self.head_timeout_s
        if self._head_timer is None:
            self._head_timer = self.loop.call_at(self._head_due, self._head_late)

    def _head_late(self) -> None:
        self._head_timer = None
        if self.loop.time() < self._head_due:  # an answer since the timer was set: the wait began again then
            self._head_timer = self.loop.call_at(self._head_due, self._head_late)
        elif self._heads == self._answers and not self.transport.is_closing():
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
    # Never inheritable (close-on-exec, Python's default for sockets): a child process holding it
    # (the stepping process, its audit writer) would keep the port bound after serve alone died.
    # uvloop's subprocess_exec ignores close_fds (every inheritable descriptor goes to the child), so
    # close-on-exec is the one guard.
    sock.set_inheritable(False)
    return sock


class WorldRunner:
    """Steps the worlds that have work, in passes on a grid of `tick_rate` a second (finer while a
    world with a shorter interval ticks); idle worlds cost nothing.

    A world ticks in a pass when it has processors or PreTick hooks (`AsyncWorld.has_systems`: at every
    tick of its clock), or when it has an open command that is due (realtime) or open at all
    (lockstep: every tick up to it runs). Due-ness comes from the catalog's index of open commands
    (`pending_worlds`), never from a walk over every world, and from the world's tick clock
    (archetype.commands.clock, in its ledger row, the rule the Durable Object's alarm follows too;
    docs/ledger.md, *Tick modes*): a realtime world woken by a command steps straight to the tick
    its clock reached, the empty ticks between coalesced; a lockstep world runs its next tick, and
    one that is behind its schedule runs its due ticks back to back (for at most one `tick_rate`
    interval per pass; the next pass follows at once), its lag a metric. The due worlds of a pass
    step concurrently, so their ledger calls share group commits. Every `sweep_s` the runner lists
    the worlds once: CLOSING worlds to finish, and (when modules add processors on load) new worlds
    to load and see. A world recorded without an interval (created before tick modes) ticks at
    `tick_rate`.

    With a `registry` (cooperating runners, local and remote) it steps only the worlds that are its
    share (`host_of` over the live runners of the registry) and that no other live host holds,
    under world leases: a heartbeat every third of the lease renews them and its registration. When
    the live runners change, it hands each world it hosts that became another's share to that
    runner (released, then claimed in its name), and adopts its own share of the worlds other
    runners' leases name and do not hold (never loading them: idle worlds move at once, for
    nothing). A dead runner's worlds become the others' share once its registration expired, and
    are claimed once its world leases expired.
    """

    def __init__(self, runtime: Runtime, catalog: RunnerCatalog, metrics: Metrics, tick_rate: float,
                 sweep_s: float = 10.0, concurrency: int = 256, registry: RunnerRegistry | None = None,
                 clock: Clock | None = None) -> None:  # fmt: skip
        self.runtime, self.catalog, self.metrics = runtime, catalog, metrics
        self.sweep_s = sweep_s
        self.interval_ms = max(1, round(1000 / tick_rate))
        self.pass_interval_ms = self.interval_ms  # finer while a world with a shorter interval has work
        runtime.worlds.tick_interval_ms = self.interval_ms  # the pace of a world recorded without one
        self.clock = clock or SystemClock()  # the ledger's clock: the worlds' clocks are anchored on it
        self.registry = registry
        self.live: list[str] = []  # the live runners, from the registry (read at the start of every pass)
        self._share: dict[str, bool] = {}  # world -> whether it is this runner's share of `live`
        self._handing_over: dict[str, asyncio.Task[None]] = {}  # worlds being given back (a runner joined)
        self._adopting: dict[str, asyncio.Task[None]] = {}  # runner -> moving its idle worlds (it left the live list)
        self._stop = asyncio.Event()  # the run's: an adoption waiting for leases to expire ends with it
        self.sweep_soon = False  # a sweep at the next pass: the live runners changed, or a world could not load
        self._unseen_failed = False
        self.passes = 0
        self._grid_ms: int | None = None  # the first pass's time: passes fall on this grid
        self._behind = False  # a lockstep world still had due ticks when its pass's time was up
        self.seen: set[str] = set()  # worlds loaded to see whether the modules give them systems
        self.ticking: set[str] = set()  # worlds with systems
        # Worlds their Durable Object steps (a remote runner is refused them): left alone until the
        # next sweep asks again (a new deployment may host them elsewhere), logged once per world.
        self.edge_hosted: set[str] = set()
        self._edge_hosted_logged: set[str] = set()
        self._slots = asyncio.Semaphore(concurrency)
        self._loads_systems = bool(runtime.worlds.on_load)  # modules add processors: a world must be seen
        # the rounds that fail alike every time while the catalog cannot answer or write (a full disk)
        self._failing = {name: FailureStreak(log, f"runner {registry.runner_id if registry else 'serve'}") for name in
                         ("leases", "live runners", "worlds", "due worlds", "destroys")}  # fmt: skip
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
        return now - (now - self._grid_ms) % self.pass_interval_ms

    def mine(self, world_id: str) -> bool:
        if self.registry is None:
            return True
        share = self._share.get(world_id)
        if share is None:
            share = self._share[world_id] = bool(self.live) and host_of(world_id, self.live) == self.registry.runner_id
        return share

    async def run(self, stop: asyncio.Event) -> None:
        self._stop = stop
        loop = asyncio.get_running_loop()
        await self.follow_runners()  # the first sweep already sees only this runner's share
        swept = -self.sweep_s
        while not stop.is_set():
            started = loop.time()
            if started - swept >= self.sweep_s or self.sweep_soon:
                swept, self.sweep_soon = started, False
                await self.sweep(stop)
            self.passes += 1
            await self.run_pass(stop)
            to_next_pass = self.pass_interval_ms - (self.clock.now_ms() - (self._grid_ms or 0)) % self.pass_interval_ms
            if self._behind:  # lockstep ticks still due: no rest
                to_next_pass = 0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=to_next_pass / 1000)

    async def heartbeat(self, stop: asyncio.Event, every_s: float) -> None:
        """Renew this runner's world leases, follow the live runners, hand over what is no longer its
        share; and, in a task of its own, renew its registration (so a slow round of world-lease
        renewals never lets the registration expire)."""
        if self.registry is None:
            return
        registered = asyncio.create_task(self.registry.keep(stop, every_s))
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=every_s)
            if stop.is_set():
                break
            await self.follow_runners()
            self.sweep_soon |= self._unseen_failed
            self._unseen_failed = False
            try:
                for world_id in await self.runtime.worlds.renew():
                    log.warning("world %s: its world lease was taken over; no longer stepping it", world_id)
                self._failing["leases"].succeeded("its world leases are renewed again")
            except Exception as exc:
                self._failing["leases"].failed(exc, "renewing its world leases failed; trying again")
            self._hand_over_others()
        await registered

    def _hand_over_others(self) -> None:
        """Give back the loaded worlds that are no longer this runner's share, each in a task of its
        own (after its tick in progress), so that neither the heartbeat nor a pass waits for a tick."""
        for world_id in self.runtime.worlds.loaded:
            if not self.mine(world_id) and world_id not in self._handing_over:
                self._handing_over[world_id] = asyncio.create_task(self._hand_over(world_id))

    async def _hand_over(self, world_id: str) -> None:
        """Give a world that became another runner's share to that runner (its lease claimed in its
        name: `WorldHost.release`), once its tick in progress is done; in a task of its own, so that
        the heartbeat never waits for a tick."""
        try:
            await self.runtime.worlds.release(world_id, to=host_of(world_id, self.live) if self.live else None)
        finally:
            del self._handing_over[world_id]

    async def follow_runners(self) -> None:
        """Which runners live now (one read of a registry of a few rows: cheap enough for every
        pass); when a runner joined or died the shares moved, and there are worlds to see with them."""
        if self.registry is None:
            return
        try:
            live = await self.registry.live()
            self._failing["live runners"].succeeded("reads the live runners again")
        except Exception as exc:
            self._failing["live runners"].failed(exc, "reading the live runners failed; keeping the last list")
            return
        if live != self.live:
            log.info("live runners: %s", ", ".join(live))
            others = sorted({*self.live, *live} - {self.registry.runner_id})  # joined, left, or live
            self.live, self._share, self.sweep_soon = live, {}, True
            self._hand_over_others()
            for runner_id in others:
                if runner_id not in self._adopting:
                    self._adopting[runner_id] = asyncio.create_task(self._adopt(runner_id))

    async def _adopt(self, runner_id: str) -> None:
        """Take this runner's share of the worlds whose lease names `runner_id` and that it does not
        hold, once the shares moved (a runner joined, this one included, or left): of the worlds
        that runner's lease names (`hosted_worlds`: O(its worlds), read once), each ACTIVE one that
        is this runner's share now is adopted (`WorldHost.adopt`: claimed and given back at once,
        never loaded nor ticked): a live runner's once free (expired or given back: the worlds it
        holds it hands over itself, in this runner's name), a dead one's once its leases expired
        (awaited). The lease then names this runner, and the world's next command finds it here
        with no epoch bump (one bump each, at the move): idle worlds move at once, not at their next
        command. A world held still (clocks apart, a lease renewed) moves when its next command arrives."""
        assert self.registry is not None
        try:
            worlds = {w["world_id"]: w["host_expires_at"] or 0 for w in await self.catalog.hosted_worlds(runner_id)
                      if w["status"] == "ACTIVE" and self.mine(w["world_id"])}  # fmt: skip
            if runner_id in self.live:
                now = self.clock.now_ms()
                worlds = {world_id: expires for world_id, expires in worlds.items() if expires <= now}
            else:
                with contextlib.suppress(TimeoutError):
                    expiry = max(worlds.values(), default=0)
                    await asyncio.wait_for(self._stop.wait(), timeout=max(0, expiry - self.clock.now_ms()) / 1000)
            if not self._stop.is_set():
                await asyncio.gather(*(self._adopt_one(world_id) for world_id in worlds if self.mine(world_id)))
        except Exception as exc:
            log.warning("could not move the idle worlds of runner %s; they move when a command arrives: %s", runner_id,
                        error_text(exc))  # fmt: skip
        finally:
            del self._adopting[runner_id]

    async def _adopt_one(self, world_id: str) -> None:
        """Adopt one world (concurrently with the others: their claims share group commits)."""
        async with self._slots:
            with contextlib.suppress(WorldLeaseHeldError, StaleWriterError, WorldClosingError, WorldNotFoundError):
                await self.runtime.worlds.adopt(world_id)  # unless held, taken or gone meanwhile: its next command decides

    def _held_elsewhere(self, world: PendingWorld, now_ms: int) -> bool:
        """Another live host holds its world lease: leave it alone (claiming would be refused)."""
        owner = world["host_owner"]
        return owner is not None and self.registry is not None and owner != self.registry.runner_id and (
            world["host_expires_at"] or 0) > now_ms  # fmt: skip

    async def sweep(self, stop: asyncio.Event) -> None:
        try:
            worlds = await self.runtime.authority.list_worlds()
            self._failing["worlds"].succeeded("lists the worlds again")
        except Exception as exc:
            self._failing["worlds"].failed(exc, "listing the worlds failed; trying again at the next sweep")
            return
        self.edge_hosted.clear()  # asked again (at most once a sweep): a new deployment may have moved them
        unseen = []
        for world in worlds:
            if stop.is_set():
                return
            if not self.mine(world["world_id"]):
                continue
            if world["status"] == "CLOSING":  # a destroy that stopped between its transactions
                await self.finish_destroy(world["world_id"])
            elif world["status"] == "ACTIVE" and self._loads_systems and world["world_id"] not in self.seen:
                self.seen.add(world["world_id"])
                unseen.append(world["world_id"])
        await asyncio.gather(*(self._see(world_id) for world_id in unseen))

    async def _see(self, world_id: str) -> None:
        """Load a world to learn whether the modules give it systems (concurrently: loads share commits)."""
        async with self._slots:
            try:
                await self.runtime.worlds.get(world_id)
            except WorldEdgeHostedError:
                self.seen.discard(world_id)
                self._leave_to_the_edge(world_id)
            except Exception:  # held by a runner that died and whose lease has not expired yet, or failing
                self.seen.discard(world_id)
                self._unseen_failed = True  # seen again at a sweep after the next heartbeat

    async def run_pass(self, stop: asyncio.Event) -> None:
        await self.follow_runners()
        try:
            pending = await self.catalog.pending_worlds()
            self._failing["due worlds"].succeeded("reads the due worlds again")
        except Exception as exc:
            self._failing["due worlds"].failed(exc, "reading the due worlds failed; trying again next pass")
            return
        now = self.pass_ms()
        leases_at = self.clock.now_ms()  # the moment itself, not the pass's grid time: leases expire by it
        due: dict[str, _Due] = {}
        intervals = [self.interval_ms]
        for world in pending:
            if not self.mine(world["world_id"]) or self._held_elsewhere(world, leases_at):
                continue
            if world["status"] == "CLOSING":
                await self.finish_destroy(world["world_id"])
            elif world["status"] == "ACTIVE":
                clock = TickClock.of(world, self.interval_ms)  # the row is fresh: this pass's read
                if clock.lockstep:  # it ticks every interval up to its command
                    intervals.append(clock.interval_ms)
                at = clock.next_step_at(world["tick_head"], has_systems=False, next_due_tick=world["next_tick"])
                moment = leases_at if clock.lockstep else now  # a lockstep schedule is its own grid
                if at is not None and at <= moment:
                    # lockstep, with no systems: every tick up to its earliest command's is certain to run
                    due[world["world_id"]] = _Due(clock.step_to(moment, world["tick_head"]), until=world["next_tick"])
        for world_id in self.ticking - due.keys():
            if not self.mine(world_id):
                continue
            try:
                head = (await self.runtime.worlds.get(world_id)).tick
            except (WorldClosingError, WorldNotFoundError):
                self.ticking.discard(world_id)
                continue
            except Exception:  # not loadable now (fenced, the catalog did not answer): the next pass tries again
                continue
            loaded = self.runtime.worlds.clock_of(world_id)  # its host's copy, following its publications
            if loaded is None:
                continue
            intervals.append(loaded.interval_ms)
            tick = loaded.step_to(leases_at if loaded.lockstep else now, head)  # with systems: every tick of its clock
            if tick is not None:
                due[world_id] = _Due(tick, until=None)
        # The grid follows the finest interval among the worlds that tick every interval (an unpaced
        # world has none; a realtime world waiting for a command's tick is stepped at the pass after it).
        self.pass_interval_ms = min(i for i in intervals if i > 0)
        due = {world_id: d for world_id, d in due.items()
             if world_id not in self.edge_hosted and await self.runtime.worlds.retry_due(world_id)}  # fmt: skip
        self._behind = False
        if not stop.is_set():
            await asyncio.gather(*(self.step(world_id, d, stop) for world_id, d in due.items()))

    async def finish_destroy(self, world_id: str) -> None:
        """Finish a destroy that stopped between its transactions."""
        try:
            await self.runtime.dispatcher.apply(DestroyWorld(world_id=world_id))
            self._failing["destroys"].succeeded("finishes destroys again")
        except Exception as exc:
            self._failing["destroys"].failed(exc, f"finishing the destroy of world {world_id} failed; trying again")

    async def step(self, world_id: str, due: _Due, stop: asyncio.Event) -> None:
        """Step the world: once; a lockstep one again while its next tick is due (behind its schedule,
        or unpaced), up to `due.until` for one without systems, for at most one `tick_rate` interval."""
        deadline = time.perf_counter() + self.interval_ms / 1000
        tick: int | None = due.tick
        while tick is not None and await self._step_once(world_id, tick):
            clock, world = self.runtime.worlds.clock_of(world_id), self.runtime.worlds.loaded_world(world_id)
            if clock is None or world is None or not clock.lockstep or stop.is_set():
                return
            if not world.has_systems and (due.until is None or world.tick >= due.until):
                return  # its earliest open command's tick has run: the next pass reads what is open now
            tick = clock.step_to(self.clock.now_ms(), world.tick)
            if tick is not None and time.perf_counter() >= deadline:
                self._behind = True  # still due: the next pass comes at once
                return

    async def _step_once(self, world_id: str, tick: int) -> bool:
        """One step of the world; whether it published."""
        async with self._slots:
            if not self.mine(world_id):  # a runner joined since this pass began: the world is being handed over
                return False
            started, ok = time.perf_counter(), False
            try:
                await self.runtime.worlds.step(world_id, tick)
                ok = True
            except (WorldClosingError, WorldNotFoundError):
                self.ticking.discard(world_id)
                self.seen.discard(world_id)
            except WorldLeaseHeldError:
                return False  # another live runner hosts it (it was its share until a moment ago): not a tick
            except WorldEdgeHostedError:
                self._leave_to_the_edge(world_id)
                return False
            except (StaleWriterError, LeaseLostError) as exc:  # fenced, or leases taken over: the host reloads it
                log.warning("world %s not stepped: %s: %s", world_id, exc.code, safe_text(exc.message))
            except Exception:  # the world host recorded it (STALLED), logged it (once per stall) and backs off
                if self.runtime.worlds.failures(world_id) == 1:
                    self.metrics.stalls.inc()
            self.metrics.observe_tick(world_id, time.perf_counter() - started, ok)
            clock = self.runtime.worlds.clock_of(world_id)
            if ok and clock is not None and clock.lockstep:
                self.metrics.observe_lag(world_id, clock.lag_ms / 1000)
            return ok

    def _leave_to_the_edge(self, world_id: str) -> None:
        self.edge_hosted.add(world_id)
        self.ticking.discard(world_id)
        if world_id not in self._edge_hosted_logged:
            self._edge_hosted_logged.add(world_id)
            log.info("world %s is stepped by its Durable Object (edge-hosted): this runner leaves it alone", world_id)


@dataclass(frozen=True)
class _Due:
    """A world due in a pass: the tick its step goes to, and (a lockstep world without systems) the
    tick up to which it runs on back to back when behind."""

    tick: int | None
    until: int | None


async def serve(config: ServeSettings) -> None:
    """Check every setting before anything is created (tokens, modules, the port), then serve."""
    configure_logging(config.log_level, config.log_format)
    tokens, generated = load_tokens(config.tokens_file)
    import_modules(config.modules)  # checked before anything is created; their components validate HTTP input too
    sock = listen(config.host, config.port)
    try:
        config.data.mkdir(parents=True, exist_ok=True)
        with hold_data_directory(config.data, config.runner_id) as runners:
            if generated:
                print(f"no token table given; admin token for this run: {generated}", file=sys.stderr, flush=True)
            await _serve(config.model_copy(update={"runner_id": runners.runner_id}), runners, tokens, sock)
    finally:
        sock.close()


async def singleton_duties(runners: Runners, stop: asyncio.Event, every_s: float, *duties: Callable[[], Awaitable[None]]) -> None:
    """Run the duties only one runner of a data directory may run, once this runner holds their
    lock: at once if no other live runner does, else when that one dies."""
    while not stop.is_set():
        if runners.take_duties():
            log.info("runner %s runs the audit projector and retention for %s", runners.runner_id, runners.data)
            await asyncio.gather(*(duty() for duty in duties))
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=every_s)


def serve_app(config: ServeSettings, authority: Authority, tokens: TokenTable, metrics: Metrics, audit: Any) -> HttpApp:
    """The HTTP app `archetype serve` answers with: the shared app, with /docs, the dashboard and /metrics."""
    app = create_app(authority, tokens=tokens, quota=config.quota, audit=audit, body_timeout_s=config.body_timeout,
                     telemetry=config.telemetry)  # fmt: skip
    mount_docs(app)
    mount_dashboard(app)
    mount_metrics(app, metrics, log_requests=config.log_format == "json")
    return app


async def _serve(config: ServeSettings, runners: Runners, tokens: TokenTable, sock: socket.socket) -> None:
    """The HTTP process: the API over the catalog, with no world in memory; a stepping process
    (archetype.stepper) steps the worlds, so that a busy tick never delays an answer."""
    metrics = Metrics(config.metrics_worlds)
    catalog = open_local_authority(config.data, synchronous=config.synchronous)
    authority = ObservedAuthority(catalog, metrics)
    audit = AuditLog.open_local(config.data, authority)  # GetAuditHistory reads it; the stepping process projects
    app = serve_app(config, authority, tokens, metrics, audit)
    stepper = Stepper(config, runners.handle)
    metrics.relay(stepper.latest_metrics)
    # JSON logs: uvicorn's loggers propagate to our formatter, and our access line replaces its own
    json_logs: dict[str, Any] = {"log_config": None, "access_log": False} if config.log_format == "json" else {}
    protocol: Any = functools.partial(HeadDeadline, head_timeout_s=config.body_timeout)  # uvicorn calls it like the class
    server = _Server(uvicorn.Config(app, http=protocol, log_level=config.log_level, lifespan="off", **json_logs))

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    stepping = asyncio.create_task(stepper.run(stop))
    # Everything built so far (the imports, the app, its models) lives as long as this process: out of
    # the collector's sight, a full collection scans only what requests left behind. Before, each one
    # scanned ~150k objects, 100-250 ms with the loop stopped, and set the p99 of admission and /health.
    gc.freeze()
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        # "serving" once both are up: a command admitted before the stepping process runs would
        # find its world's clock ticks ahead, its empty ticks coalesced (docs/ledger.md, *Idle worlds*)
        while not (server.started and stepper.ready) and not serving.done() and not stop.is_set():
            await asyncio.sleep(0.01)
        if serving.done():
            stop.set()
            await stepping
            raise RuntimeError(f"could not serve on {config.host}:{config.port}")
        if not stop.is_set():
            host, port = server.servers[0].sockets[0].getsockname()[:2]
            print(json.dumps({"serving": f"http://{host}:{port}", "data": str(config.data)}), flush=True)
        await stop.wait()
        app.state.admission.close()
        await stepping  # the stepping process finishes its tick and gives its leases back
    finally:
        server.should_exit = True
        await serving
        await audit.close()
        await authority.close()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    print(json.dumps({"stopped": True}), flush=True)


async def step_worlds(config: ServeSettings, reporter: Reporter, lock: IO[str]) -> None:
    """The stepping process (archetype.stepper): this serve's runner, under its runner id, whose
    lock it shares with the HTTP process (`lock`), reporting to it through `reporter`; it stops on
    SIGTERM or SIGINT, or when the HTTP process is gone."""
    assert config.runner_id is not None  # the HTTP process resolved it
    runners = Runners(config.data, config.runner_id, lock, pid=os.getppid())
    modules = import_modules(config.modules)
    metrics = Metrics(config.metrics_worlds)
    catalog = open_local_authority(config.data, synchronous=config.synchronous)
    assert isinstance(catalog, WriterThreadAuthority)  # serve runs on CPython, which has threads
    authority = ObservedAuthority(catalog, metrics)

    async def backlog() -> list[BacklogWorld]:  # the projector's round: the worlds with events pending, not all
        worlds = await catalog.outbox_backlog()
        metrics.observe_backlog(worlds)
        return worlds

    lease_ms = round(config.world_lease * 1000)
    runtime = Runtime(authority, owner=config.runner_id, audit=AuditLog.open_local(config.data, authority, backlog=backlog),
                      world_lease_ms=lease_ms)  # fmt: skip
    # The registry on a connection of its own: its heartbeats and reads of the live runners never
    # queue behind the ticks' group commits (under load those took seconds, and a runner that saw a
    # joiner late went on stepping worlds that were no longer its share).
    registry_catalog = open_local_authority(config.data, synchronous=config.synchronous)
    registry = RunnerRegistry(registry_catalog, config.runner_id, serve_instance(config.data), lease_ms)
    try:
        await registry.join()
    except RunnerBusyError:
        await runtime.close()
        await registry_catalog.close()
        raise
    set_up_modules(runtime, modules)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    world_runner = WorldRunner(runtime, catalog, metrics, config.tick_rate, registry=registry)
    beat_s = config.world_lease / 3
    tasks = [
        asyncio.create_task(reporter.expose(metrics, stop)),
        asyncio.create_task(world_runner.run(stop)),
        asyncio.create_task(world_runner.heartbeat(stop, beat_s)),
        asyncio.create_task(singleton_duties(
            runners, stop, beat_s, lambda: runtime.audit.run_forever(stop),
            lambda: run_retention(authority, RetentionPolicy.of(config), stop, config.prune_interval),
        )),
    ]  # fmt: skip
    try:
        await stop.wait()
        for task in tasks:
            await task
    finally:
        await runtime.close()
        await registry_catalog.close()
        runners.close()
