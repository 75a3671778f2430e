"""SQL billing units per command lifecycle on the Durable Object port (admit -> lease -> publish,
then the alarm's audit delivery), measured through the cursors' `rowsRead`/`rowsWritten`.

Runs the real Runtime and WorldObject on the Durable Object stand-in (tests/support), with every
`ctx.storage.sql.exec` cursor metered per RPC method. The baseline, measured in the same run, is
a tick carrying ONE command; the batched rows show what a tick of BATCH commands costs per command.

    .venv/bin/python bench/durable_object_billing.py [--batch 100] [--ticks 5]

Caveat (see the stand-in's docstring): rowsWritten counts table rows, not the index rows Cloudflare
also bills, and rowsRead counts rows returned + written, not rows scanned.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the stand-in lives in tests/support

from archetype.commands import DeferredItem, DurableOptions
from archetype.commands.port import ManualClock
from archetype.runtime import Runtime
from archetype.world import Component, CreateWorld, Spawn, Step
from durable_world import DurableObjectAuthority
from tests.support.durable_object_standin import world_namespace

WORLD = "bench-world"


class Position(Component):
    x: float
    y: float


class Meter:
    """Sums cursor figures per RPC method while the authority's calls run."""

    def __init__(self) -> None:
        self.totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])  # calls, statements, read, written
        self.current: str | None = None

    def wrap_sql(self, sql) -> None:
        exec_ = sql.exec

        def metered(query, *bindings):
            cursor = exec_(query, *bindings)
            if self.current is not None:
                figures = self.totals[self.current]
                figures[1] += 1
                figures[2] += int(cursor.rowsRead)
                figures[3] += int(cursor.rowsWritten)
            return cursor

        sql.exec = metered

    def wrap_authority(self, authority: DurableObjectAuthority) -> None:
        call = authority.rpc

        async def metered(method, arguments):
            self.current = method
            self.totals[method][0] += 1
            try:
                return await call(method, arguments)
            finally:
                self.current = None

        authority.rpc = metered

    def reset(self) -> None:
        self.totals.clear()


async def measure(batch: int, ticks: int) -> dict[str, dict[str, list[int]]]:
    with tempfile.TemporaryDirectory() as directory:
        clock = ManualClock()
        namespace = world_namespace(Path(directory), clock)
        authority = DurableObjectAuthority(namespace)
        meter = Meter()
        meter.wrap_sql(namespace.storage(WORLD).sql)
        meter.wrap_authority(authority)
        rt = Runtime(authority, owner="bench-runner", lease_ms=30_000, origin="gateway")
        await rt.dispatcher.apply(CreateWorld(name="bench", world_id=WORLD))
        await rt.dispatcher.apply(Step(world_id=WORLD))  # load the world once: steady state from here
        phases: dict[str, dict[str, list[int]]] = {}
        for phase in ("admit", "step", "deliver"):
            phases[phase] = defaultdict(lambda: [0, 0, 0, 0])
        for tick in range(1, ticks + 1):
            items = [
                DeferredItem(op=Spawn(world_id=WORLD, components=[Position(x=i, y=tick)]),
                             options=DurableOptions(tick=tick), command_id=f"t{tick}-c{i}")
                for i in range(batch)
            ]  # fmt: skip
            for phase, run in (
                ("admit", lambda: rt.dispatcher.defer_batch(items)),  # noqa: B023 - called in this iteration
                ("step", lambda: rt.dispatcher.apply(Step(world_id=WORLD))),
                ("deliver", lambda: _deliver(namespace, meter)),
            ):
                meter.reset()
                await run()
                for method, figures in meter.totals.items():
                    phases[phase][method] = [a + b for a, b in zip(phases[phase][method], figures, strict=True)]
            clock.advance(1_000)
        applied = sum(1 for r in await rt.scheduler.history(WORLD, limit=10_000) if r.status.value == "APPLIED")
        assert applied == batch * ticks, f"{applied} applied, expected {batch * ticks}"
        namespace.close()
        return phases


async def _deliver(namespace, meter: Meter) -> None:
    meter.current = "alarm"
    meter.totals["alarm"][0] += 1
    try:
        await namespace.run_alarm(WORLD)
    finally:
        meter.current = None


def report(label: str, phases, commands: int) -> tuple[float, float, float]:
    print(f"\n{label}: {commands} commands")
    print(f"  {'phase':<8} {'method':<20} {'calls':>6} {'stmts':>7} {'rows read':>10} {'rows written':>13}")
    per_command = [0, 0, 0]
    for phase, methods in phases.items():
        for method, (calls, statements, read, written) in sorted(methods.items()):
            print(f"  {phase:<8} {method:<20} {calls:>6} {statements:>7} {read:>10} {written:>13}")
            per_command = [per_command[0] + statements, per_command[1] + read, per_command[2] + written]
    statements, read, written = (value / commands for value in per_command)
    print(f"  per command lifecycle: {statements:.2f} statements, {read:.2f} rows read, {written:.2f} rows written")
    return statements, read, written


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=100, help="commands per tick in the batched run")
    parser.add_argument("--ticks", type=int, default=5)
    args = parser.parse_args()
    baseline = report("baseline (1 command per tick)", await measure(1, args.ticks), args.ticks)
    batched_phases = await measure(args.batch, args.ticks)
    batched = report(f"batched ({args.batch} commands per tick)", batched_phases, args.batch * args.ticks)
    ratios = zip(("statements", "rows read", "rows written"), baseline, batched, strict=True)
    print("\nbatched / baseline per command: " + ", ".join(f"{name} x{b / a:.3f}" for name, a, b in ratios))


if __name__ == "__main__":
    asyncio.run(main())
