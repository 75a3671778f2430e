"""Retention: a busy world's catalog with and without `prune`, in the same run.

Two storage directories run the same workload through the public API: every tick admits
`--per-tick` commands for that tick (a batch, as a busy HTTP world would), steps, and acknowledges
the outbox (as the projector does). One of them also prunes every `--prune-every` ticks with
`--keep-ticks` and a window of `--window-ticks` ticks of the manual clock; the other never prunes
(the baseline). Printed per checkpoint: rows held (commands + manifests + quota counters), the
catalog file's size, and the time per tick, so the prune's cost is a ratio to the same work
without it.

    .venv/bin/python bench/retention_bench.py                 # 3,000 ticks, 20 commands each
    .venv/bin/python bench/retention_bench.py --ticks 500     # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import tempfile
import time
from pathlib import Path

from archetype.commands import ActorCtx, DeferredItem, DurableOptions, Role
from archetype.commands.port import ManualClock
from archetype.runtime import Runtime
from archetype.world import CreateWorld, Despawn, Step

TICK_MS = 100
PLAYER = ActorCtx(principal="p", roles=frozenset({Role.player}))


def held(directory: Path) -> tuple[int, int]:
    """(rows of commands, ticks and quota counters, bytes of the catalog file and its WAL)."""
    with sqlite3.connect(directory / "catalog.sqlite3") as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        rows = sum(db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("commands", "ticks", "quota_usage"))
    size = sum(f.stat().st_size for f in directory.glob("catalog.sqlite3*"))
    return rows, size


async def run(directory: Path, args: argparse.Namespace, prune: bool) -> list[tuple[int, int, int, float]]:
    clock = ManualClock()
    rt = await Runtime.open_local(directory, clock=clock, synchronous="NORMAL")
    rt.scheduler.quota = 1_000  # as `serve` admits for players: a quota counter per target tick
    try:
        world_id = await rt.dispatcher.apply(CreateWorld(name="busy"))
        checkpoints, started = [], time.perf_counter()
        for tick in range(args.ticks):
            items = [DeferredItem(op=Despawn(world_id=world_id, entity_id=1), options=DurableOptions(tick=tick),
                                  command_id=f"c{tick}-{i}") for i in range(args.per_tick)]  # fmt: skip
            await rt.dispatcher.defer_batch_as(PLAYER, items)
            await rt.dispatcher.apply(Step(world_id=world_id))
            mark = await rt.authority.watermark(world_id)
            await rt.authority.acknowledge_outbox(world_id, mark["committed_seq"])
            clock.advance(TICK_MS)
            if prune and tick % args.prune_every == args.prune_every - 1:
                while not (await rt.authority.prune(world_id, args.keep_ticks, args.window_ticks * TICK_MS))["done"]:
                    pass
            if tick % args.checkpoint == args.checkpoint - 1:
                elapsed = time.perf_counter() - started
                rows, size = held(directory)
                checkpoints.append((tick + 1, rows, size, elapsed / args.checkpoint * 1000))
                started = time.perf_counter()
        return checkpoints
    finally:
        await rt.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ticks", type=int, default=3_000)
    parser.add_argument("--per-tick", type=int, default=20)
    parser.add_argument("--keep-ticks", type=int, default=100)
    parser.add_argument("--window-ticks", type=int, default=200, help="the idempotency window, in ticks")
    parser.add_argument("--prune-every", type=int, default=50)
    parser.add_argument("--checkpoint", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        baseline = asyncio.run(run(Path(tmp) / "baseline", args, prune=False))
        pruned = asyncio.run(run(Path(tmp) / "pruned", args, prune=True))
    print(f"{args.per_tick} commands/tick, keep {args.keep_ticks} ticks, window {args.window_ticks} ticks, "
          f"prune every {args.prune_every} ticks")  # fmt: skip
    print(f"{'ticks':>6} | {'rows':>8} {'bytes':>11} {'ms/tick':>8} | {'rows':>8} {'bytes':>11} {'ms/tick':>8} | ratio")
    print(f"{'':>6} | {'baseline (no prune)':^29} | {'with prune':^29} | time")
    for (tick, rows_b, size_b, ms_b), (_, rows_p, size_p, ms_p) in zip(baseline, pruned, strict=True):
        print(f"{tick:>6} | {rows_b:>8} {size_b:>11,} {ms_b:>8.2f} | {rows_p:>8} {size_p:>11,} {ms_p:>8.2f} | {ms_p / ms_b:.2f}")


if __name__ == "__main__":
    main()
