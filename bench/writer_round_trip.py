"""The writer thread's round trip of a no-op call (local_catalog.writer): what handing a ledger
call to the catalog's writer thread and its answer back to the event loop costs, apart from the
call itself.

    bench/.venv/bin/python bench/writer_round_trip.py [--calls 2000] [--blocks 5] [--baseline-src <tree>/src]

Per tree, each in a process of its own (this tree's `src`, or the baseline's, first on
PYTHONPATH): wall microseconds per round trip (best block of `--calls`, on asyncio's own loop
and on uvloop, the loop `archetype serve` runs), then instructions per round trip counted by
callgrind on the event loop's thread and on the others (runs of 100 and 1,100 calls,
differenced: start-up cancels). Wall time moves with the machine's load and how deep its idle
cores sleep (a thread woken on an idle core waits for it); the instructions do not.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
COUNTS = (100, 1_100)


async def round_trips(calls: int, blocks: int) -> float:
    """Best block's seconds per no-op round trip (after a block's warm-up)."""
    from archetype.commands.ledger import Ledger
    from archetype.commands.port import SystemClock
    from local_catalog import CATALOG_FILE, SqliteSqlPort
    from local_catalog.writer import WriterThreadAuthority

    def nothing() -> None:
        return None

    with tempfile.TemporaryDirectory() as tmp:
        port = SqliteSqlPort(Path(tmp) / CATALOG_FILE, synchronous="NORMAL")
        writer = WriterThreadAuthority(Ledger(port, SystemClock()), port)
        best = float("inf")
        for block in range(blocks + 1):
            start = time.perf_counter()
            for _ in range(calls):
                await writer._call(nothing, solo=False)
            if block:
                best = min(best, (time.perf_counter() - start) / calls)
        await writer.close()
    return best


def _env(src: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), str(BENCH)]), PYTHONHASHSEED="0")


def _child(src: Path, *args: str) -> str:
    return subprocess.run([sys.executable, __file__, *args], env=_env(src), check=True, capture_output=True, text=True).stdout


def instructions(src: Path, calls: int) -> dict[str, int]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        subprocess.run(["valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={out}",
                        sys.executable, __file__, "--run", "asyncio", "--calls", str(calls), "--blocks", "0"],
                       env=_env(src), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        totals = {}
        for path in Path(tmp).glob("callgrind.out-*"):
            match = re.search(r"^(?:summary|totals): (\d+)", path.read_text(errors="replace"), re.MULTILINE)
            totals[path.name.rsplit("-", 1)[1]] = int(match.group(1)) if match else 0
        return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2_000)
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--baseline-src", type=Path)
    parser.add_argument("--no-instructions", action="store_true")
    parser.add_argument("--run", choices=("asyncio", "uvloop"), help=argparse.SUPPRESS)  # the child
    args = parser.parse_args()
    if args.run:
        runner = asyncio.run if args.run == "asyncio" else __import__("uvloop").run
        print(runner(round_trips(args.calls, args.blocks)))
        return
    trees = [("this tree", BENCH.parent / "src")] + ([(f"baseline ({args.baseline_src})", args.baseline_src)] if args.baseline_src else [])
    print(f"the writer thread's round trip of a no-op, load average {os.getloadavg()[0]:.1f}")
    print(f"  {'tree':<40} {'asyncio us':>11} {'uvloop us':>10} {'loop instr':>11} {'others instr':>13}")
    for name, src in trees:
        walls = [float(_child(src, "--run", loop, "--calls", str(args.calls), "--blocks", str(args.blocks))) * 1e6
                 for loop in ("asyncio", "uvloop")]  # fmt: skip
        line = f"  {name:<40} {walls[0]:11.1f} {walls[1]:10.1f}"
        if not args.no_instructions:
            small, large = (instructions(src, count) for count in COUNTS)
            span = COUNTS[1] - COUNTS[0]
            loop = (large.get("01", 0) - small.get("01", 0)) / span
            others = (sum(large.values()) - sum(small.values())) / span - loop
            line += f" {loop:11,.0f} {others:13,.0f}"
        print(line)


if __name__ == "__main__":
    main()
