"""`serve`'s stepping process (CPython only): this serve's runner, stepping the worlds with work
under the serve's runner id, started and watched by the HTTP process (archetype.stepper, which
says how the two talk)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Coroutine
from typing import IO, Any

from archetype.audit import AuditLog
from archetype.commands.port import StorageFault
from archetype.data_directory import Runners, serve_instance, singleton_duties
from archetype.metrics import Metrics, ObservedAuthority
from archetype.modules import import_modules, set_up_modules
from archetype.retention import RetentionPolicy, run_retention
from archetype.runner_registry import RunnerBusyError, RunnerRegistry
from archetype.runtime import Runtime
from archetype.settings import ServeSettings
from archetype.world_runner import WorldRunner
from local_catalog import open_local_authority
from local_catalog.writer import BacklogWorld, WriterThreadAuthority


async def step_worlds(config: ServeSettings, expose: Callable[[Metrics, asyncio.Event, Callable[[], StorageFault | None]],
                      Coroutine[Any, Any, None]], lock: IO[str]) -> None:  # fmt: skip
    """The stepping process (archetype.stepper): this serve's runner, under its runner id, whose
    lock it shares with the HTTP process (`lock`), reporting to it through `expose` (the channel's
    `Reporter.expose`, which sets `stop` when the HTTP process is gone); it stops on SIGTERM or
    SIGINT, or when the HTTP process is gone."""
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
    assert isinstance(registry_catalog, WriterThreadAuthority)
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
        asyncio.create_task(expose(metrics, stop, lambda: catalog.storage_fault() or registry_catalog.storage_fault())),
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

