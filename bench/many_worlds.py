"""Many worlds in one `archetype serve`: 10,000 worlds of which 100 are busy, against the same 100 alone.

    .venv/bin/python bench/many_worlds.py [--worlds 10000] [--busy 100] [--tick-rate 4] [--busy-seconds 20]
                                          [--idle-seconds 30] [--admissions 600] [--admission-rounds 3] [--no-record]

Two `serve` processes on 127.0.0.1, one after the other, each on a fresh data directory (catalog
`synchronous=FULL`), and this process as their only client (bench/lean_http.py: keep-alive
connections and next to no CPU per request, so the figures are the server's, not httpx's):

 1. baseline: `busy` worlds alone; each gets one command per tick (a `despawn` of no entity, due at
    once: it settles `rejected`, so every tick of a busy world has work) for `busy-seconds`, while a
    prober GETs /health every 20 ms;
 2. the same serve holding `worlds` worlds: world creation timed at 0 and at `worlds` existing,
    RSS before and after the worlds exist, then the same busy load on `busy` of them, then
    `idle-seconds` with no traffic (the catalog must not grow), then HTTP admission into one world at
    1, 8 and 32 requests in flight (far-future tick: the runner never leases them), the three
    levels alternated for `admission-rounds` rounds and the best round of each kept, as
    bench/http_admission.py keeps its (the round the machine's other work disturbed least).

Busy tick rate is manifests published per busy world per second; due-to-applied is a command's
settlement time minus its admission time, from the catalog (read-only), also in ticks. Every phase
is bounded; the whole run takes a few minutes and stops by itself. The figures are printed and
recorded in docs/performance.md under their own heading.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

from lean_http import Pool
from perf_doc import PERFORMANCE_DOC, replace_section

ROOT = Path(__file__).resolve().parents[1]
HEADING = "## Many worlds in one serve (bench/many_worlds.py)"
TOKENS = {"admin": {"principal": "root", "roles": ["admin"]}, "player": {"principal": "bench", "roles": ["player"]}}
ADMIN = {"Authorization": "Bearer admin"}
PLAYER = {"Authorization": "Bearer player"}
FAR_TICK = 10**9
HEALTH_EVERY_S = 0.02
PHASE_LIMIT_S = 120.0  # no single phase runs longer than this, whatever the machine


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


class Serve:
    def __init__(self, directory: Path, tick_rate: float) -> None:
        directory.mkdir(parents=True)
        tokens = directory / "tokens.json"
        tokens.write_text(json.dumps(TOKENS))
        self.data = directory / "data"
        command = [sys.executable, "-m", "archetype.cli", "serve", "--data", str(self.data), "--port", "0",
                   "--tokens", str(tokens), "--tick-rate", str(tick_rate), "--quota", str(10**9),
                   "--log-level", "warning"]  # fmt: skip
        self.process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True,
                                        env={**os.environ, "PYTHONPATH": str(ROOT / "src")})  # fmt: skip
        assert self.process.stdout is not None
        self.url = json.loads(self.process.stdout.readline())["serving"]

    def rss_kib(self) -> int:
        """The RSS of serve's processes: the HTTP process and its stepping process."""
        pid = self.process.pid
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        return sum(_rss_kib(int(p)) for p in (pid, *children))

    def catalog_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.data.glob("catalog.sqlite3*"))

    @contextlib.contextmanager
    def catalog(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(f"file:{self.data / 'catalog.sqlite3'}?mode=ro", uri=True, timeout=30)
        try:
            yield db
        finally:
            db.close()

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def realtime(tick_rate: float) -> dict[str, object]:
    """The worlds' tick settings: realtime at the serve's rate, as every world ticked before tick modes
    (the figures in docs/performance.md compare with those runs)."""
    return {"tick_mode": "realtime", "tick_interval_ms": max(1, round(1000 / tick_rate))}


async def create_worlds(http: Pool, ids: list[str], ticks: dict[str, object], concurrency: int = 8,
                        limit_s: float = PHASE_LIMIT_S) -> float:  # fmt: skip
    """Create these worlds, with these tick settings; answer worlds created per second."""
    pending = iter(ids)
    started = time.perf_counter()

    async def worker() -> None:
        for world_id in pending:
            status, text = await http.request("POST", "/worlds", {"name": world_id, "world_id": world_id, **ticks}, ADMIN)
            assert status == 201, text
            if time.perf_counter() - started > limit_s:
                raise RuntimeError(f"world creation did not finish in {limit_s} s")

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return len(ids) / (time.perf_counter() - started)


async def busy_load(http: Pool, serve: Serve, busy: list[str], tick_rate: float,
                    seconds: float) -> dict[str, float]:  # fmt: skip
    """One command per tick into every busy world (32 in flight), /health probed meanwhile on a
    connection of its own; the phase's figures."""
    interval = 1.0 / tick_rate
    stop = asyncio.Event()
    health: list[float] = []
    counter = iter(range(10**12))
    prober_pool = Pool(serve.url, 1)

    async def probe() -> None:
        while not stop.is_set():
            t0 = time.perf_counter()
            status, _ = await prober_pool.request("GET", "/health")
            health.append(time.perf_counter() - t0)
            assert status == 200
            await asyncio.sleep(HEALTH_EVERY_S)

    async def submit(world_id: str) -> None:
        command = {"type": "despawn", "tick": 0, "entity_id": 10**9}
        status, text = await http.request("POST", f"/worlds/{world_id}/commands", command,
                                          {**PLAYER, "Idempotency-Key": f"b{next(counter)}"})  # fmt: skip
        assert status == 202, text

    prober = asyncio.create_task(probe())
    started_ms = time.time() * 1000
    started = time.perf_counter()
    submissions: set[asyncio.Task[None]] = set()
    late = 0
    while time.perf_counter() - started < seconds:
        tick_started = time.perf_counter()
        if len(submissions) > len(busy):  # the server fell more than a tick behind: do not pile up
            late += 1
        else:
            for world_id in busy:
                task = asyncio.create_task(submit(world_id))
                submissions.add(task)
                task.add_done_callback(submissions.discard)
        await asyncio.sleep(max(0.0, interval - (time.perf_counter() - tick_started)))
    ended_ms = time.time() * 1000
    await asyncio.gather(*submissions)
    await asyncio.sleep(2 * interval + 1.0)  # the last commands settle
    stop.set()
    await prober
    prober_pool.close()

    marks = ",".join("?" * len(busy))
    with serve.catalog() as db:
        ticks = db.execute(f"SELECT count(*) FROM ticks WHERE world_id IN ({marks}) AND published_at BETWEEN ? AND ?",
                           (*busy, started_ms, ended_ms)).fetchone()[0]  # fmt: skip
        settled = db.execute(f"""SELECT updated_at - created_at FROM commands WHERE world_id IN ({marks})
            AND created_at BETWEEN ? AND ? AND status IN ('APPLIED', 'REJECTED')""", (*busy, started_ms, ended_ms)).fetchall()
        unsettled = db.execute(f"""SELECT count(*) FROM commands WHERE world_id IN ({marks})
            AND status IN ('PENDING', 'LEASED', 'RETRYABLE')""", busy).fetchone()[0]
    latencies = [row[0] for row in settled]
    window_s = (ended_ms - started_ms) / 1000
    tick_ms = 1000 / tick_rate
    return {
        "tick_rate": ticks / len(busy) / window_s,
        "commands": len(latencies),
        "unsettled": unsettled,
        "skipped_ticks": late,
        "health_p50_ms": statistics.median(health) * 1000,
        "health_p99_ms": quantile(health, 0.99) * 1000,
        "due_p50_ms": statistics.median(latencies),
        "due_p99_ms": quantile(latencies, 0.99),
        "due_p50_ticks": statistics.median(latencies) / tick_ms,
        "due_p99_ticks": quantile(latencies, 0.99) / tick_ms,
    }


async def admission(http: Pool, world_id: str, count: int, in_flight: int, round_: int) -> dict[str, float]:
    latencies: list[float] = []
    pending = iter(range(count))
    started = time.perf_counter()

    async def worker() -> None:
        for index in pending:
            t0 = time.perf_counter()
            status, text = await http.request("POST", f"/worlds/{world_id}/commands",
                                              {"type": "despawn", "tick": FAR_TICK, "entity_id": index + 1},
                                              {**PLAYER, "Idempotency-Key": f"a{round_}-{in_flight}-{index}"})  # fmt: skip
            latencies.append(time.perf_counter() - t0)
            assert status == 202, text
            if time.perf_counter() - started > PHASE_LIMIT_S:
                return

    await asyncio.gather(*(worker() for _ in range(in_flight)))
    elapsed = time.perf_counter() - started
    return {"in_flight": in_flight, "per_s": len(latencies) / elapsed, "p50_ms": statistics.median(latencies) * 1000,
            "p99_ms": quantile(latencies, 0.99) * 1000}  # fmt: skip


@contextlib.asynccontextmanager
async def client(url: str) -> AsyncIterator[Pool]:
    pool = Pool(url, 32)  # the busy load's and the admissions' most in flight
    try:
        yield pool
    finally:
        pool.close()


async def baseline_run(directory: Path, args: argparse.Namespace) -> dict[str, float]:
    serve = Serve(directory, args.tick_rate)
    try:
        async with client(serve.url) as http:
            busy = [f"busy-{i}" for i in range(args.busy)]
            await create_worlds(http, busy, realtime(args.tick_rate))
            return await busy_load(http, serve, busy, args.tick_rate, args.busy_seconds)
    finally:
        serve.stop()


async def many_run(directory: Path, args: argparse.Namespace) -> dict[str, object]:
    serve = Serve(directory, args.tick_rate)
    figures: dict[str, object] = {}
    try:
        async with client(serve.url) as http:
            await asyncio.sleep(1.0)
            rss_empty = serve.rss_kib()
            sample = 500
            figures["create_at_0"] = await create_worlds(http, [f"first-{i}" for i in range(sample)], realtime(args.tick_rate))
            fill = [f"w-{i}" for i in range(args.worlds - sample)]
            started = time.perf_counter()
            await create_worlds(http, fill, realtime(args.tick_rate), concurrency=16, limit_s=3 * PHASE_LIMIT_S)
            figures["fill_s"] = time.perf_counter() - started
            await asyncio.sleep(2.0)
            figures["rss_per_1000_kib"] = (serve.rss_kib() - rss_empty) / (args.worlds / 1000)
            figures["create_at_n"] = await create_worlds(http, [f"later-{i}" for i in range(sample)], realtime(args.tick_rate))
            busy = [f"w-{i}" for i in range(0, len(fill), max(1, len(fill) // args.busy))][: args.busy]
            figures["busy"] = await busy_load(http, serve, busy, args.tick_rate, args.busy_seconds)
            figures["rss_loaded_per_1000_kib"] = (serve.rss_kib() - rss_empty) / (args.worlds / 1000)

            # the audit projector drains the busy phase's events first (acknowledging deletes rows)
            drained_by = time.perf_counter() + PHASE_LIMIT_S / 2
            while time.perf_counter() < drained_by:
                with serve.catalog() as db:
                    if not db.execute("SELECT count(*) FROM outbox").fetchone()[0]:
                        break
                await asyncio.sleep(1.0)
            await asyncio.sleep(2.0)
            before = serve.catalog_bytes()
            with serve.catalog() as db:
                rows_before = [db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("ticks", "commands", "outbox")]
            await asyncio.sleep(args.idle_seconds)
            after = serve.catalog_bytes()
            with serve.catalog() as db:
                rows_after = [db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("ticks", "commands", "outbox")]
            figures["idle_growth_bytes_per_min"] = (after - before) * 60 / args.idle_seconds
            figures["idle_rows"] = (rows_before, rows_after)

            rounds = [[await admission(http, "later-0", args.admissions, n, r) for n in (1, 8, 32)]
                      for r in range(args.admission_rounds)]  # fmt: skip
            figures["admission"] = [max(level, key=lambda a: a["per_s"]) for level in zip(*rounds, strict=True)]
    finally:
        serve.stop()
    return figures


def report(args: argparse.Namespace, alone: dict[str, float], many: dict[str, object]) -> list[str]:
    busy = many["busy"]
    assert isinstance(busy, dict)
    admissions = many["admission"]
    assert isinstance(admissions, list)
    one = admissions[0]["per_s"]

    def verdict(ok: bool) -> str:
        return "PASS" if ok else "MISS"

    ratio = busy["tick_rate"] / alone["tick_rate"]
    growth = many["idle_growth_bytes_per_min"]
    assert isinstance(growth, float)
    created_0, created_n = many["create_at_0"], many["create_at_n"]
    assert isinstance(created_0, float) and isinstance(created_n, float)
    at_32 = admissions[2]
    rows_before, rows_after = many["idle_rows"]  # type: ignore[misc]
    return [
        HEADING,
        "",
        f"`{' '.join(['bench/many_worlds.py', *sys.argv[1:]])}` on {platform.machine()} / Python "
        f"{platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores "
        f"shared with other work (load average {os.getloadavg()[0]:.1f} at the end): one `serve` "
        f"(`--tick-rate {args.tick_rate:g}`, `synchronous=FULL`) holding {args.worlds:,} worlds, {args.busy} of them "
        f"busy (one command per tick each, over HTTP, {args.busy_seconds:g} s), against the same {args.busy} "
        "worlds alone in a serve of their own, measured in the same run.",
        "",
        f"| figure | {args.busy} busy alone (baseline) | {args.worlds:,} worlds, {args.busy} busy | target | |",
        "|---|---|---|---|---|",
        f"| busy tick rate (ticks/s per busy world) | {alone['tick_rate']:.2f} | {busy['tick_rate']:.2f} "
        f"({ratio:.0%}) | >= 90% of baseline | {verdict(ratio >= 0.9)} |",
        f"| `/health` p50 / p99 | {alone['health_p50_ms']:.1f} / {alone['health_p99_ms']:.1f} ms | "
        f"{busy['health_p50_ms']:.1f} / {busy['health_p99_ms']:.1f} ms | p99 <= 10 ms | "
        f"{verdict(busy['health_p99_ms'] <= 10)} |",
        f"| due-to-applied p50 / p99 | {alone['due_p50_ms']:.0f} / {alone['due_p99_ms']:.0f} ms "
        f"({alone['due_p50_ticks']:.1f} / {alone['due_p99_ticks']:.1f} ticks) | {busy['due_p50_ms']:.0f} / "
        f"{busy['due_p99_ms']:.0f} ms ({busy['due_p50_ticks']:.1f} / {busy['due_p99_ticks']:.1f} ticks) | "
        f"p99 <= 2 ticks | {verdict(busy['due_p99_ticks'] <= 2)} |",
        f"| commands settled (left open) | {alone['commands']:.0f} ({alone['unsettled']:.0f}) | "
        f"{busy['commands']:.0f} ({busy['unsettled']:.0f}) | | |",
        f"| load ticks skipped by the client (server a tick behind) | {alone['skipped_ticks']:.0f} | "
        f"{busy['skipped_ticks']:.0f} | | |",
        f"| catalog growth, {args.idle_seconds:g} s with no traffic | | {growth:,.0f} bytes/min (rows ticks/commands/"
        f"outbox {rows_before} -> {rows_after}) | 0 bytes/min | {verdict(growth == 0)} |",
        f"| RSS per 1,000 worlds (idle, never loaded / after the busy phase) | | "
        f"{many['rss_per_1000_kib']:,.0f} / {many['rss_loaded_per_1000_kib']:,.0f} KiB | | |",
        f"| world creation at 0 / {args.worlds:,} existing | | {created_0:,.0f} / {created_n:,.0f} worlds/s "
        f"({created_n / created_0:.2f}x) | >= 500/s, unchanged | "
        f"{verdict(min(created_0, created_n) >= 500 and created_n / created_0 >= 0.8)} |",
        *(f"| HTTP admission, {a['in_flight']} in flight (best of {args.admission_rounds}) | "
          f"{'(baseline)' if a['in_flight'] == 1 else ''} | "
          f"{a['per_s']:,.0f} commands/s ({a['per_s'] / one:.1f}x), p50 {a['p50_ms']:.1f} ms, p99 {a['p99_ms']:.1f} ms | "
          f"{'>= 1,500/s, p99 <= 50 ms, >= 3x' if a['in_flight'] == 32 else ''} | "
          f"{verdict(a['per_s'] >= 1500 and a['p99_ms'] <= 50 and a['per_s'] >= 3 * one) if a['in_flight'] == 32 else ''} |"
          for a in admissions),  # fmt: skip
        "",
        f"Filling the catalog to {args.worlds:,} worlds took {many['fill_s']:.0f} s (16 in flight). "
        f"HTTP admission at 32 in flight: {at_32['per_s']:,.0f}/s.",
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", type=int, default=10_000)
    parser.add_argument("--busy", type=int, default=100)
    parser.add_argument("--tick-rate", type=float, default=4.0)
    parser.add_argument("--busy-seconds", type=float, default=20.0)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--admissions", type=int, default=600, help="commands per in-flight level and round")
    parser.add_argument("--admission-rounds", type=int, default=3, help="rounds of the admission levels (best kept)")
    parser.add_argument("--no-record", action="store_true", help="print only; leave docs/performance.md alone")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="archetype-many-") as tmp:
        alone = asyncio.run(baseline_run(Path(tmp) / "alone", args))
        many = asyncio.run(many_run(Path(tmp) / "many", args))
    lines = report(args, alone, many)
    print("\n".join(lines))
    if not args.no_record:
        replace_section(HEADING, lines)
        print(f"recorded under {HEADING!r} in {PERFORMANCE_DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
