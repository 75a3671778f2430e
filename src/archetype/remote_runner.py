"""`archetype runner`: a remote runner, stepping its share of a server's worlds over HTTP (CPython only).

It runs serve's own `WorldRunner` over the HTTP authority (the runner protocol, an operator token):
it registers in the server's runner registry beside the server's own runners, reads the due worlds
and the live runners from it every pass, and steps the worlds `host_of` names it for under world
leases. When a runner joins or dies the shares move (a dead one's world leases expire, then they
are taken over, fenced by the writer epoch). A restart with the same `--runner-id` on the same host
resumes its registration and its world leases at once, without an epoch bump.

SIGTERM or SIGINT stops it cleanly: it leaves the registry, finishes the tick in progress, gives
its world leases back and releases its command leases, so the other runners take over at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import signal
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import httpx

from archetype.commands.ledger import RUNNER_ID_PATTERN
from archetype.data_directory import hold_lock
from archetype.metrics import Metrics, ObservedAuthority, configure_logging
from archetype.modules import import_modules, set_up_modules
from archetype.remote import HttpAuthority
from archetype.runner_registry import RunnerBusyError, RunnerRegistry
from archetype.runtime import Runtime
from archetype.settings import ConfigurationError, RunnerSettings
from archetype.world_runner import WorldRunner

log = logging.getLogger("archetype.runner")


def runner_instance() -> str:
    """Where a remote runner runs, as the runner registry tells a restart from another process: the
    same host is the same runner restarted (`hold_runner_id` refuses a second live one there)."""
    return f"runner@{socket.gethostname()}"


@contextlib.contextmanager
def hold_runner_id(url: str, runner_id: str) -> Iterator[None]:
    """Hold this runner id for this server on this host for the life of the process. The registry
    takes a restart on the same host for the same runner, so it cannot refuse a second live process
    of the same id here: this lock does, at once (the OS drops it however the process dies)."""
    digest = hashlib.blake2b(f"{url.rstrip('/')}\0{runner_id}".encode(), digest_size=8).hexdigest()
    handle = hold_lock(Path(tempfile.gettempdir()) / f"archetype-runner-{digest}.lock")
    if handle is None:
        raise RunnerBusyError(f"runner {runner_id!r} of {url} already runs on this host; give this one another --runner-id")
    try:
        yield
    finally:
        handle.close()


def read_token(path: Path) -> str:
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise ConfigurationError(f"--token-file {path}: {exc.strerror}; give the path of a file holding an operator token") from None
    if not token:
        raise ConfigurationError(f"--token-file {path} is empty; put an operator token in it")
    return token


async def run_remote(config: RunnerSettings) -> None:
    """Check every setting, join the registry (or refuse with one line), then step until stopped."""
    configure_logging(config.log_level, config.log_format)
    token = read_token(config.token_file)
    modules = import_modules(config.modules)
    runner_id = config.runner_id or runner_instance()
    if not RUNNER_ID_PATTERN.fullmatch(runner_id):
        raise ConfigurationError(f"--runner-id {runner_id!r} must match {RUNNER_ID_PATTERN.pattern}")
    with hold_runner_id(config.url, runner_id):
        await _run(config, runner_id, token, modules)


async def _run(config: RunnerSettings, runner_id: str, token: str, modules: list[ModuleType]) -> None:
    lease_ms = round(config.world_lease * 1000)
    http = HttpAuthority(config.url, token=token)
    metrics = Metrics(0)
    runtime = Runtime(ObservedAuthority(http, metrics), owner=runner_id, world_lease_ms=lease_ms)
    registry = RunnerRegistry(http, runner_id, runner_instance(), lease_ms)
    try:
        await registry.join()
    except httpx.TransportError as exc:
        await runtime.close()
        raise ConfigurationError(f"--url {config.url}: cannot reach it ({exc}); start archetype serve or fix the URL") from None
    except BaseException:
        await runtime.close()
        raise
    set_up_modules(runtime, modules)
    world_runner = WorldRunner(runtime, http, metrics, config.tick_rate, registry=registry)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(json.dumps({"running": runner_id, "url": config.url}), flush=True)
    tasks = [asyncio.create_task(world_runner.run(stop)),
             asyncio.create_task(world_runner.heartbeat(stop, config.world_lease / 3))]  # fmt: skip
    await stop.wait()
    for task in tasks:
        await task
    await runtime.close()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.remove_signal_handler(sig)
    ticks = sum(s.value for m in metrics.ticks.collect() for s in m.samples if s.name == "archetype_ticks_total")
    takeovers = metrics.registry.get_sample_value("archetype_lease_takeovers_total") or 0
    print(json.dumps({"stopped": True, "ticks": int(ticks), "takeovers": int(takeovers)}), flush=True)
