"""What a command costs (issue 24), in one run: on one machine, admission's throughput beside raw
sqlite3 making the same row writes, its WAL pages and its CPU; on Cloudflare, the Durable Object
rows a command's lifecycle reads and writes on the real engine, and dollars at the published prices
(bench/prices.py). The last line printed is one JSON object of the headline figures.

    .venv/bin/python bench/cost.py [--single 300] [--batches 3] [--rounds 3] [--ticks 5] [--record]

- single_per_s, raw_single_per_s, batched_per_s, raw_batched_per_s: synchronous=FULL, best of
  `--rounds` interleaved rounds (bench/admission_bench.py's run: `defer` / `defer_batch` of 1,000
  on the local authority, against `archetype.bench.RawLedger` on the same schema), commands due at a
  far tick; wal_pages_per_admission: WAL frames per single admission commit of a command due at once
  (for the tick after the head, as most are: schema version 20 puts it in no due index), and
  wal_pages_per_admission_due_later: the same for the far tick the throughput runs admit.
- cpu_us_per_admission: process CPU (the caller's thread and the catalog's writer thread) per
  single `defer` at synchronous=NORMAL, best block (CPU, not wall time: a busy machine slows it less).
- instructions_per_admission: {"event_loop", "writer"}, the same admission's CPU instructions
  counted by callgrind (bench/admission_instructions.py: stable to a fraction of a percent where
  the CPU time above moves by tens), when valgrind is installed and not `--no-instructions`; else null.
- do_rows_written_per_command, do_rows_read_per_command: objects {"1_per_tick", "100_per_tick"}:
  the lifecycle admit -> lease -> publish -> audit delivery (the alarm) of spawns, summed from the
  cursors of the real Durable Object SQL engine (workerd: index rows included, as Cloudflare bills)
  under the real `WorldObject` on the stand-in runtime (bench/durable_object_billing.py's measure).
- usd_per_million_commands: the same objects: those rows, each setAlarm (a row written), the
  object requests (RPC calls and alarms), a Worker request per RPC call, the audit queue's three
  operations per event, and the pruning of the settled command and its tick later. Not in it:
  object duration and Worker CPU, which need the Workers runtime (bench/workerd_runtime.py measures
  them: under $1.30 per million at 1 per tick, $0.04 at 100), and storage (retention keeps a busy
  world's catalog flat at a few MB: fractions of a cent a month).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import shutil
import sqlite3
import sys
import tempfile
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

from admission_bench import Ours
from admission_bench import run as admission_run
from admission_instructions import per_admission as instructions_per_admission
from do_meter import Figures
from durable_object_billing import measure as lifecycle_measure
from edge_ticks import measure as edge_measure
from perf_doc import publish
from prices import HOURS_PER_MONTH, PRICES, PRICES_READ_ON, Usage, usd, usd_by_item

from archetype.bench import NEXT_TICK

HEADING = "## What a command costs (bench/cost.py, issue 24)"
LOADS = (1, 100)  # commands per tick
EVENTS_PER_COMMAND = 2  # admitted, applied
QUEUE_OPERATIONS_PER_EVENT = 3  # a write, a read, a delete
TICKS_PER_MONTH = HOURS_PER_MONTH * 3600  # an edge-hosted world ticking at 1 Hz
CPU_BLOCK = 100  # single admissions per timed block
INSTRUCTION_COUNTS = (50, 250)  # the two runs under callgrind whose difference is counted


def key(load: int) -> str:
    return f"{load}_per_tick"


async def cpu_per_admission(directory: Path, blocks: int) -> float:
    """Process CPU seconds per single `defer` at NORMAL, best block of CPU_BLOCK."""
    ours = await Ours.open(directory, "NORMAL", (blocks + 1) * CPU_BLOCK)
    try:
        await ours.put(0)  # the first admission opens the world
        best = float("inf")
        for b in range(blocks):
            gc.collect()
            start = time.process_time()
            for i in range(1 + b * CPU_BLOCK, 1 + (b + 1) * CPU_BLOCK):
                await ours.put(i)
            best = min(best, (time.process_time() - start) / CPU_BLOCK)
        return best
    finally:
        await ours.rt.close()


def command_usage(phases: dict[str, dict[str, Figures]], commands: int) -> tuple[Figures, Figures, Usage]:
    """The lifecycle's figures and the pruning's, per command, and their billable units."""
    lifecycle = sum((f for phase, methods in phases.items() if phase != "prune" for f in methods.values()), Figures())
    pruning = sum(phases["prune"].values(), Figures())
    alarms = sum(methods.get("alarm", Figures()).calls for methods in phases.values())
    whole = lifecycle + pruning
    usage = Usage(object_requests=whole.calls, rows_read=whole.rows_read, rows_written=whole.rows_written + whole.alarms_set,
                  worker_requests=whole.calls - alarms,
                  queue_operations=QUEUE_OPERATIONS_PER_EVENT * EVENTS_PER_COMMAND * commands) * (1 / commands)  # fmt: skip
    return lifecycle, pruning, usage


def tick_usage(parts: dict[str, dict[str, float]], commands: int) -> Usage:
    """One tick of an edge-hosted world (per-tick averages of edge_ticks.measure): the admission of
    its `commands` (one batch through the Worker) and the alarm that runs it and delivers its events."""
    usage = Usage()
    for part, figures in parts.items():
        usage += Usage(object_requests=figures["calls"], rows_read=figures["rows_read"],
                       rows_written=figures["rows_written"] + figures["alarms_set"],
                       worker_requests=figures["calls"] if part == "admit" else 0)  # fmt: skip
    return usage + Usage(queue_operations=QUEUE_OPERATIONS_PER_EVENT * EVENTS_PER_COMMAND * commands)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--single", type=int, default=300, help="single admissions per round")
    parser.add_argument("--batches", type=int, default=3, help="batches of 1,000 per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--wal-commits", type=int, default=50)
    parser.add_argument("--cpu-blocks", type=int, default=20, help=f"blocks of {CPU_BLOCK} single admissions timed for CPU")
    parser.add_argument("--ticks", type=int, default=5, help="ticks per Durable Object measurement")
    parser.add_argument("--no-instructions", action="store_true", help="skip the callgrind count (a few minutes)")
    parser.add_argument("--record", action="store_true", help="put the figures in docs/performance.md")
    args = parser.parse_args()
    started = time.time()

    with tempfile.TemporaryDirectory(prefix="archetype-cost-") as tmp:
        admission = asyncio.run(admission_run("FULL", args.single, args.batches, args.rounds, args.wal_commits, Path(tmp)))
    with tempfile.TemporaryDirectory(prefix="archetype-cost-") as tmp:
        due_now = asyncio.run(admission_run("FULL", 0, 0, 0, args.wal_commits, Path(tmp), NEXT_TICK))["pages"]
    with tempfile.TemporaryDirectory(prefix="archetype-cost-") as tmp:
        cpu_s = asyncio.run(cpu_per_admission(Path(tmp), args.cpu_blocks))
    instructions = (None if args.no_instructions or shutil.which("valgrind") is None
                    else instructions_per_admission(INSTRUCTION_COUNTS, None))  # fmt: skip
    lifecycles = {load: command_usage(asyncio.run(lifecycle_measure(load, args.ticks, "workerd", prune=True)), load * args.ticks)
                  for load in LOADS}  # fmt: skip
    edge = {commands: asyncio.run(edge_measure("edge-cost", commands, args.ticks, "workerd")) for commands in (0, 100)}

    best, pages, names = admission["best"], admission["pages"], admission["names"]
    ours, raw = names[0], names[1]
    lines = [
        HEADING, "",
        f"`{' '.join(['bench/cost.py', *sys.argv[1:]])}`: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}, "
        f"{platform.machine()} with {os.cpu_count()} cores shared with other jobs, Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}, load average {os.getloadavg()[0]:.1f} at the end. Durable Object figures on the "
        f"real engine (workerd); prices read {PRICES_READ_ON} (bench/prices.py).", "",
        "| admission at synchronous=FULL | single cmd/s | WAL pages per commit | batched cmd/s |", "|---|---|---|---|",
        *(f"| {name} | {1 / best[name, 'single']:,.0f} | {pages[name, 'single']:.1f} | "
          + (f"{1 / best[name, 'batch']:,.0f} |" if (name, "batch") in best else "(no batch put) |") for name in names),
        f"| ours / raw sqlite3 | {best[raw, 'single'] / best[ours, 'single']:.2f}x | | "
        f"{best[raw, 'batch'] / best[ours, 'batch']:.2f}x |", "",
        f"The commands above are due at a far tick. WAL pages per single admission of a command due at once (for "
        f"the tick after the head, as most are): ours {due_now[ours, 'single']:.2f}, raw sqlite3 "
        f"{due_now[raw, 'single']:.2f}; due later (the table's): ours {pages[ours, 'single']:.2f}, raw sqlite3 "
        f"{pages[raw, 'single']:.2f}.", "",
        f"CPU per single admission (`defer`, both threads, synchronous=NORMAL, best block of {CPU_BLOCK}): "
        f"{cpu_s * 1e6:.0f} us" + ("." if instructions is None else
        f"; CPU instructions (callgrind, bench/admission_instructions.py): {instructions[0]:,.0f} on the event loop, "
        f"{instructions[1]:,.0f} in the writer thread, {sum(instructions):,.0f} in all."), "",
        "| per command, real DO engine | object requests | statements | rows read | rows written | setAlarm | "
        "pruning later: rows read / written | USD per million commands |", "|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for load, (lifecycle, pruning, usage) in lifecycles.items():
        per, pruned = lifecycle.per(load * args.ticks), pruning.per(load * args.ticks)
        lines.append(f"| {load} per tick | {per['calls']:.2f} | {per['statements']:.2f} | {per['rows_read']:.2f} | "
                     f"{per['rows_written']:.2f} | {per['alarms_set']:.2f} | {pruned['rows_read']:.2f} / "
                     f"{pruned['rows_written']:.2f} | {usd(usage) * 1e6:.2f} |")  # fmt: skip
    workloads = {
        "one command per tick, per million commands": lifecycles[1][2] * 1e6,
        "100 commands per tick, per million commands": lifecycles[100][2] * 1e6,
        "an edge-hosted idle world ticking at 1 Hz (a processor, nothing to move), per month":
            tick_usage(edge[0], 0) * TICKS_PER_MONTH,
        "an edge-hosted busy world: 100 spawns a tick at 1 Hz, every entity moving, per month":
            tick_usage(edge[100], 100) * TICKS_PER_MONTH,
    }  # fmt: skip
    items = list(usd_by_item(Usage()))
    lines += [
        "", "| USD | total | " + " | ".join(items) + " |", "|---|---|" + "---|" * len(items),
        *(f"| {name} | {usd(usage):,.2f} | " + " | ".join(f"{value:,.3f}" for value in usd_by_item(usage).values()) + " |"
          for name, usage in workloads.items()),
        "", f"Prices (USD, Workers Paid, read {PRICES_READ_ON}, bench/prices.py): " + ", ".join(
            f"{f.name.replace('_', ' ')} {getattr(PRICES, f.name):g}" if f.name == "stored_gb_month"
            else f"{f.name.replace('_', ' ')} {getattr(PRICES, f.name) * 1e6:g} per million" for f in fields(PRICES)) + ".",
        "",
    ]  # fmt: skip
    publish(HEADING, lines, record=args.record)
    figures: dict[str, Any] = {
        "single_per_s": round(1 / best[ours, "single"], 1),
        "raw_single_per_s": round(1 / best[raw, "single"], 1),
        "batched_per_s": round(1 / best[ours, "batch"], 1),
        "raw_batched_per_s": round(1 / best[raw, "batch"], 1),
        "wal_pages_per_admission": round(due_now[ours, "single"], 2),
        "wal_pages_per_admission_due_later": round(pages[ours, "single"], 2),
        "do_rows_written_per_command": {key(load): round(lifecycle.per(load * args.ticks)["rows_written"], 2)
                                        for load, (lifecycle, _, _) in lifecycles.items()},
        "do_rows_read_per_command": {key(load): round(lifecycle.per(load * args.ticks)["rows_read"], 2)
                                     for load, (lifecycle, _, _) in lifecycles.items()},
        "cpu_us_per_admission": round(cpu_s * 1e6, 1),
        "instructions_per_admission": None if instructions is None else
            {"event_loop": round(instructions[0]), "writer": round(instructions[1])},
        "usd_per_million_commands": {key(load): round(usd(usage) * 1e6, 2) for load, (_, _, usage) in lifecycles.items()},
    }  # fmt: skip
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
