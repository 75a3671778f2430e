"""Durable Object SQL rows written per tick of an EDGE-HOSTED world (the object's alarm runs the
tick and the audit delivery), idle, with 1 command and with 100 commands per tick.

Runs the real `WorldObject` on the Durable Object stand-in (tests/support) with the module hook's
game module (a processor moving every entity). The baseline, measured in the same run, is the same
world RUNNER-HOSTED: a CPython runner steps it through the object's RPC, then the object's alarm
delivers the audit events. Admission is not counted (it costs the same either way).

    .venv/bin/python bench/edge_ticks.py [--ticks 5]

Caveat (see the stand-in's docstring): rowsWritten counts table rows, not the index rows
Cloudflare also bills.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the stand-in and the game live in tests/

from archetype.commands import DeferredItem, DurableOptions
from archetype.commands.port import ManualClock
from archetype.runtime import Runtime
from archetype.world import CreateWorld, Spawn
from durable_world import DurableObjectAuthority
from tests.component_modules.alpha import Position, Velocity
from tests.server import game
from tests.support.durable_object_standin import world_namespace

LOADS = (0, 1, 100)


async def measure(world_id: str, commands: int, ticks: int) -> float:
    """Rows written per tick, averaged over `ticks` steady-state ticks."""
    with tempfile.TemporaryDirectory() as directory:
        clock = ManualClock()
        namespace = world_namespace(Path(directory), clock, modules=(game,))
        authority = DurableObjectAuthority(namespace)
        admitter = Runtime(authority, owner="gateway", origin="gateway")
        runner = Runtime(authority, owner="bench-runner")
        game.setup(runner)  # type: ignore[arg-type]  # a Runtime is what serve hands setup()
        edge = game.edge_hosted(world_id)
        await admitter.dispatcher.apply(CreateWorld(name="bench", world_id=world_id))

        async def tick() -> None:
            if not edge:
                await runner.worlds.step(world_id)
            await namespace.run_alarm(world_id)  # edge: the tick and the delivery; runner: the delivery

        await tick()  # load the world once: steady state from here
        sql = namespace.storage(world_id).sql
        written = 0
        for n in range(1, ticks + 1):
            if commands:
                items = [
                    DeferredItem(op=Spawn(world_id=world_id, components=[Position(x=i, y=n), Velocity(dx=1, dy=0)]),
                                 options=DurableOptions(tick=n), command_id=f"t{n}-c{i}")
                    for i in range(commands)
                ]  # fmt: skip
                await admitter.dispatcher.defer_batch(items)
            clock.advance(1_000)
            before = sql.rows_written
            await tick()
            written += sql.rows_written - before
        head = (await authority.world_info(world_id))["tick_head"]
        assert head == ticks, f"tick head {head}, expected {ticks}"
        namespace.close()
        return written / ticks


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=5)
    args = parser.parse_args()
    print(f"{'commands/tick':>13} {'edge-hosted rows written/tick':>30} {'runner-hosted (baseline)':>25} {'ratio':>6}")
    for commands in LOADS:
        edge = await measure("edge-bench", commands, args.ticks)
        runner = await measure("w-bench", commands, args.ticks)
        print(f"{commands:>13} {edge:>30.1f} {runner:>25.1f} {edge / runner:>6.2f}")


if __name__ == "__main__":
    asyncio.run(main())
