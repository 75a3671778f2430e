"""What a fork costs on the Durable Object (docs/storage.md, "Forks on the Durable Object"): the
rows each step of the copy reads and writes (Cloudflare's billing units, bench/do_meter.py), per
page, for a fork at the head and at an old tick of a busy world.

    .venv/bin/python bench/fork_copy.py [--agents 5000] [--ticks 100] [--engine standin|workerd] [--no-record]

A world of `agents` SIR agents (bench/sir_world.py), spawned 5,000 a tick, runs `ticks` ticks on
the Durable Object stand-in (its SQL the stand-in's SQLite or workerd's engine: index rows
counted, as billed): a vectorised processor moves every Position each tick (a column delta
replacing the one before) and every 10th tick 1% of the agents change their Infection (a delta
that replaces nothing). Then it is forked at its head, at the tick before its last snapshot (the
most deltas) and at tick 0 (its first 5,000 agents), each fork metered per step: the source's
object (`fork_plan`, `fork_page`, `fork_release`) and the fork's (`fork_begin`, `fork_write`,
`fork_activate`). The figures are printed and recorded in docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from do_meter import Meter, sql_engine
from perf_doc import publish, run_line
from sir_world import WORLD, Infection, Position, Velocity, agent, move

from archetype.commands.port import SystemClock
from archetype.runtime import Runtime
from archetype.vector import add_vector_processor
from archetype.world import CreateWorld, ForkWorld
from durable_world import DurableObjectAuthority
from tests.support.durable_object_standin import world_namespace

HEADING = "## Forks on the Durable Object (bench/fork_copy.py, issue 23)"
SPAWN_BATCH = 5_000
STEPS = ("fork_begin", "fork_plan", "fork_page", "fork_write", "fork_activate", "fork_release")


async def run(args: argparse.Namespace, directory: Path) -> list[str]:
    namespace = world_namespace(directory, SystemClock(), sql_engine=sql_engine(args.engine))
    authority = DurableObjectAuthority(namespace)
    rt = Runtime(authority, owner="bench", lease_ms=60_000)
    await rt.dispatcher.apply(CreateWorld(name=WORLD, world_id=WORLD))
    world = await rt.worlds.get(WORLD)
    add_vector_processor(world, move, Position, Velocity, writes=[Position])
    await world.ensure_entity_ids(args.agents)
    ids: list[int] = []
    for first in range(0, args.agents, SPAWN_BATCH):  # one write holds at most 4 MB of state, a tick 16 MB
        async with world.lock:
            ids += world.atomically(lambda f=first: [world.spawn(agent(i)) for i in range(f, min(f + SPAWN_BATCH, args.agents))])
        await world.step()
    started = time.perf_counter()
    for tick in range(args.ticks):
        if tick % 10 == 9:
            async with world.lock:
                world.atomically(lambda t=tick: [world.update(e, [Infection(state="I", day=t)]) for e in ids[t % 100 :: 100]])
        await world.step()
    run_s = time.perf_counter() - started
    meter = Meter()
    meter.wrap_storage(namespace.storage(WORLD))
    call = authority._on_object
    copied: dict[str, list[int]] = {}  # part -> [rows, characters] the pages carried

    async def metered(method: str, **arguments: object) -> object:
        with meter.part(method):
            answer = await call(method, **arguments)
        if method == "fork_page":
            tally = copied.setdefault(answer["cursor"][0], [0, 0])
            tally[0] += len(answer["rows"])
            tally[1] += sum(len(value) for row in answer["rows"] for value in row if isinstance(value, str))
        return answer

    authority._on_object = metered  # type: ignore[method-assign]
    lines = [HEADING, "", run_line(time.time(), f"{args.agents:,} agents, {args.ticks} ticks ({run_s:.1f} s), "
                                                f"engine {args.engine}"), ""]  # fmt: skip
    lines += ["| fork at | step | calls | rows read | rows written | rows read per call | rows written per call | ms |",
              "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    # the tick before the last snapshot reads the most deltas (at most about a state's size of them)
    last_snapshot = namespace.storage(WORLD).sql.exec("SELECT max(tick) FROM state_snapshots").raw().next().value[0]
    forks = (("the head", world.tick), ("the tick before the last snapshot", int(last_snapshot) - 1),
             ("the first 5,000 agents", 0))  # fmt: skip
    carried = []
    for name, tick in forks:
        fork_id = f"fork-{tick}"
        meter.wrap_storage(namespace.storage(fork_id))
        meter.reset()
        copied.clear()
        t0 = time.perf_counter()
        await rt.dispatcher.apply(ForkWorld(world_id=WORLD, at_tick=tick, fork_world_id=fork_id, name=name))
        ms = (time.perf_counter() - t0) * 1000
        for step in STEPS:
            figures = meter.totals[step]
            lines.append(f"| {name} (tick {tick}) | `{step}` | {figures.calls} | {figures.rows_read:,} | "
                         f"{figures.rows_written:,} | {figures.rows_read / max(figures.calls, 1):,.0f} | "
                         f"{figures.rows_written / max(figures.calls, 1):,.0f} | |")  # fmt: skip
        total = meter.total()
        lines.append(f"| {name} (tick {tick}) | all | {total.calls} | {total.rows_read:,} | {total.rows_written:,} | | | "
                     f"{ms:.0f} |")  # fmt: skip
        carried.append((name, tick, dict(copied), meter.totals["fork_page"].calls))
    lines += ["", "| fork at | pages | snapshot rows | delta rows | frozen rows | MB copied |", "|---|---|---|---|---|---|"]
    for name, tick, parts, pages in carried:
        rows = {part: parts.get(part, [0, 0]) for part in ("snapshot", "deltas", "rows")}
        lines.append(f"| {name} (tick {tick}) | {pages} | {rows['snapshot'][0]} | {rows['deltas'][0]} | "
                     f"{rows['rows'][0]} | {sum(r[1] for r in rows.values()) / 1e6:.2f} |")  # fmt: skip
    namespace.close()
    return lines



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=5_000)
    parser.add_argument("--ticks", type=int, default=100)
    parser.add_argument("--engine", choices=("standin", "workerd"), default="standin")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        lines = asyncio.run(run(args, Path(root) / "objects"))
    publish(HEADING, lines, record=not args.no_record)


if __name__ == "__main__":
    main()
