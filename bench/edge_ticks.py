"""Durable Object SQL rows written per tick of an EDGE-HOSTED world (the object's alarm runs the
tick and the audit delivery), idle, with 1 command and with 100 commands per tick; and over the ten
tick intervals until a command due 10 ticks later runs in a world without processors.

Runs the real `WorldObject` on the Durable Object stand-in (tests/support) with the module hook's
game module (a processor moving every entity), summing every SQL cursor's `rowsWritten`, with the
object's SQL on the stand-in's engine and on the real Durable Object SQL engine (workerd,
tests/support/workerd), whose count includes the index rows Cloudflare bills. The baseline,
measured in the same run, is the same world RUNNER-HOSTED: a CPython runner steps it through the
object's RPC, then the object's alarm delivers the audit events. Admission is not counted (it
costs the same either way). The baseline of the later command is the same world stepped at every
interval (a processor that does nothing: what the alarm did for an open command before the shared
tick clock, archetype.commands.clock).

    .venv/bin/python bench/edge_ticks.py [--ticks 5] [--engine standin|workerd|both]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import types
from pathlib import Path

from do_meter import ENGINES, Meter, sql_engine

from archetype.commands import DeferredItem, DurableOptions
from archetype.commands.port import ManualClock
from archetype.runtime import Runtime
from archetype.world import CreateWorld, Spawn
from durable_world import DurableObjectAuthority
from tests.component_modules.alpha import Position, Velocity
from tests.server import game
from tests.support.durable_object_standin import world_namespace

LOADS = (0, 1, 100)


async def measure(world_id: str, commands: int, ticks: int, engine: str) -> dict[str, dict[str, float]]:
    """Per tick, averaged over `ticks` steady-state ticks: the figures of admitting its commands
    (`admit`: one batch) and of running it (`tick`: edge-hosted, the alarm's tick and delivery, one
    request; runner-hosted, the runner's step and the alarm's delivery)."""
    with tempfile.TemporaryDirectory() as directory:
        clock = ManualClock()
        namespace = world_namespace(Path(directory), clock, modules=(game,), sql_engine=sql_engine(engine))
        authority = DurableObjectAuthority(namespace)
        admitter = Runtime(authority, owner="gateway", origin="gateway")
        runner = Runtime(authority, owner="bench-runner")
        game.setup(runner)  # type: ignore[arg-type]  # a Runtime is what serve hands setup()
        edge = game.edge_hosted(world_id)
        await admitter.dispatcher.apply(CreateWorld(name="bench", world_id=world_id, tick_mode="realtime", tick_interval_ms=1_000))

        async def tick() -> None:
            if not edge:
                await runner.worlds.step(world_id)
            await namespace.run_alarm(world_id)  # edge: the tick and the delivery; runner: the delivery

        clock.advance(1_000)  # tick 0 is due one interval after the creation
        await tick()  # load the world once: steady state from here
        meter = Meter()
        meter.wrap_storage(namespace.storage(world_id))
        for n in range(1, ticks + 1):
            if commands:
                items = [
                    DeferredItem(op=Spawn(world_id=world_id, components=[Position(x=i, y=n), Velocity(dx=1, dy=0)]),
                                 options=DurableOptions(tick=n), command_id=f"t{n}-c{i}")
                    for i in range(commands)
                ]  # fmt: skip
                with meter.part("admit"):
                    await admitter.dispatcher.defer_batch(items)
            clock.advance(1_000)
            with meter.part("tick"):
                await tick()
        head = (await authority.world_info(world_id))["tick_head"]
        assert head == ticks, f"tick head {head}, expected {ticks}"
        namespace.close()
        return {part: figures.per(ticks) for part, figures in meter.totals.items()}


def world_module(name: str, processor: bool) -> types.ModuleType:
    """A user's module hosting every world at the edge, with a processor that does nothing or none."""
    module = types.ModuleType(name)
    module.edge_hosted = lambda world_id: True  # type: ignore[attr-defined]
    if processor:
        module.setup = lambda rt: rt.worlds.on_load.append(lambda w: w.add_processor(lambda *_: None, Position))  # type: ignore[attr-defined]
    return module


async def measure_later(engine: str, every_interval: bool, later: int = 10) -> tuple[float, int]:
    """Rows written, and manifests published, over the `later` intervals from admitting one command
    due `later` ticks on to its tick (alarms fire at their times; audit delivery included)."""
    with tempfile.TemporaryDirectory() as directory:
        clock = ManualClock()
        module = world_module("bench_later", processor=every_interval)
        namespace = world_namespace(Path(directory), clock, modules=(module,), sql_engine=sql_engine(engine))
        authority = DurableObjectAuthority(namespace)
        admitter = Runtime(authority, owner="gateway", origin="gateway")
        world_id = "later-bench"
        await admitter.dispatcher.apply(CreateWorld(name="bench", world_id=world_id, tick_mode="realtime", tick_interval_ms=1_000))
        op = Spawn(world_id=world_id, components=[Position(x=0, y=0)])
        await admitter.dispatcher.defer(op, DurableOptions(tick=0), command_id="warm")
        clock.advance(1_000)
        await namespace.run_alarm(world_id)  # tick 0 loads the world
        while (at := namespace.alarm_time(world_id)) is not None and at <= clock.now_ms():
            await namespace.run_alarm(world_id)  # the warm-up's delivery: steady state from here
        meter = Meter()
        meter.wrap_storage(namespace.storage(world_id))
        ticks_before = len(await authority.manifests(world_id, limit=1000))
        end = clock.now_ms() + later * 1_000
        with meter.part("later"):
            await admitter.dispatcher.defer(op, DurableOptions(tick=later), command_id="later")
            while (at := namespace.alarm_time(world_id)) is not None and at <= end:
                clock.advance(max(0, at - clock.now_ms()))
                await namespace.run_alarm(world_id)
        assert (await admitter.scheduler.command(world_id, "later")).status == "APPLIED"
        published = len(await authority.manifests(world_id, limit=1000)) - ticks_before
        namespace.close()
        return meter.total().rows_written, published


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=5)
    parser.add_argument("--engine", choices=(*ENGINES, "both"), default="both")
    args = parser.parse_args()
    engines = ENGINES if args.engine == "both" else (args.engine,)
    print(f"{'engine':<8} {'commands/tick':>13} {'edge-hosted rows written/tick':>30} {'runner-hosted (baseline)':>25} "
          f"{'ratio':>6}")  # fmt: skip
    for engine in engines:
        for commands in LOADS:
            edge = (await measure("edge-bench", commands, args.ticks, engine))["tick"]["rows_written"]
            runner = (await measure("w-bench", commands, args.ticks, engine))["tick"]["rows_written"]
            print(f"{engine:<8} {commands:>13} {edge:>30.1f} {runner:>25.1f} {edge / runner:>6.2f}")
    print(f"\n{'engine':<8} {'a command due 10 ticks later, no processors':>44} {'stepped every interval (baseline)':>34} "
          f"{'ratio':>6}")  # fmt: skip
    for engine in engines:
        rows, ticks = await measure_later(engine, every_interval=False)
        base_rows, base_ticks = await measure_later(engine, every_interval=True)
        print(f"{engine:<8} {f'{rows:.0f} rows, {ticks} manifest(s)':>44} {f'{base_rows:.0f} rows, {base_ticks} manifests':>34} "
              f"{rows / base_rows:>6.2f}")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
