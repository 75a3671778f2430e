"""HTTP admission against `archetype serve` over loopback, with in-process admission as the baseline.

    .venv/bin/python bench/http_admission.py [--count 2000] [--concurrency 16] [--max-seconds 60] [--no-record]

Workload: `count` single-command submissions (`despawn`, each with its own Idempotency-Key, all
for a far-future tick so the server's runner never leases them), by one authenticated player,
over bench/lean_http.py's keep-alive connections:
 1. in-process baseline: `dispatcher.defer_as` on a local catalog (same SQLite settings);
 2. HTTP, one request at a time over one keep-alive connection (latency p50/p99);
 3. HTTP, `concurrency` requests in flight (throughput).
Each phase stops at `count` commands or `max-seconds`, whichever comes first. The figures are
printed and recorded in docs/performance.md under their own heading.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from lean_http import Pool
from perf_doc import PERFORMANCE_DOC, replace_section

from archetype.commands import ActorCtx, DurableOptions, Role
from archetype.runtime import Runtime
from archetype.world import CreateWorld, Despawn

ROOT = Path(__file__).resolve().parents[1]
HEADING = "## HTTP admission (bench/http_admission.py)"
FAR_TICK = 10**9
PLAYER = ActorCtx(principal="bench", roles=frozenset({Role.player}))
PLAYER_AUTH = {"Authorization": "Bearer player"}
TOKENS = {"admin": {"principal": "root", "roles": ["admin"]}, "player": {"principal": "bench", "roles": ["player"]}}


def summary(name: str, latencies_s: list[float], elapsed_s: float) -> dict[str, object]:
    ordered = sorted(latencies_s)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {
        "phase": name,
        "commands": len(ordered),
        "per_s": round(len(ordered) / elapsed_s, 1),
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(p99 * 1000, 3),
    }


def body(index: int) -> dict[str, object]:
    return {"type": "despawn", "tick": FAR_TICK, "entity_id": index + 1}


async def in_process(count: int, max_s: float, directory: Path) -> dict[str, object]:
    async with await Runtime.open_local(directory) as rt:
        world_id = await rt.dispatcher.apply(CreateWorld(name="bench", world_id="bench"))
        latencies, started = [], time.perf_counter()
        for index in range(count):
            t0 = time.perf_counter()
            await rt.dispatcher.defer_as(PLAYER, Despawn(world_id=world_id, entity_id=index + 1),
                                         DurableOptions(tick=FAR_TICK), command_id=f"c{index}")  # fmt: skip
            latencies.append(time.perf_counter() - t0)
            if time.perf_counter() - started > max_s:
                break
        return summary("in-process defer_as (baseline)", latencies, time.perf_counter() - started)


def start_server(directory: Path, count: int) -> tuple[subprocess.Popen, str]:
    tokens = directory / "tokens.json"
    tokens.write_text(json.dumps(TOKENS))
    command = [sys.executable, "-m", "archetype.cli", "serve", "--data", str(directory / "data"), "--port", "0",
               "--tokens", str(tokens), "--tick-rate", "1", "--quota", str(2 * count + 10)]  # fmt: skip
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return process, json.loads(process.stdout.readline())["serving"]


async def over_http(url: str, count: int, concurrency: int, max_s: float) -> dict[str, object]:
    """`count` admissions, `concurrency` in flight, each in-flight slot on a keep-alive connection of its own."""
    latencies: list[float] = []
    next_index = iter(range(count))
    started = time.perf_counter()
    http = Pool(url, concurrency)

    async def worker() -> None:
        for index in next_index:
            t0 = time.perf_counter()
            status, text = await http.request("POST", "/worlds/bench/commands", body(index),
                                              {**PLAYER_AUTH, "Idempotency-Key": f"c{concurrency}-{index}"})  # fmt: skip
            latencies.append(time.perf_counter() - t0)
            assert status == 202, text
            if time.perf_counter() - started > max_s:
                return

    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        http.close()
    return summary(f"HTTP, {concurrency} in flight", latencies, time.perf_counter() - started)


def record(rows: list[dict[str, object]]) -> None:
    baseline = rows[0]["per_s"]
    lines = [
        HEADING,
        "",
        f"`{' '.join(['bench/http_admission.py', *sys.argv[1:]])}` on {platform.machine()} / Python "
        f"{platform.python_version()}, {time.strftime('%Y-%m-%d')}: single-command `despawn` submissions by one player "
        "(own Idempotency-Key each, far-future tick) to `archetype serve` on 127.0.0.1 (catalog `synchronous=FULL`), "
        "against `dispatcher.defer_as` on the same kind of catalog in-process, measured in the same run.",
        "",
        "| phase | commands | commands/s | p50 ms | p99 ms | vs in-process |",
        "|---|---|---|---|---|---|",
        *(f"| {r['phase']} | {r['commands']} | {r['per_s']} | {r['p50_ms']} | {r['p99_ms']} | "
          f"{r['per_s'] / baseline:.2f}x |" for r in rows),  # fmt: skip
        "",
        "Each HTTP admission is one SQLite write transaction, like the in-process one; the difference is "
        "HTTP parsing, validation of the request, authentication and the response, on the server's event loop; "
        "the ledger calls run on the catalog's writer thread, and admissions in flight together share a "
        "commit (group commit). The client is bench/lean_http.py (keep-alive connections, ~0.1 ms of CPU per "
        "request: httpx cost more than the server on these shared CPUs). Client and server share the machine's "
        "CPUs; on a busy machine repeated runs vary by about +/-30%.",
        "",
    ]
    replace_section(HEADING, lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000, help="commands per phase")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight in the concurrent phase")
    parser.add_argument("--max-seconds", type=float, default=60.0, help="time bound per phase")
    parser.add_argument("--no-record", action="store_true", help="print only; leave docs/performance.md alone")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="archetype-bench-") as tmp:
        directory = Path(tmp)
        rows = [asyncio.run(in_process(args.count, args.max_seconds, directory / "in-process"))]
        process, url = start_server(directory, args.count)
        try:
            admin = {"Authorization": "Bearer admin"}
            httpx.post(f"{url}/worlds", json={"name": "bench", "world_id": "bench"}, headers=admin).raise_for_status()
            rows.append(asyncio.run(over_http(url, args.count, 1, args.max_seconds)))
            rows.append(asyncio.run(over_http(url, args.count, args.concurrency, args.max_seconds)))
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(30)

    for r in rows:
        print(f"{r['phase']:<32} {r['commands']:>6} commands  {r['per_s']:>9} /s  p50 {r['p50_ms']:>8} ms  "
              f"p99 {r['p99_ms']:>8} ms  {r['per_s'] / rows[0]['per_s']:.2f}x in-process")  # fmt: skip
    if not args.no_record:
        record(rows)
        print(f"recorded under {HEADING!r} in {PERFORMANCE_DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
