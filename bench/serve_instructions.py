"""CPU instructions per HTTP admission of a real `archetype serve` at N in flight, counted by
callgrind: stable to a few percent run to run, where wall-clock rates on this shared machine move
by tens of percent from one minute to the next.

    .venv/bin/python bench/serve_instructions.py [--count 1000] [--concurrency 32] [--baseline-src DIR]

The serve process (uvicorn on uvloop and httptools, the catalog at synchronous=FULL) runs under
`valgrind --tool=callgrind --instr-atstart=no`, so its start costs nothing; a world is created and
300 admissions warm it up uninstrumented, then instrumentation goes on, 50 more run, the counters
are zeroed, `count` single-command `despawn` admissions run at `concurrency` in flight
(bench/http_admission.py's workload and client), and the counters are dumped: instructions per
admission of the event loop's thread (HTTP, validation, the dispatcher, the hand-over) and of the
others (the catalog's writer thread: the ledger and SQLite). The writer's figure depends on how
many admissions each group commit carries, which moves a little with timing. With
`--baseline-src`, the same for a serve of that `src` tree (put first on PYTHONPATH), after this
tree's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import uvloop
from http_admission import FAR_TICK, PLAYER_AUTH, TOKENS
from lean_http import Pool

ROOT = Path(__file__).resolve().parents[1]


async def admit(url: str, count: int, concurrency: int, key: str) -> None:
    pool, indexes = Pool(url, concurrency), iter(range(count))

    async def worker() -> None:
        for index in indexes:
            status, text = await pool.request("POST", "/worlds/bench/commands",
                                              {"type": "despawn", "tick": FAR_TICK, "entity_id": index + 1},
                                              {**PLAYER_AUTH, "Idempotency-Key": f"{key}-{index}"})  # fmt: skip
            assert status == 202, text

    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        pool.close()


def instructions(count: int, concurrency: int, src: Path | None) -> tuple[float, float]:
    """(event loop thread, every other thread) instructions per admission of a serve of `src`."""
    with tempfile.TemporaryDirectory(prefix="archetype-serve-callgrind-") as tmp:
        directory = Path(tmp)
        (directory / "tokens.json").write_text(json.dumps(TOKENS))
        out = directory / "callgrind.out"
        path = os.pathsep.join([str(ROOT / "src")] if src is None else [str(src.resolve()), str(ROOT / "src")])
        process = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--separate-threads=yes", "--instr-atstart=no", f"--callgrind-out-file={out}",
             sys.executable, "-m", "archetype.cli", "serve", "--data", str(directory / "data"), "--port", "0",
             "--tokens", str(directory / "tokens.json"), "--tick-rate", "1", "--quota", str(10 * count + 1000)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env={**os.environ, "PYTHONPATH": path},
        )  # fmt: skip
        try:
            url = json.loads(process.stdout.readline())["serving"]  # type: ignore[union-attr]
            httpx.post(f"{url}/worlds", json={"name": "bench", "world_id": "bench"}, headers={"Authorization": "Bearer admin"},
                       timeout=120).raise_for_status()  # fmt: skip
            uvloop.run(admit(url, 300, concurrency, "warm"))
            control = ["callgrind_control", str(process.pid)]
            subprocess.run([control[0], "-i", "on", control[1]], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            uvloop.run(admit(url, 50, concurrency, "instrumented"))
            subprocess.run([control[0], "-z", control[1]], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            uvloop.run(admit(url, count, concurrency, "measured"))
            subprocess.run([control[0], "-d", control[1]], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(300)
        totals = {}
        for part in directory.glob("callgrind.out.1-*"):  # the dump: one file per thread
            match = re.search(r"^totals: (\d+)", part.read_text(errors="replace"), re.MULTILINE)
            totals[part.name.rsplit("-", 1)[1]] = int(match.group(1)) if match else 0
        loop = totals.pop("01", 0)
        return loop / count, sum(totals.values()) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000, help="admissions counted")
    parser.add_argument("--concurrency", type=int, default=32, help="admissions in flight")
    parser.add_argument("--baseline-src", type=Path, help="a src/ tree of the code to compare against")
    args = parser.parse_args()
    trees = [("this tree", None)] + ([(f"baseline ({args.baseline_src})", args.baseline_src)] if args.baseline_src else [])
    print(f"instructions per HTTP admission, serve at {args.concurrency} in flight, {args.count} admissions, callgrind")
    print(f"  {'tree':<40} {'event loop':>12} {'writer (ledger)':>16} {'total':>10}")
    for name, src in trees:
        loop, others = instructions(args.count, args.concurrency, src)
        print(f"  {name:<40} {loop:12,.0f} {others:16,.0f} {loop + others:10,.0f}")


if __name__ == "__main__":
    main()
