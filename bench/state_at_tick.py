"""Reading a world's state at a past tick against reading it at its head, and what retention keeps
for it (docs/storage.md, "State at a tick").

    .venv/bin/python bench/state_at_tick.py [--agents 5000] [--ticks 300] [--keep-ticks 100] [--rounds 7] [--no-record]

A durable world (the local catalog, FULL) of `agents` SIR agents (bench/sir_world.py: Position,
Velocity, Infection) runs `ticks` ticks in this process: a vectorised processor moves every
Position each tick (a column delta that replaces the one before), and every 10th tick 1% of the
agents change their Infection through the per-entity API (a delta that replaces nothing, so the
world snapshots once its deltas outgrow the state). Then:

1. storage: the rows and bytes of state the catalog holds for the world (`state_snapshots`,
   `state_deltas`), per retained tick, before and after `prune(keep_ticks)`;
2. reads: every page of `read_state` (pages of 10,000, sections, what `GET .../state` runs) at
   the head (the baseline) and at ticks 1, 10 and `keep_ticks - 1` before it, and at the oldest
   retained tick, `rounds` rounds, each phase once per round in turn; best and median ms and the
   ratio of the best to the head's best.
The figures are printed and recorded in docs/performance.md under their own heading.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from perf_doc import publish, run_line
from sir_world import WORLD, Infection, Position, Velocity, agent, move

from archetype.runtime import Runtime
from archetype.vector import add_vector_processor
from archetype.world import CreateWorld

HEADING = "## State at a tick (bench/state_at_tick.py, issue 23)"


def stored(catalog: Path) -> tuple[int, int, int]:
    """The world's state rows (snapshot chunks, delta chunks) and their bytes."""
    with sqlite3.connect(catalog) as db:
        found = [db.execute(f"SELECT count(*), coalesce(sum(length(body)), 0) FROM {table} WHERE world_id = ?",
                            (WORLD,)).fetchone() for table in ("state_snapshots", "state_deltas")]  # fmt: skip
    return found[0][0], found[1][0], found[0][1] + found[1][1]


async def run(args: argparse.Namespace, data: Path) -> list[str]:
    catalog = data / "catalog.sqlite3"
    async with await Runtime.open_local(data) as rt:
        world_id = await rt.dispatcher.apply(CreateWorld(name=WORLD, world_id=WORLD))
        world = await rt.worlds.get(world_id)
        add_vector_processor(world, move, Position, Velocity, writes=[Position])
        await world.ensure_entity_ids(args.agents)
        async with world.lock:
            ids = world.atomically(lambda: [world.spawn(agent(i)) for i in range(args.agents)])
        started = time.perf_counter()
        for tick in range(args.ticks):
            if tick % 10 == 9:
                async with world.lock:
                    world.atomically(lambda t=tick: [world.update(e, [Infection(state="I", day=t)])
                                                     for e in ids[t % 100 :: 100]])  # fmt: skip
            await world.step()
        run_s = time.perf_counter() - started
        head = world.tick
        authority = rt.authority

        async def read(tick: int | None) -> int:
            count, after = 0, 0
            while True:
                page = await authority.read_state(WORLD, after, 10_000, None, None, tick)
                count += sum(len(section["ids"]) for section in page["sections"])
                if page["next_after"] is None:
                    return count
                after = page["next_after"]

        before = stored(catalog)
        pruned = await authority.prune(WORLD, keep_ticks=args.keep_ticks)
        after = stored(catalog)
        oldest = head - args.keep_ticks + 1
        phases = {"the head (baseline)": None, "head - 1": head - 1, "head - 10": head - 10,
                  f"head - {args.keep_ticks - 1} (the oldest retained)": oldest}  # fmt: skip
        times: dict[str, list[float]] = {name: [] for name in phases}
        counts = {name: await read(tick) for name, tick in phases.items()}  # warm
        for _ in range(args.rounds):
            for name, tick in phases.items():
                gc.collect()
                t0 = time.perf_counter()
                await read(tick)
                times[name].append((time.perf_counter() - t0) * 1000)
    head_best = min(times["the head (baseline)"])
    lines = [
        HEADING,
        "",
        run_line(time.time(), f"{args.agents:,} agents, {args.ticks} ticks ({run_s:.1f} s), keep_ticks {args.keep_ticks}, "
                 f"{args.rounds} rounds"),  # fmt: skip
        "",
        "| state kept | snapshot rows | delta rows | MB | ticks retained | rows per tick | KB per tick |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, (snapshots, deltas, size), ticks in (("every tick so far (no prune)", before, head + 1),
                                                    (f"after `prune(keep_ticks={args.keep_ticks})`", after, args.keep_ticks)):  # fmt: skip
        rows = snapshots + deltas
        lines.append(f"| {name} | {snapshots:,} | {deltas:,} | {size / 1e6:.1f} | {ticks} | {rows / ticks:.2f} | "
                     f"{size / ticks / 1e3:.0f} |")  # fmt: skip
    lines += ["", f"The prune removed {pruned['state_rows']:,} state rows.", "",
              "| `read_state`, every page, at | entities | best ms | median ms | best / head's best |",
              "|---|---|---|---|---|"]  # fmt: skip
    for name in phases:
        lines.append(f"| {name} | {counts[name]:,} | {min(times[name]):.1f} | {statistics.median(times[name]):.1f} | "
                     f"{min(times[name]) / head_best:.2f}x |")  # fmt: skip
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=5_000)
    parser.add_argument("--ticks", type=int, default=300)
    parser.add_argument("--keep-ticks", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        lines = asyncio.run(run(args, Path(root) / "data"))
    publish(HEADING, lines, record=not args.no_record)


if __name__ == "__main__":
    main()
