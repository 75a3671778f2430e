"""The caller's side of durable admission: the CPU a command costs before the ledger sees it.

What is timed is everything `dispatcher.defer` / `defer_batch` / `defer_spawn` do in this process
(authorization, validation, the canonical payload, the identity checks, the schema recording
look-up), against a stand-in authority that answers at once, so no SQLite, thread hop or fsync is
in the figure. Each command is a Spawn of one `Position` (archetype.bench's), as in
bench/admission_bench.py.

Figures, microseconds of thread CPU per command, best round of `--rounds` (the contestants
interleaved within a round, so background load hits them alike):

- `payload_of`: the admission check of one operation (`OperationSpec.payload_of`), beside
  `payload_of_exhaustive`, the path through the registered decoder that the short cut is held to;
- `defer` (single), `defer_batch` (1,000 a batch), `defer_spawn` (single): through the dispatcher;
- with `--baseline-src DIR` (e.g. /work/main/src), the same figures of that tree, each round run
  in a child process beside this one's.

    .venv/bin/python bench/admission_validation.py [--rounds 5] [--commands 2000] [--baseline-src DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from archetype.bench import Position
from archetype.commands import DurableOptions
from archetype.commands.dispatcher import CommandDispatcher
from archetype.commands.families import default_registry
from archetype.commands.scheduler import CommandScheduler, DeferredItem
from archetype.world import Spawn

BATCH = 1_000
WORLD = "bench"


class InstantAuthority:
    """Answers admission's calls at once, as if every command were fresh."""

    def __init__(self) -> None:
        from archetype.commands.scheduler import schema_row

        self.sequence = 0
        self.recorded = [{**schema_row(Position), "recorded_at": 0, "superseded_by": None}]

    async def admit(self, world_id: str, commands: list[dict[str, Any]], quota: int | None = None) -> list[dict[str, Any]]:
        first, self.sequence = self.sequence, self.sequence + len(commands)
        return [
            {"command_id": c["command_id"], "sequence": first + i, "digest": "0" * 64, "replayed": False}
            for i, c in enumerate(commands)
        ]

    async def record_components(self, world_id: str, components: list[dict[str, Any]]) -> int:
        return len(components)

    async def components(self, world_id: str) -> dict[str, Any]:
        return {"components": self.recorded}

    async def world_info(self, world_id: str) -> dict[str, Any]:
        return {"status": "ACTIVE"}

    async def reserve_spawn(self, world_id: str, command_id: str, principal: str | None, request_digest: str,
                            scheduled_tick: int, quota: int | None = None) -> int:  # fmt: skip
        self.sequence += 1
        return self.sequence


def _spawn(i: int) -> Spawn:
    return Spawn(world_id=WORLD, components=[Position(x=float(i), y=0.0)])


def _timed(fn: Callable[[], object], count: int) -> float:
    gc.collect()
    started = time.thread_time()
    fn()
    return (time.thread_time() - started) / count * 1e6


def measure(commands: int) -> dict[str, float]:
    """One round of every figure this tree has, in microseconds of CPU per command."""
    registry = default_registry()
    dispatcher = CommandDispatcher(registry, CommandScheduler(registry, InstantAuthority()), worlds=None)  # type: ignore[arg-type]
    ops = [_spawn(i) for i in range(commands)]
    spec = registry.resolve(ops[0])
    options = DurableOptions(tick=0)
    items = [DeferredItem(op=op, options=options, command_id=f"c-{i}") for i, op in enumerate(ops)]
    loop = asyncio.new_event_loop()

    def run(coro_of: Callable[[int], Any], steps: int) -> Callable[[], None]:
        async def all_of() -> None:
            for i in range(steps):
                await coro_of(i)

        return lambda: loop.run_until_complete(all_of())

    figures = {"payload_of": _timed(lambda: [spec.payload_of(op) for op in ops], commands)}
    exhaustive = getattr(spec, "payload_of_exhaustive", None)
    if exhaustive is not None:
        figures["payload_of_exhaustive"] = _timed(lambda: [exhaustive(op) for op in ops], commands)
    figures["defer"] = _timed(run(lambda i: dispatcher.defer(ops[i], options, command_id=f"s-{i}"), commands), commands)
    batches = max(1, commands // BATCH)
    figures["defer_batch"] = _timed(
        run(lambda b: dispatcher.defer_batch(items[b * BATCH : (b + 1) * BATCH]), batches), batches * min(BATCH, commands)
    )
    figures["defer_spawn"] = _timed(run(lambda i: dispatcher.defer_spawn(ops[i], options, command_id=f"p-{i}"), commands), commands)
    loop.close()
    return figures


def _elsewhere(src: Path, commands: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(Path(__file__).resolve().parent.parent)])}
    out = subprocess.run(
        [sys.executable, __file__, "--child", "--commands", str(commands)], env=env, check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--commands", type=int, default=2_000, help="commands per figure and round")
    parser.add_argument("--baseline-src", type=Path, help="a src/ tree of the code to compare against")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.commands)))
        return
    best: dict[str, dict[str, float]] = {"this tree": {}, "baseline": {}}
    for _ in range(args.rounds):
        rounds = {"this tree": measure(args.commands)}
        if args.baseline_src is not None:
            rounds["baseline"] = _elsewhere(args.baseline_src.resolve(), args.commands)
        for tree, figures in rounds.items():
            for name, value in figures.items():
                best[tree][name] = min(value, best[tree].get(name, value))
    ours, baseline = best["this tree"], best["baseline"]
    print(f"caller-side CPU per command (us, best of {args.rounds} rounds of {args.commands}; load {os.getloadavg()[0]:.1f})")
    header = f"{'':24s}{'this tree':>12s}" + (f"{'baseline':>12s}{'ratio':>8s}" if baseline else "")
    print(header)
    for name, value in ours.items():
        line = f"{name:24s}{value:12.1f}"
        if name in baseline:
            line += f"{baseline[name]:12.1f}{baseline[name] / value:7.2f}x"
        print(line)
    if "payload_of_exhaustive" in ours:
        print(f"payload_of vs its exhaustive path in this tree: {ours['payload_of_exhaustive'] / ours['payload_of']:.2f}x less CPU")


if __name__ == "__main__":
    main()
