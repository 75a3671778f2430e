"""`Client.state()` of a ticking world over loopback, against reading the same chunk bytes from SQLite.

    .venv/bin/python bench/state_read.py [--agents 5000] [--large 100000] [--tick-rate 10] [--rounds 15]
                                         [--baseline-src DIR] [--no-record]

1. A world of `agents` SIR agents (bench/sir_world.py: Position, Velocity, Infection; a vectorised
   processor moves every Position each tick, so each tick publishes a column delta) under
   `archetype serve --tick-rate`, read while it ticks, for `rounds` rounds, each phase once per
   round in turn (so a burst of load elsewhere hits every phase):
   - raw SQLite (the baseline): the world's snapshot chunks and deltas, read from the catalog by
     `sqlite3` in this process: the bytes every answer is made from;
   - `Client.state("sir")`, end to end (request, the server's read, the answer parsed into
     `EntityState`s);
   - the same, then every agent's `Infection` built as its class (what a script reading the state
     does next);
   - `Client.state("sir", components=[Infection])`;
   - the route's `entities` layout for the same page (`GET .../state?limit=`, parsed with json);
   - with `--baseline-src DIR` (a `src/` tree of other code, e.g. the commit before this work): that
     code's `Client.state("sir")` against that code's serve, on a copy of the same catalog, ticking
     beside ours, from a child process with that tree first on its path.
   Best and median milliseconds per phase, and the ratio of the best to the raw read's best.
2. A world of `large` agents, ticking: `Client.iter_state()` through all of it (pages of 5,000),
   against `Client.state()` holding all of it, each timed, then each again under tracemalloc for
   this process's peak; then the server's side of the same pages (`read_state` and the answer's
   body, what the route runs), in this process on the same catalog, under tracemalloc.
The figures are printed and recorded in docs/performance.md under their own heading.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from perf_doc import publish, run_line
from sir_world import WORLD, Infection, populate, start_serve

from archetype import Client
from archetype.api.models import StateSectionsView
from local_catalog import open_local_authority

HEADING = "## State reads (bench/state_read.py, issue 22)"
TARGET_MS = 100.0
LARGE_PAGE = 5_000
BASELINE_CHILD = """
import json, sys, time
from archetype import Client
url, world, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
times = []
with Client(url, token="viewer") as client:
    client.state(world)
    for _ in range(rounds):
        t0 = time.perf_counter()
        state = client.state(world)
        times.append(time.perf_counter() - t0)
print(json.dumps({"times": times, "entities": len(state.entities)}))
"""


def raw_read(catalog: Path) -> Callable[[], int]:
    """The baseline: the world's stored state bytes, as they are, from SQLite."""
    connection = sqlite3.connect(catalog)

    def read() -> int:
        # the head's rows (docs/storage.md, "State at a tick"): the last snapshot, the deltas from it
        # or from the last delta that replaced the ones before
        (snapshot,) = connection.execute("SELECT max(tick) FROM state_snapshots WHERE world_id = ?", (WORLD,)).fetchone()
        (replacing,) = connection.execute("SELECT max(tick) FROM state_deltas WHERE world_id = ? AND replaces = 1",
                                          (WORLD,)).fetchone()  # fmt: skip
        start = max(t for t in (snapshot, replacing, -1) if t is not None)
        chunks = connection.execute("SELECT body FROM state_snapshots WHERE world_id = ? AND tick = ? ORDER BY first_entity_id",
                                    (WORLD, snapshot))  # fmt: skip
        deltas = connection.execute("SELECT body FROM state_deltas WHERE world_id = ? AND tick >= ? ORDER BY tick, part",
                                    (WORLD, start))  # fmt: skip
        return sum(len(body) for (body,) in [*chunks.fetchall(), *deltas.fetchall()])

    return read


def wait_ticking(client: Client, ticks: int = 3, limit_s: float = 120.0) -> None:
    deadline, start = time.monotonic() + limit_s, client.world(WORLD).tick_head
    while client.world(WORLD).tick_head < start + ticks:
        if time.monotonic() > deadline:
            raise RuntimeError("the world does not tick")
        time.sleep(0.1)


def timed(fn: Callable[[], object]) -> float:
    gc.collect()
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def summary(name: str, times_ms: list[float], raw_best: float | None, note: str = "") -> str:
    ratio = f"{min(times_ms) / raw_best:8.1f}x raw" if raw_best else " " * 12
    return f"| {name} | {min(times_ms):.1f} | {statistics.median(times_ms):.1f} | {ratio.strip()} | {note} |"


def ticking_world(directory: Path, tick_rate: float, src: Path | None = None) -> tuple[subprocess.Popen[str], str]:
    """A serve (of `src`, or this code) stepping the world of the catalog under `directory/data`."""
    return start_serve(directory, tick_rate, src)


def stop(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGTERM)
    process.wait(60)


def small_world(args: argparse.Namespace, root: Path) -> tuple[list[str], dict[str, float]]:
    populate(root / "small" / "data", args.agents)
    if args.baseline_src:  # the same catalog, copied before either serve writes to it
        shutil.copytree(root / "small" / "data", root / "old" / "data")
    process, url = ticking_world(root / "small", args.tick_rate)
    old: subprocess.Popen[str] | None = None
    rows, figures = [], {}
    try:
        client = Client(url, token="viewer")
        wait_ticking(client)
        old_url = None
        if args.baseline_src:
            old, old_url = ticking_world(root / "old", args.tick_rate, args.baseline_src)
        raw = raw_read(root / "small" / "data" / "catalog.sqlite3")
        http = client._http  # the same keep-alive connection for the entities layout's request

        def typed() -> None:
            for entity in client.state(WORLD).entities:
                entity[Infection]

        phases: dict[str, Callable[[], object]] = {
            "raw SQLite: the same chunk bytes (baseline)": raw,
            "`Client.state()`": lambda: client.state(WORLD),
            "`Client.state()`, then every `Infection` as its class": typed,
            "`Client.state(components=[Infection])`": lambda: client.state(WORLD, components=[Infection]),
            "`GET .../state?limit=` (entities layout), json parsed": lambda: http.get(f"/worlds/{WORLD}/state",
                                                                                      params={"limit": args.agents}).json(),
        }  # fmt: skip
        times: dict[str, list[float]] = {name: [] for name in phases}
        for phase in phases.values():
            phase()  # warm: connections, imports, caches
        for _ in range(args.rounds):
            for name, phase in phases.items():
                times[name].append(timed(phase))
        state = client.state(WORLD)
        raw_best = min(times["raw SQLite: the same chunk bytes (baseline)"])
        bytes_read = raw()
        for name in phases:
            note = f"{bytes_read:,} characters" if name.startswith("raw") else ""
            if name == "`Client.state()`":
                note = f"{len(state.entities):,} entities at tick {state.tick_head}"
            rows.append(summary(name, times[name], None if name.startswith("raw") else raw_best, note))
        figures["state_best_ms"] = min(times["`Client.state()`"])
        figures["state_median_ms"] = statistics.median(times["`Client.state()`"])
        if old is not None and old_url is not None:
            child = [sys.executable, "-c", BASELINE_CHILD, old_url, WORLD, str(args.rounds)]
            env = {**os.environ, "PYTHONPATH": str(args.baseline_src.resolve())}
            answer = subprocess.run(child, check=True, capture_output=True, text=True, env=env)
            old_times = [t * 1000 for t in json.loads(answer.stdout)["times"]]
            rows.append(summary(f"`Client.state()` of `{args.baseline_src}` against its serve (before)", old_times, raw_best))
            figures["before_best_ms"] = min(old_times)
        client.close()
    finally:
        stop(process)
        if old is not None:
            stop(old)
    return rows, figures


def large_world(args: argparse.Namespace, root: Path) -> list[str]:
    populate(root / "large" / "data", args.large)
    process, url = ticking_world(root / "large", args.tick_rate)
    rows = []
    try:
        client = Client(url, token="viewer", timeout=120)
        wait_ticking(client, ticks=2, limit_s=300)

        def paged() -> int:
            return sum(1 for _ in client.iter_state(WORLD, page_size=LARGE_PAGE))

        def whole() -> int:
            return len(client.state(WORLD, page_size=LARGE_PAGE).entities)

        for name, read in ((f"`Client.iter_state()`, pages of {LARGE_PAGE:,}", paged), ("`Client.state()`: all of it held", whole)):
            read()
            best = min(timed(read) for _ in range(3))
            tracemalloc.start()
            count = read()
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            rows.append(f"| {name} | {count:,} | {best:.0f} | {peak / 2**20:.1f} |")
        client.close()
        rows.append(server_pages(root / "large" / "data"))
    finally:
        stop(process)
    return rows


def server_pages(data: Path) -> str:
    """The server's side of paging through the world: each page's `read_state` and its answer's
    body (what the route does), here, on the same catalog while the serve ticks it, traced."""
    catalog = raw_read(data / "catalog.sqlite3")()

    async def pages() -> tuple[int, int, int]:
        authority = open_local_authority(data)
        try:
            after: int | None = 0
            count = largest = 0
            tracemalloc.start()
            while after is not None:
                page = await authority.read_state(WORLD, after, LARGE_PAGE)
                body = StateSectionsView.body(page)
                count, largest = count + sum(len(s["ids"]) for s in page["sections"]), max(largest, len(body))
                after = page["next_after"]
                del page, body
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            return count, peak, largest
        finally:
            await authority.close()

    count, peak, largest = asyncio.run(pages())
    return (f"| the server's reads of those pages (`read_state` + the answer's body, traced in this process on the same "
            f"catalog; it holds {catalog / 2**20:.1f} MiB of chunks) | {count:,} | | {peak / 2**20:.1f} "
            f"(largest answer {largest / 2**20:.2f} MiB) |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, default=5_000)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--tick-rate", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--baseline-src", type=Path, help="a src/ tree of other code to read the same world with")
    parser.add_argument("--no-record", action="store_true", help="print only; leave docs/performance.md alone")
    args = parser.parse_args()
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="state-read-") as tmp:
        small, figures = small_world(args, Path(tmp))
        large = large_world(args, Path(tmp)) if args.large else []
    verdict = "PASS" if figures["state_best_ms"] < TARGET_MS else "FAIL"
    options = f"`--agents {args.agents} --large {args.large} --tick-rate {args.tick_rate:g} --rounds {args.rounds}`"
    lines = [
        HEADING, "",
        run_line(started, options + (f" `--baseline-src {args.baseline_src}`" if args.baseline_src else "")), "",
        f"{args.agents:,} agents of three components, read while `archetype serve` ticks them:", "",
        "| read | best ms | median ms | best / raw best | |", "|---|---|---|---|---|", *small, "",
        f"Target: `Client.state()` of {args.agents:,} entities of a ticking world under {TARGET_MS:g} ms end to end: "
        f"**{verdict}** (best {figures['state_best_ms']:.1f} ms, median {figures['state_median_ms']:.1f} ms).",
    ]  # fmt: skip
    if large:
        lines += ["", f"{args.large:,} agents, ticking: time (best of 3) and this process's peak traced memory during the "
                  "read:", "", "| read | entities | ms | peak MiB |", "|---|---|---|---|", *large]  # fmt: skip
    publish(HEADING, lines, record=not args.no_record)


if __name__ == "__main__":
    main()
