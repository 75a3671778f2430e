"""The SIR epidemic of docs/guide/vectorised.md (5,000 agents) in its three variants, per-entity,
mixed (the walk vectorised, the infection per entity) and vectorised, beside the same model in
plain numpy without archetype, all in the same run.

    .venv/bin/python bench/sir_bench.py [--agents 5000] [--ticks 60] [--baseline-src DIR] [--no-record]

The model is the guide's own (its `python file=sir.py` and `file=sir_vector.py` blocks, written to
a temporary directory and imported), so the figures are those of the code the guide shows. Each world is
durable: the local authority in this process (synchronous=FULL), a catalog of its own. It is
populated and published at tick 0, then ticked `--ticks` times. Every round runs one tick of each
contestant in turn, so background load hits them all alike; a figure is ticks per second over the
whole run (ticks / the sum of their times, a `gc.collect()` before each), and the best tick. At the
end every contestant must hold the very state numpy holds, agent for agent, or the bench fails.

Also counted, per tick: the components built from numpy columns (archetype.vector's
`_Layout.build`: what a per-entity read of a column costs), the time in the world's processors, and
the time spent awaiting the authority's publication (the durable transaction, in the local
authority's writer thread); the rest of a tick is mostly encoding it.

`--baseline-src DIR` ticks the three worlds on another version of the code as well (a `src/`
tree, e.g. `git archive <commit> src | tar -x -C /tmp/base`), each in a process of its own (this
script with `--serve`), in the same rounds. The figures are printed and recorded in
docs/performance.md under their own heading (`--no-record`: printed only).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from perf_doc import PERFORMANCE_DOC, replace_section

from archetype.runtime import Runtime
from archetype.world import CreateWorld
from local_catalog import open_local_authority

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guide" / "vectorised.md"
HEADING = "## The SIR epidemic: per-entity, mixed and vectorised (bench/sir_bench.py, issue 22)"
TARGET_SPEEDUP = 10.0  # vectorised ticks/s over per-entity ticks/s
VARIANTS = ("per-entity", "mixed", "vectorised")


def load_model(directory: Path) -> tuple[ModuleType, ModuleType]:
    """The guide's `sir.py` and `sir_vector.py`, written and imported as the guide's test does."""
    text = GUIDE.read_text()
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("sir.py", "sir_vector.py"):
        fence = f"```python file={name}\n"
        start = text.index(fence) + len(fence)
        (directory / name).write_text(text[start : text.index("\n```", start) + 1])
    sys.path.insert(0, str(directory))
    return importlib.import_module("sir"), importlib.import_module("sir_vector")


class Builds:
    """Counts the components archetype.vector builds from columns (0 where it has no such step)."""

    def __init__(self) -> None:
        self.count = 0
        try:
            from archetype.vector import _Layout
        except ImportError:
            return
        build = _Layout.build

        def counted(layout: Any, values: dict[str, Any]) -> Any:
            self.count += 1
            return build(layout, values)

        _Layout.build = counted  # type: ignore[method-assign]


class World:
    """One variant of the model in a durable world of its own."""

    def __init__(self, model: tuple[ModuleType, ModuleType], variant: str, builds: Builds) -> None:
        (self.sir, self.sir_vector), self.variant, self.builds = model, variant, builds
        self.processors = 0.0  # seconds in the world's processors, over the timed ticks
        self.publishing = 0.0  # seconds awaiting the authority's publication, over the timed ticks

    async def open(self, directory: Path, agents: int) -> World:
        self.runtime = Runtime(open_local_authority(directory, synchronous="FULL"), owner=f"sir-{self.variant}")
        world_id = await self.runtime.dispatcher.apply(CreateWorld(name="sir", world_id="sir"))
        world = self.world = await self.runtime.worlds.get(world_id)
        await self.sir.populate(world, agents)
        await world.step()
        self.sir_vector.install(world, self.variant)
        run = world._run_systems

        def timed(tick: int) -> None:
            start = time.perf_counter()
            run(tick)
            self.processors += time.perf_counter() - start

        world._run_systems = timed  # type: ignore[method-assign]
        publish = world.publisher.publish

        async def published(prepared: Any) -> None:
            start = time.perf_counter()
            await publish(prepared)
            self.publishing += time.perf_counter() - start

        world.publisher.publish = published  # type: ignore[method-assign]
        return self

    async def tick(self) -> tuple[float, int]:
        """One tick: its seconds and the components built from columns in it."""
        gc.collect()
        before = self.builds.count
        start = time.perf_counter()
        await self.world.step()
        return time.perf_counter() - start, self.builds.count - before

    def state(self) -> list[list[int]]:
        """[id, state, since, x, y] of every agent, by id."""
        return [[e, h.state, h.since, p.x, p.y] for e, (h, p) in self.world.query(self.sir.Health, self.sir.Position)]

    async def close(self) -> None:
        await self.runtime.close()


class NumpyModel:
    """The model in numpy alone: one array per field, every agent in id order, no world."""

    def __init__(self, sir: ModuleType, agents: list[list[int]]) -> None:
        self.sir = sir
        self.ids, self.state, self.since, self.x, self.y = (
            np.array(column, dtype=np.int64) for column in zip(*agents, strict=True)
        )

    def tick(self, tick: int) -> None:
        sir = self.sir
        cells = self.x * sir.SIDE + self.y
        sick = self.state == sir.I
        catches = (self.state == sir.S) & np.isin(cells, cells[sick]) & (sir.draw(self.ids, tick, 0) < sir.CHANCE)
        recovers = sick & (tick - self.since >= sir.RECOVERY)
        self.state[catches] = sir.I
        self.state[recovers] = sir.R
        self.since[catches | recovers] = tick
        self.x = (self.x + sir.draw(self.ids, tick, 1) % 3 - 1) % sir.SIDE
        self.y = (self.y + sir.draw(self.ids, tick, 2) % 3 - 1) % sir.SIDE

    def rows(self) -> list[list[int]]:
        return np.stack([self.ids, self.state, self.since, self.x, self.y], axis=1).tolist()


class Elsewhere:
    """A variant ticked by another version of the code, in a process of its own (`--serve`)."""

    def __init__(self, src: Path, variant: str, agents: int, directory: Path) -> None:
        env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{ROOT / 'bench'}"}
        command = [sys.executable, __file__, "--serve", variant, "--agents", str(agents), "--directory", str(directory)]
        self.process = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdin is not None and self.process.stdout is not None
        self.stdin, self.stdout = self.process.stdin, self.process.stdout
        if self.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the baseline's {variant} world did not start")

    def ask(self, request: str) -> str:
        self.stdin.write(request + "\n")
        self.stdin.flush()
        return self.stdout.readline()

    def tick(self) -> tuple[float, int]:
        seconds, builds = self.ask("tick").split()
        return float(seconds), int(builds)

    def state(self) -> list[list[int]]:
        return json.loads(self.ask("state"))

    def close(self) -> None:
        self.ask("quit")
        self.process.wait(timeout=60)


async def serve(variant: str, agents: int, directory: Path) -> None:
    """`--serve`: one variant's world in this process, ticked on request (Elsewhere's other end)."""
    with tempfile.TemporaryDirectory(prefix="archetype-sir-model-") as scratch:
        world = await World(load_model(Path(scratch)), variant, Builds()).open(directory, agents)
        print("ready", flush=True)
        for line in sys.stdin:
            if line.strip() == "tick":
                seconds, builds = await world.tick()
                print(seconds, builds, flush=True)
            elif line.strip() == "state":
                print(json.dumps(world.state()), flush=True)
            else:
                print("bye", flush=True)
                break
        await world.close()


class Tally:
    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.builds = 0

    def add(self, seconds: float, builds: int = 0) -> None:
        self.seconds.append(seconds)
        self.builds += builds

    @property
    def per_s(self) -> float:
        return len(self.seconds) / sum(self.seconds)


async def run(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    model = load_model(directory / "model")
    sir, _ = model
    builds = Builds()
    worlds = {v: await World(model, v, builds).open(directory / v, args.agents) for v in VARIANTS}
    numpy_model = NumpyModel(sir, worlds["per-entity"].state())
    elsewhere = {}
    if args.baseline_src is not None:
        elsewhere = {
            f"before: {v}": Elsewhere(args.baseline_src, v, args.agents, directory / f"before-{v}") for v in VARIANTS
        }
    tallies = {name: Tally() for name in [*VARIANTS, "numpy alone", *elsewhere]}
    first = worlds["per-entity"].world.tick + 1
    for tick in range(first, first + args.ticks):
        for variant, world in worlds.items():
            tallies[variant].add(*await world.tick())
        for name, process in elsewhere.items():
            tallies[name].add(*process.tick())
        gc.collect()
        start = time.perf_counter()
        numpy_model.tick(tick)
        tallies["numpy alone"].add(time.perf_counter() - start)
    expected = numpy_model.rows()
    for name, held in [*((v, w.state()) for v, w in worlds.items()), *((n, p.state()) for n, p in elsewhere.items())]:
        if held != expected:
            raise SystemExit(f"{name} does not hold the state numpy holds after {args.ticks} ticks")
    counts = [sum(row[1] == state for row in expected) for state in (sir.S, sir.I, sir.R)]
    processors = {v: (w.processors / args.ticks, w.publishing / args.ticks) for v, w in worlds.items()}
    for world in worlds.values():
        await world.close()
    for process in elsewhere.values():
        process.close()
    return {"tallies": tallies, "processors": processors, "sir": counts}


def report(args: argparse.Namespace, result: dict[str, Any]) -> list[str]:
    tallies: dict[str, Tally] = result["tallies"]
    base = tallies["per-entity"].per_s
    speedup = tallies["vectorised"].per_s / base
    s, i, r = result["sir"]
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        HEADING,
        "",
        f"`.venv/bin/python bench/sir_bench.py --agents {args.agents} --ticks {args.ticks}"
        f"{' --baseline-src <src>' if args.baseline_src else ''}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{platform.machine()}, Python {platform.python_version()}, load average at the end {load}). "
        f"{args.agents:,} agents of the guide's model (docs/guide/vectorised.md), durable (local authority, in "
        f"process, FULL), {args.ticks} interleaved ticks each; after them S/I/R = {s:,} / {i:,} / {r:,}, and every "
        "world held numpy's state agent for agent.",
        "",
        "| contestant | ticks/s | best tick | x per-entity | processors / publication per tick "
        "| components built from columns per tick |",
        "|---|---|---|---|---|---|",
    ]
    for name, tally in tallies.items():
        phases = result["processors"].get(name)
        lines.append(
            f"| {name} | {tally.per_s:,.1f} | {min(tally.seconds) * 1000:.2f} ms | {tally.per_s / base:.1f}x | "
            f"{'' if phases is None else f'{phases[0] * 1000:.1f} / {phases[1] * 1000:.1f} ms'} | "
            f"{'' if name == 'numpy alone' else f'{tally.builds / len(tally.seconds):,.0f}'} |"
        )
    verdict = "met" if speedup >= TARGET_SPEEDUP else "**missed**"
    best = min(tallies["per-entity"].seconds) / min(tallies["vectorised"].seconds)
    lines += [
        "",
        f"Target: vectorised >= {TARGET_SPEEDUP:.0f}x the per-entity ticks/s: {speedup:.1f}x, {verdict} "
        f"(best tick against best tick: {best:.1f}x).",
        "",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=5000)
    parser.add_argument("--ticks", type=int, default=60)
    parser.add_argument("--baseline-src", type=Path, help="a src/ tree of the code to compare against")
    parser.add_argument("--no-record", action="store_true", help="print only; leave docs/performance.md alone")
    parser.add_argument("--serve", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--directory", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve, args.agents, args.directory))
        return
    with tempfile.TemporaryDirectory(prefix="archetype-sir-") as tmp:
        result = asyncio.run(run(args, Path(tmp)))
    lines = report(args, result)
    print("\n".join(lines))
    if not args.no_record:
        replace_section(HEADING, lines)
        print(f"recorded under {HEADING!r} in {PERFORMANCE_DOC.relative_to(ROOT)}")
    if result["tallies"]["vectorised"].per_s < TARGET_SPEEDUP * result["tallies"]["per-entity"].per_s:
        sys.exit(1)


if __name__ == "__main__":
    main()
