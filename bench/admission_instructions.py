"""CPU instructions per single admission, counted by callgrind: stable to a fraction of a percent
run to run, where wall-clock figures on this machine move by tens of percent.

    .venv/bin/python bench/admission_instructions.py [--counts 100 600] [--baseline-src /work/main/src]

Each count runs in a process of its own under `valgrind --tool=callgrind` (one file per thread):
a local authority at synchronous=NORMAL whose world already holds 1,000 commands, warmed by 50
admissions, then `count` single `defer`s of a Spawn of one Position (bench/admission_bench.py's
`Ours`). Both runs of a pair build the larger run's inputs (operations, options, items) before
the first admission, so that building them is not counted as admitting them. Instructions per
admission are the difference of the two runs over the difference of their counts, so start-up
and warm-up cancel: the event loop's thread (the caller's validation, the scheduler, the
hand-over) and the catalog's writer thread (the ledger's transaction, SQLite).
This tree's `src` comes first on PYTHONPATH (not whatever the interpreter's environment installed:
a worktree may share another's); with `--baseline-src`, the same with that tree's `src` (this
script and the bench helpers stay this tree's).

The two threads' counts move by several percent with how the threads happen to interleave (a busy
machine changes it), so `--parts` counts instead the two pieces that run on one thread alone, the
same way: `caller`, the `defer` with the authority's `admit` answered at once (the dispatcher's
and scheduler's validation, no hand-over, no SQL), `caller_batch`, the same per command of
`defer_batch`es of BATCH (both counted inside the call that makes their admissions alone, each
driven to its end as it never suspends: the runs' start-up is not counted at all), and `ledger`, `Ledger.admit` of the same rows
in a transaction of the port on the calling thread (the ledger's checks, SQLite, the write lock;
not the writer thread's hand-over), and `batched`, the same per command of `Ledger.admit`s of
BATCH rows. The ledger pieces' catalog and rows are made once outside callgrind, each run works
on a copy of them, and every run has the same hash seed: their counts repeat to a few instructions.
`--pieces` picks some of the three. `--keep DIR` keeps each run's callgrind files in DIR (for
`callgrind_annotate --inclusive=yes`), named by tree, piece and count.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
WARM_UP = 50
PARTS_MAX = 1_050  # --parts: the most admissions a run of one part makes
BATCH = 100  # the `batched` piece's commands per Ledger.admit
BATCH_SCALE = 10  # the `batched` piece admits this many times --counts
PIECES = ("caller", "caller_batch", "ledger", "batched")
SCALED = ("caller_batch", "batched")  # pieces counted per command of batches: BATCH_SCALE times the counts
ROWS_FILE = "rows.json"
# The caller's pieces count their admissions alone: the run's start-up (an interpreter, a runtime,
# imports some of which land on the loop's thread in one run and on another in the next) moved the
# difference of two runs by 10-20k per admission. `sys.call_tracing` is a call nothing else makes.
COUNTED = ["--collect-atstart=no", "--toggle-collect=sys_call_tracing"]
LOOP_THREAD = "01"  # callgrind's name for the process's first thread, which runs the event loop


async def caller(count: int, directory: Path, batch: int) -> None:
    """`count` commands `defer`red (`batch` 1) or `defer_batch`ed `batch` at a time, after WARM_UP
    single ones, against an authority that answers at once."""
    from admission_bench import Ours

    ours = await Ours.open(directory, "NORMAL", WARM_UP + PARTS_MAX * (BATCH_SCALE if batch > 1 else 1))  # alike whatever the count
    authority = ours.rt.dispatcher.scheduler.authority
    for i in range(WARM_UP):
        await ours.put(i)

    async def answered(world_id: str, rows: list[Any], quota: int | None) -> list[dict[str, Any]]:
        return [{"command_id": r["command_id"], "sequence": 1, "replayed": False, "digest": "0" * 64} for r in rows]

    admit_for_real, authority.admit = authority.admit, answered
    # (the collector off: whether one of its full passes lands in one run or the other moved this
    # piece's figure by 40k per admission between runs of 200; an admission leaves few objects)
    def admissions() -> None:
        for i in range(WARM_UP, WARM_UP + count, batch):
            at_once(ours.put(i) if batch == 1 else ours.rt.dispatcher.defer_batch(ours.items[i : i + batch]))

    gc.collect()
    gc.disable()
    try:
        sys.call_tracing(admissions, ())  # COUNTED: callgrind counts inside this call alone
    finally:
        authority.admit = admit_for_real
        await ours.rt.close()


def at_once(coroutine: Any) -> None:
    """Run a coroutine that never suspends (an admission whose every await is answered at once)
    to its end, on this thread, outside the event loop's machinery."""
    try:
        coroutine.send(None)
    except StopIteration:
        return
    coroutine.close()
    raise RuntimeError("an admission suspended: the caller's pieces count only admissions answered at once")


def prepare(count: int, directory: Path) -> None:
    """The `ledger` and `batched` parts' catalog and rows, made once outside callgrind (a runtime
    and its threads count differently run to run): the catalog in `directory`, the rows in
    `directory`/rows.json."""
    from admission_bench import Ours

    async def rows() -> list[tuple[str, Any]]:
        ours = await Ours.open(directory, "NORMAL", count)
        try:
            return [ours.rt.dispatcher.scheduler._admission_row(item, None, "local") for item in ours.items]
        finally:
            await ours.rt.close()

    (directory / ROWS_FILE).write_text(json.dumps(asyncio.run(rows())))


def ledger(count: int, directory: Path, batch: int) -> None:
    """`Ledger.admit` of `count` prepared rows, `batch` a transaction, after WARM_UP rows alone."""
    from archetype.commands.ledger import Ledger
    from archetype.commands.port import SystemClock
    from local_catalog import CATALOG_FILE, SqliteSqlPort

    prepared = json.loads((directory / ROWS_FILE).read_text())
    port = SqliteSqlPort(directory / CATALOG_FILE, synchronous="NORMAL")
    catalog = Ledger(port, SystemClock())
    for world_id, row in prepared[:WARM_UP]:
        port.transaction(lambda: catalog.admit(world_id, [row], None))  # noqa: B023 (called at once)
    rest = prepared[WARM_UP : WARM_UP + count]
    for start in range(0, count, batch):
        rows = [row for _, row in rest[start : start + batch]]
        port.transaction(lambda: catalog.admit(prepared[0][0], rows, None))  # noqa: B023 (called at once)
    port.close()


async def admit(count: int, directory: Path, items: int) -> None:
    from admission_bench import Ours

    ours = await Ours.open(directory, "NORMAL", items)  # built alike whatever the count: `items` is the larger run's
    try:
        for i in range(WARM_UP + count):
            await ours.put(i)
    finally:
        await ours.rt.close()


KEEP: Path | None = None  # --keep: where each run's callgrind files are copied


def instructions(count: int, src: Path | None, part: str = "defer", prepared: Path | None = None,
                 items: int = 0) -> dict[str, int]:
    """Instructions of a run of `count` admissions under callgrind, by thread (1: the event loop's);
    `prepared`: a catalog directory (`prepare`) the run works on a copy of; `items` of the
    admissions built first (the larger run's: so both runs of a pair build the same inputs).
    With KEEP, the run's files are copied there as <tree>-<part>-<count>.callgrind-<thread>."""
    with tempfile.TemporaryDirectory(prefix="archetype-callgrind-") as tmp:
        out = Path(tmp) / "callgrind.out"
        if prepared is not None:
            shutil.copytree(prepared, Path(tmp) / "catalog")
        counted = COUNTED if part.startswith("caller") else []
        subprocess.run(["valgrind", "--tool=callgrind", "--separate-threads=yes", *counted, f"--callgrind-out-file={out}",
                        sys.executable, __file__, "--run", str(count), "--part", part, "--items", str(max(items, WARM_UP + count)),
                        "--directory", tmp],
                       check=True, env=_env(src), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        totals = {}
        for path in Path(tmp).glob("callgrind.out-*"):
            thread = path.name.rsplit("-", 1)[1]
            match = re.search(r"^(?:summary|totals): (\d+)", path.read_text(errors="replace"), re.MULTILINE)
            totals[thread] = int(match.group(1)) if match else 0
            if KEEP is not None:
                tree = src.parent.name if src else "env"
                KEEP.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, KEEP / f"{tree}-{part}-{count}.callgrind-{thread}")
        return totals


def _env(src: Path | None) -> dict[str, str]:
    # (a fixed hash seed: sets and dicts of strings then iterate alike in every run)
    path = os.pathsep.join(filter(None, [str(src) if src else "", str(BENCH)]))
    return dict(os.environ, PYTHONPATH=path, PYTHONHASHSEED="0")


def per_admission(counts: tuple[int, int], src: Path | None) -> tuple[float, float]:
    """(event loop thread, every other thread) instructions per admission."""
    small, large = (instructions(count, src, items=WARM_UP + max(counts)) for count in counts)
    span = counts[1] - counts[0]
    loop = (large.get(LOOP_THREAD, 0) - small.get(LOOP_THREAD, 0)) / span
    others = (sum(large.values()) - large.get(LOOP_THREAD, 0) - sum(small.values()) + small.get(LOOP_THREAD, 0)) / span
    return loop, others


def one_thread(counts: tuple[int, int], src: Path | None, part: str) -> float:
    """Instructions per admission of a piece that runs on one thread: the event loop's for the caller's
    pieces, every thread's for the ledger's (which run on the calling thread, no loop)."""
    if part in ("caller", "caller_batch"):
        # the event loop's thread only: the admissions' work is all on it (the authority answers
        # there), and one of the runtime's other threads counted 9M-35M per run whatever the run's
        # size, which moved the sum of every thread by 25k-80k per admission from run to run
        small, large = (instructions(count, src, part).get(LOOP_THREAD, 0) for count in counts)
        return (large - small) / (counts[1] - counts[0])
    with tempfile.TemporaryDirectory(prefix="archetype-prepared-") as prepared:
        subprocess.run([sys.executable, __file__, "--run", str(WARM_UP + counts[1]), "--part", "prepare",
                        "--directory", prepared], check=True, env=_env(src), stdout=subprocess.DEVNULL)  # fmt: skip
        small, large = (sum(instructions(count, src, part, Path(prepared) / "catalog").values()) for count in counts)
    return (large - small) / (counts[1] - counts[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs=2, default=(100, 600))
    parser.add_argument("--baseline-src", type=Path)
    parser.add_argument("--parts", action="store_true", help="count the caller's and the ledger's piece, each on one thread")
    parser.add_argument("--pieces", nargs="+", choices=PIECES, default=PIECES,
                        help=f"with --parts, which (caller_batch, batched: per command of a defer_batch / Ledger.admit of {BATCH}, "
                             f"{BATCH_SCALE}x the counts)")
    parser.add_argument("--keep", type=Path, help="copy every run's callgrind files to this directory (for "
                        "callgrind_annotate --inclusive=yes; bench/callgrind_delta.py subtracts a pair)")
    parser.add_argument("--run", type=int, help=argparse.SUPPRESS)  # the child under callgrind
    parser.add_argument("--part", default="defer", help=argparse.SUPPRESS)
    parser.add_argument("--items", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--directory", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run is not None:
        directory = args.directory / "catalog"
        if args.part == "prepare":
            prepare(args.run, directory)
        elif args.part in ("ledger", "batched"):
            ledger(args.run, directory, BATCH if args.part == "batched" else 1)
        else:
            batch = BATCH if args.part == "caller_batch" else 1
            asyncio.run(caller(args.run, directory, batch) if args.part.startswith("caller") else admit(args.run, directory, args.items))
        return
    global KEEP
    KEEP = args.keep
    trees = [("this tree", BENCH.parent / "src")] + ([(f"baseline ({args.baseline_src})", args.baseline_src)] if args.baseline_src else [])
    if args.parts:
        if max(args.counts) > PARTS_MAX:
            parser.error(f"--parts counts at most {PARTS_MAX}")
        print(f"instructions per admission of each piece on one thread, callgrind, runs of {args.counts[0]} and {args.counts[1]}")
        print(f"  {'tree':<40}" + "".join(f" {piece:>10}" for piece in args.pieces))
        for name, src in trees:
            figures = [one_thread(tuple(count * (BATCH_SCALE if piece in SCALED else 1) for count in args.counts), src, piece)
                       for piece in args.pieces]  # fmt: skip
            print(f"  {name:<40}" + "".join(f" {figure:10,.0f}" for figure in figures))
        return
    print(f"instructions per single admission (defer, NORMAL), callgrind, runs of {args.counts[0]} and {args.counts[1]}")
    print(f"  {'tree':<40} {'event loop':>12} {'writer (ledger)':>16} {'total':>10}")
    for name, src in trees:
        loop, others = per_admission(tuple(args.counts), src)
        print(f"  {name:<40} {loop:12,.0f} {others:16,.0f} {loop + others:10,.0f}")


if __name__ == "__main__":
    main()
