"""Durable Object SQL rows written per tick of an EDGE-HOSTED world (the object's alarm runs the
tick and the audit delivery), idle, with 1 command and with 100 commands per tick.

Runs the real `WorldObject` on the Durable Object stand-in (tests/support) with the module hook's
game module (a processor moving every entity), summing every SQL cursor's `rowsWritten`, with the
object's SQL on the stand-in's engine and on the real Durable Object SQL engine (workerd,
tests/support/workerd), whose count includes the index rows Cloudflare bills. The baseline,
measured in the same run, is the same world RUNNER-HOSTED: a CPython runner steps it through the
object's RPC, then the object's alarm delivers the audit events. Admission is not counted (it
costs the same either way).

    .venv/bin/python bench/edge_ticks.py [--ticks 5] [--engine standin|workerd|both]
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
from tests.support.workerd.engine import workerd_sql_engines

LOADS = (0, 1, 100)


class RowsWritten:
    """Sums the `rowsWritten` of every cursor the object's SQL answers."""

    def __init__(self, sql) -> None:
        self.total = 0
        exec_ = sql.exec

        def metered(query, *bindings):
            cursor = exec_(query, *bindings)
            self.total += int(cursor.rowsWritten)
            return cursor

        sql.exec = metered


async def measure(world_id: str, commands: int, ticks: int, engine: str) -> float:
    """Rows written per tick, averaged over `ticks` steady-state ticks."""
    with tempfile.TemporaryDirectory() as directory:
        clock = ManualClock()
        sql_engine = workerd_sql_engines() if engine == "workerd" else None
        namespace = world_namespace(Path(directory), clock, modules=(game,), sql_engine=sql_engine)
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
        meter = RowsWritten(namespace.storage(world_id).sql)
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
            before = meter.total
            await tick()
            written += meter.total - before
        head = (await authority.world_info(world_id))["tick_head"]
        assert head == ticks, f"tick head {head}, expected {ticks}"
        namespace.close()
        return written / ticks


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=5)
    parser.add_argument("--engine", choices=("standin", "workerd", "both"), default="both")
    args = parser.parse_args()
    engines = ("standin", "workerd") if args.engine == "both" else (args.engine,)
    print(f"{'engine':<8} {'commands/tick':>13} {'edge-hosted rows written/tick':>30} {'runner-hosted (baseline)':>25} "
          f"{'ratio':>6}")  # fmt: skip
    for engine in engines:
        for commands in LOADS:
            edge = await measure("edge-bench", commands, args.ticks, engine)
            runner = await measure("w-bench", commands, args.ticks, engine)
            print(f"{engine:<8} {commands:>13} {edge:>30.1f} {runner:>25.1f} {edge / runner:>6.2f}")


if __name__ == "__main__":
    asyncio.run(main())
