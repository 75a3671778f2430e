"""`archetype serve`: the local authority and the shared HTTP application under uvicorn in one
process (this module: its settings checked, its socket, its token table, its app, its shutdown),
and a runner stepping the worlds that have work at a fixed tick rate in another, its stepping
process (archetype.stepper runs it, archetype.stepping is it; CPython only). Several serves, with
distinct runner ids, may share one data directory (archetype.data_directory), and remote runners
(`archetype runner`, archetype.remote_runner) may join them over HTTP: all of them register in the
ledger's runner registry and split the worlds under world leases (archetype.runner_registry,
archetype.world_runner; docs/cli.md, "Cooperating runners").

SIGTERM or SIGINT (to the serve process) shuts down in order: admission closes first (admitting
routes answer 503 `shutting_down`), the stepping process finishes its tick in progress and exits,
the HTTP server drains its connections, and the catalog closes. Nothing is left LEASED by a clean
shutdown, and its world leases are given back, so the other runners take its worlds over at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import json
import logging
import os
import secrets
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import uvicorn

from archetype.api import create_app
from archetype.api.app import HttpApp
from archetype.api.auth import TOKENS_ENV, TokenTable, TokenTableError
from archetype.audit import AuditLog
from archetype.commands.authority import Authority
from archetype.commands.port import StorageFault
from archetype.dashboard import mount_dashboard
from archetype.data_directory import Runners, hold_data_directory
from archetype.docs_ui import mount_docs
from archetype.http_protocol import HeadDeadline
from archetype.metrics import Metrics, ObservedAuthority, configure_logging, mount_metrics
from archetype.modules import import_modules
from archetype.settings import ConfigurationError, ServeSettings
from archetype.stepper import Stepper
from local_catalog import open_local_authority
from local_catalog.writer import WriterThreadAuthority

log = logging.getLogger("archetype.serve")
GC_YOUNG_THRESHOLD = 20_000


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


def serve_app(config: ServeSettings, authority: Authority, tokens: TokenTable, metrics: Metrics, audit: Any,
              storage_fault: Callable[[], StorageFault | None] | None = None) -> HttpApp:  # fmt: skip
    """The HTTP app `archetype serve` answers with: the shared app, with /docs, the dashboard and /metrics."""
    app = create_app(authority, tokens=tokens, quota=config.quota, audit=audit, body_timeout_s=config.body_timeout,
                     telemetry=config.telemetry, storage_fault=storage_fault)  # fmt: skip
    mount_docs(app)
    mount_dashboard(app)
    mount_metrics(app, metrics, log_requests=config.log_format == "json")
    return app


async def _serve(config: ServeSettings, runners: Runners, tokens: TokenTable, sock: socket.socket) -> None:
    """The HTTP process: the API over the catalog, with no world in memory; a stepping process
    (archetype.stepper) steps the worlds, so that a busy tick never delays an answer."""
    metrics = Metrics(config.metrics_worlds)
    catalog = open_local_authority(config.data, synchronous=config.synchronous)
    assert isinstance(catalog, WriterThreadAuthority)  # serve runs on CPython, which has threads
    authority = ObservedAuthority(catalog, metrics)
    audit = AuditLog.open_local(config.data, authority)  # GetAuditHistory reads it; the stepping process projects
    stepper = Stepper(config, runners.handle)
    # health: a write either process's catalog connection was refused, until one of its writes succeeds
    app = serve_app(config, authority, tokens, metrics, audit, lambda: catalog.storage_fault() or stepper.storage_fault)
    metrics.relay(stepper.latest_metrics)
    # JSON logs: uvicorn's loggers propagate to our formatter, and our access line replaces its own
    json_logs: dict[str, Any] = {"log_config": None, "access_log": False} if config.log_format == "json" else {}
    # uvicorn calls it like the class; the hot routes answered by the protocol itself (archetype.http_protocol)
    protocol: Any = functools.partial(HeadDeadline, head_timeout_s=config.body_timeout, hot_path=app.hot_path)
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
    # The youngest generation is collected every GC_YOUNG_THRESHOLD allocations instead of 700: each
    # collection walks what the requests in flight hold (32 admissions' scopes, tasks, models), and at
    # 700 that walk was 7% of the event loop's instructions per admission; objects that die before a
    # collection (nearly all of a request's) are never walked. Cycles wait a little longer, that is all.
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
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
