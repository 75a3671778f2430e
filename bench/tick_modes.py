"""How `archetype serve`'s runner loop steps a world in each tick mode (docs/ledger.md, "Tick modes"),
beside a loop of in-process `Step`s on the same catalog, measured in the same run:

- a processor slower than the interval: lockstep runs every tick, back to back, and reports its
  lag; realtime coalesces the ticks it was late for (gaps in its manifests);
- a fast processor: both keep the interval's pace;
- lockstep with interval 0 (batch): ticks per second through the runner loop, against the `Step`
  loop (no runner: the ceiling of one world's ticks on this machine).

    .venv/bin/python bench/tick_modes.py [--seconds 5] [--slow-ms 150] [--interval-ms 100]

Prints one Markdown table for docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import tempfile
import time
from typing import Any

from archetype.commands import DurableOptions
from archetype.metrics import Metrics
from archetype.runtime import Runtime
from archetype.world import AsyncWorld, Component, CreateWorld, Spawn, Step
from archetype.world_runner import WorldRunner


class Counter(Component):
    n: int


async def run(mode: str, interval_ms: int, work_ms: int, seconds: float, *, by_hand: bool = False) -> dict[str, Any]:
    """One world with one counting processor taking `work_ms` a tick, stepped for `seconds`."""
    with tempfile.TemporaryDirectory() as directory:
        rt = await Runtime.open_local(directory, audit=None, owner="bench")

        def count(world: AsyncWorld, tick: int, entity_id: int, components: tuple[Counter]) -> None:
            if work_ms:
                time.sleep(work_ms / 1000)
            world.update(entity_id, [Counter(n=components[0].n + 1)])

        rt.worlds.on_load.append(lambda world: world.add_processor(count, Counter))
        await rt.dispatcher.apply(CreateWorld(name="w", world_id="w", tick_mode=mode, tick_interval_ms=interval_ms))  # type: ignore[arg-type]
        await rt.dispatcher.defer(Spawn(world_id="w", components=[Counter(n=0)]), DurableOptions(tick=0))
        started = time.perf_counter()
        if by_hand:
            while time.perf_counter() - started < seconds:
                await rt.dispatcher.apply(Step(world_id="w"))
        else:
            runner = WorldRunner(rt, rt.authority, Metrics(), tick_rate=10)  # type: ignore[arg-type]
            runner.ticking.add("w")
            stop = asyncio.Event()
            task = asyncio.create_task(runner.run(stop))
            await asyncio.sleep(seconds)
            stop.set()
            await task
        elapsed = time.perf_counter() - started
        info = await rt.authority.world_info("w")
        ticks = [m["tick"] for m in await rt.authority.manifests("w", limit=1_000_000)]
        await rt.close()
        return {
            "steps_per_s": len(ticks) / elapsed,
            "head": info["tick_head"],
            "gaps": sum(1 for a, b in zip(ticks, ticks[1:], strict=False) if b != a + 1),
            "lag_ms": info["tick_lag_ms"] if mode == "lockstep" else None,
        }


async def main(args: argparse.Namespace) -> None:
    interval, slow, seconds = args.interval_ms, args.slow_ms, args.seconds
    cases = [
        (f"lockstep, {interval} ms, processor {slow} ms", "lockstep", interval, slow, False),
        (f"realtime, {interval} ms, processor {slow} ms", "realtime", interval, slow, False),
        (f"lockstep, {interval} ms, processor 0 ms", "lockstep", interval, 0, False),
        (f"realtime, {interval} ms, processor 0 ms", "realtime", interval, 0, False),
        ("lockstep, 0 ms (batch), processor 0 ms", "lockstep", 0, 0, False),
        ("baseline: a loop of `Step` (no runner), processor 0 ms", "lockstep", 0, 0, True),
    ]
    print(f"`.venv/bin/python bench/tick_modes.py --seconds {seconds:g} --slow-ms {slow} --interval-ms {interval}`; "
          f"Python {platform.python_version()}, load {os.getloadavg()[0]:.1f} at the start\n")  # fmt: skip
    print("| world | steps/s | tick head | gaps in the manifests | lag at the end |")
    print("|---|---|---|---|---|")
    for label, mode, interval_ms, work_ms, by_hand in cases:
        got = await run(mode, interval_ms, work_ms, seconds, by_hand=by_hand)
        lag = "-" if got["lag_ms"] is None else f"{got['lag_ms']:,} ms"
        print(f"| {label} | {got['steps_per_s']:.1f} | {got['head']} | {got['gaps']} | {lag} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--slow-ms", type=int, default=150)
    parser.add_argument("--interval-ms", type=int, default=100)
    asyncio.run(main(parser.parse_args()))
