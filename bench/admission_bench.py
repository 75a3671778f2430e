"""Durable admission beside raw sqlite3 and the SQLite queues, in the same run: single commands
(one transaction each) and batches of 1,000, at synchronous=FULL and NORMAL (WAL everywhere),
with the WAL pages each commit writes.

Contestants, each on its own database file in a fresh directory:

- ours: `dispatcher.defer` / `defer_batch` (validation, canonical payload, identity digest with
  conflict detection, sequence and event numbers) on the local authority;
- raw sqlite3: `archetype.bench.RawLedger`, plain sqlite3 making the same row writes on the same
  schema (the command row and its keys), with none of the checks;
- huey (`SqliteHuey`, a task enqueued), persist-queue (`SQLiteQueue.put`) and litequeue
  (`LiteQueue.put`), each putting the same payload text. huey has no batch put: it is single only.

The peers are bench-only packages: run this with the bench environment (`bench/setup-env`, then
`bench/.venv/bin/python bench/admission_bench.py`); a peer that is not installed says so.

The commands are due at a far tick unless `run` is given another (`NEXT_TICK`: due at once, as a
command for the tick after the head is; schema version 20 puts such a command in no due index).

Every round runs every contestant in turn (interleaved, so background load hits all of them
alike); a figure is the best round of `--rounds`. WAL pages per commit: the WAL is truncated
(checkpoint), `--wal-commits` commits run, and the frames the WAL file grew by are divided by them;
ours are also counted by the b-tree each page belongs to (`archetype.bench.wal_pages_by_btree`).

The ledger's side alone, beside raw sqlite3 on the same catalog: `Ledger.admit` called directly on
one thread (no event loop, no caller validation, no hand-over), single and batched, as thread CPU
per command (best block: what a change to the ledger's statements or Python shows even when the
wall-clock figures above drown in load), and the writer thread's round trip of a no-op call.

    bench/.venv/bin/python bench/admission_bench.py [--single 500] [--batches 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from archetype.bench import (
    BENCH_WORLD,
    FAR_TICK,
    RawLedger,
    _items,
    _raw_rows,
    build_ledger,
    wal_pages_by_btree,
)
from archetype.commands import default_registry
from archetype.commands.ledger import Ledger
from archetype.commands.ledger_rows import AdmissionRow
from archetype.commands.port import SystemClock
from archetype.runtime import Runtime
from local_catalog import CATALOG_FILE, SqliteSqlPort
from local_catalog.writer import WriterThreadAuthority

try:
    from huey import SqliteHuey
except ImportError:
    SqliteHuey = None
try:
    import persistqueue
except ImportError:
    persistqueue = None
try:
    from litequeue import LiteQueue
except ImportError:
    LiteQueue = None

BATCH = 1_000
SYNC_MODES = ("FULL", "NORMAL")
TARGET_SINGLE_VS_BEST_PEER = 1.0
TARGET_BATCH_VS_RAW = 0.6


def _wal_frames(db: Path) -> int:
    wal = Path(f"{db}-wal")
    size = wal.stat().st_size if wal.exists() else 0
    page = sqlite3.connect(db).execute("PRAGMA page_size").fetchone()[0]
    return max(0, size - 32) // (page + 24)


def _truncate_wal(db: Path) -> None:
    conn = sqlite3.connect(db)
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        conn.close()
    if busy:
        raise RuntimeError(f"{db}: the WAL could not be truncated (a reader holds it)")


class Contestant:
    """One system on its own database: `put(i)` admits one command, `put_batch(start)` BATCH of them."""

    name = ""
    db: Path
    batched = True

    async def put(self, i: int) -> None:
        raise NotImplementedError

    async def put_batch(self, start: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Ours(Contestant):
    name = "ours (defer)"

    @classmethod
    async def open(cls, directory: Path, sync: str, count: int, tick: int = FAR_TICK) -> Ours:
        self = cls()
        await build_ledger(directory, BATCH)  # the world exists and already holds commands
        self.rt = await Runtime.open_local(directory, synchronous=sync)
        self.db = directory / CATALOG_FILE
        self.items = _items(BENCH_WORLD, "c", count, tick)  # built outside any timing
        return self

    async def put(self, i: int) -> None:
        item = self.items[i]
        await self.rt.dispatcher.defer(item.op, item.options, command_id=item.command_id)

    async def put_batch(self, start: int) -> None:
        await self.rt.dispatcher.defer_batch(self.items[start : start + BATCH])


class Raw(Contestant):
    name = "raw sqlite3"

    def __init__(self, directory: Path, sync: str, rows: list[dict[str, Any]]) -> None:
        self.db = directory / CATALOG_FILE
        self.raw = RawLedger(self.db, sync)
        self.rows = rows

    async def put(self, i: int) -> None:
        self.raw.admit([self.rows[i]])

    async def put_batch(self, start: int) -> None:
        self.raw.admit(self.rows[start : start + BATCH])

    def close(self) -> None:
        self.raw.close()


class Huey(Contestant):
    name = "huey"
    batched = False

    def __init__(self, directory: Path, sync: str, payload: str) -> None:
        assert SqliteHuey is not None
        self.db = directory / "huey.db"
        self.huey = SqliteHuey(filename=str(self.db), fsync=sync == "FULL")  # fsync: synchronous FULL, else 0
        self.huey.storage.conn.execute(f"PRAGMA synchronous = {sync}")

        @self.huey.task()
        def work(payload: str) -> None:
            pass

        self.work, self.payload = work, payload

    async def put(self, i: int) -> None:
        self.work(self.payload)  # enqueues: one INSERT of the pickled message, autocommit

    def close(self) -> None:
        self.huey.storage.close()


class PersistQueue(Contestant):
    name = "persist-queue"

    def __init__(self, directory: Path, sync: str, payload: str) -> None:
        assert persistqueue is not None
        # one queue, two connections: one committing every put, one committing at task_done()
        self.single = persistqueue.SQLiteQueue(str(directory / "queue"), auto_commit=True)
        self.batch = persistqueue.SQLiteQueue(str(directory / "queue"), auto_commit=False)
        for q in (self.single, self.batch):
            q._putter.execute(f"PRAGMA synchronous = {sync}")
        self.db = directory / "queue" / "data.db"
        self.payload = payload

    async def put(self, i: int) -> None:
        self.single.put(self.payload)

    async def put_batch(self, start: int) -> None:
        for _ in range(BATCH):
            self.batch.put(self.payload)
        self.batch.task_done()  # auto_commit=False: this commits the batch

    def close(self) -> None:
        self.single.close()
        self.batch.close()


class Litequeue(Contestant):
    name = "litequeue"

    def __init__(self, directory: Path, sync: str, payload: str) -> None:
        assert LiteQueue is not None
        self.db = directory / "litequeue.db"
        self.q = LiteQueue(str(self.db))
        self.q.conn.execute(f"PRAGMA synchronous = {sync}")
        self.payload = payload

    async def put(self, i: int) -> None:
        self.q.put(self.payload)

    async def put_batch(self, start: int) -> None:
        with self.q.transaction(mode="IMMEDIATE"):
            for _ in range(BATCH):
                self.q.put(self.payload)

    def close(self) -> None:
        self.q.close()


async def contestants(directory: Path, sync: str, count: int, tick: int) -> list[Contestant]:
    ours = await Ours.open(directory / "ours", sync, count, tick)
    raw_rows = _raw_rows(_items("raw", "c", count, tick), ours.rt.registry)
    raw_dir = directory / "raw"
    await build_ledger(raw_dir, BATCH)
    payload = raw_rows[0]["payload"]
    found: list[Contestant] = [ours, Raw(raw_dir, sync, raw_rows)]
    for cls, module in ((Huey, SqliteHuey), (PersistQueue, persistqueue), (Litequeue, LiteQueue)):
        if module is None:
            print(f"  ({cls.name} is not installed: run with the bench environment, bench/setup-env)")
            continue
        (directory / cls.name).mkdir(parents=True)
        found.append(cls(directory / cls.name, sync, payload))
    return found


async def run(sync: str, single: int, batches: int, rounds: int, wal_commits: int, directory: Path,
              tick: int = FAR_TICK) -> dict[str, Any]:
    per_round = single + batches * BATCH
    count = per_round * rounds + wal_commits + BATCH + 10
    group = await contestants(directory, sync, count, tick)
    best: dict[tuple[str, str], float] = {}
    used = 0

    async def timed(c: Contestant, fn: Callable[[], Any]) -> float:
        start = time.perf_counter()
        await fn()
        return time.perf_counter() - start

    for c in group:  # warm: the first commit of a connection pays for opening the world
        await c.put(used)
    used += 1
    for _ in range(rounds):
        gc.collect()
        spent = {c.name: 0.0 for c in group}
        for i in range(single):  # command by command, each contestant in turn
            for c in group:
                spent[c.name] += await timed(c, lambda c=c, at=used + i: c.put(at))
        used += single
        for c in group:
            best[c.name, "single"] = min(best.get((c.name, "single"), float("inf")), spent[c.name] / single)
        spent = {c.name: 0.0 for c in group}
        for b in range(batches):
            for c in group:
                if c.batched:
                    spent[c.name] += await timed(c, lambda c=c, at=used + b * BATCH: c.put_batch(at))
        used += batches * BATCH
        for c in group:
            if c.batched:
                best[c.name, "batch"] = min(best.get((c.name, "batch"), float("inf")), spent[c.name] / (batches * BATCH))
    pages: dict[tuple[str, str], float] = {}
    btrees: dict[str, float] = {}
    for c in group:
        _truncate_wal(c.db)
        for i in range(wal_commits):
            await c.put(used + i)
        pages[c.name, "single"] = _wal_frames(c.db) / wal_commits
        if isinstance(c, Ours):
            btrees = {name: count / wal_commits for name, count in wal_pages_by_btree(c.db).items()}
        if c.batched:
            _truncate_wal(c.db)
            await c.put_batch(used + wal_commits)
            pages[c.name, "batch"] = _wal_frames(c.db)
    for c in group:
        if isinstance(c, Ours):
            await c.rt.close()
        else:
            c.close()
    return {"best": best, "pages": pages, "btrees": btrees, "names": [c.name for c in group]}


LEDGER_BLOCK = 100  # single admissions per timed block of the ledger's side


async def ledger_side(sync: str, blocks: int, batches: int, directory: Path) -> dict[str, float]:
    """Thread CPU per command of `Ledger.admit` and of raw sqlite3 on one catalog, alternated block
    by block (best block each), and the writer thread's no-op round trip (best block, wall)."""
    await build_ledger(directory, BATCH)
    port = SqliteSqlPort(directory / CATALOG_FILE, synchronous=sync)
    ledger = Ledger(port, SystemClock())
    raw = RawLedger(directory / CATALOG_FILE, sync)
    count = blocks * LEDGER_BLOCK + batches * BATCH
    registry = default_registry()
    ours: list[AdmissionRow] = [{
        "command_id": item.command_id, "schema_version": 1, "scheduled_tick": FAR_TICK, "priority": 0,
        "operation": "spawn", "payload": registry.resolve(item.op).payload_of(item.op), "principal": None,
        "origin": "local", "max_attempts": 3, "reserved_entity_id": None, "request_digest": None,
    } for item in _items(BENCH_WORLD, "side", count, FAR_TICK)]  # fmt: skip
    theirs = _raw_rows(_items("raw", "side", count, FAR_TICK), registry)
    best = {"single": float("inf"), "raw single": float("inf"), "batch": float("inf"), "raw batch": float("inf")}

    def timed(name: str, fn: Callable[[], Any], n: int) -> None:
        start = time.thread_time()
        fn()
        best[name] = min(best[name], (time.thread_time() - start) / n)

    def singles(admit: Callable[[Any], Any], rows: list[Any]) -> Callable[[], None]:
        return lambda: [admit(row) for row in rows] and None

    for b in range(blocks):
        block = slice(b * LEDGER_BLOCK, (b + 1) * LEDGER_BLOCK)
        timed("single", singles(lambda row: ledger.admit(BENCH_WORLD, [row]), ours[block]), LEDGER_BLOCK)
        timed("raw single", singles(lambda row: raw.admit([row]), theirs[block]), LEDGER_BLOCK)
    for b in range(batches):
        at = blocks * LEDGER_BLOCK + b * BATCH
        timed("batch", lambda at=at: ledger.admit(BENCH_WORLD, ours[at : at + BATCH]), BATCH)
        timed("raw batch", lambda at=at: raw.admit(theirs[at : at + BATCH]), BATCH)
    raw.close()
    writer = WriterThreadAuthority(ledger, port)
    hop = float("inf")
    for _ in range(blocks):
        start = time.perf_counter()
        for _ in range(LEDGER_BLOCK):
            await writer._call(lambda: None, solo=False)
        hop = min(hop, (time.perf_counter() - start) / LEDGER_BLOCK)
    await writer.close()
    return {**best, "hop": hop}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--single", type=int, default=500, help="single admissions per round and contestant")
    parser.add_argument("--batches", type=int, default=5, help=f"batches of {BATCH:,} per round and contestant")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--wal-commits", type=int, default=50, help="single commits whose WAL pages are counted")
    parser.add_argument("--ledger-blocks", type=int, default=30,
                        help=f"blocks of {LEDGER_BLOCK} single admissions of the ledger's side alone (0: skip it)")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}, {os.cpu_count()} cpus, "
          f"load average {os.getloadavg()[0]:.1f}; best of {args.rounds} interleaved rounds")  # fmt: skip
    checks: list[bool] = []
    for sync in SYNC_MODES:
        with tempfile.TemporaryDirectory() as tmp:
            result = asyncio.run(run(sync, args.single, args.batches, args.rounds, args.wal_commits, Path(tmp)))
        best, pages, names = result["best"], result["pages"], result["names"]
        print(f"\nsynchronous={sync}, WAL (load average now {os.getloadavg()[0]:.1f})")
        print(f"  {'':<16} {'single cmd/s':>13} {'us/cmd':>8} {'WAL pages/commit':>17} | "
              f"{'batched cmd/s':>14} {'WAL pages/batch':>16}")  # fmt: skip
        for name in names:
            s = best[name, "single"]
            line = f"  {name:<16} {1 / s:13,.0f} {s * 1e6:8.1f} {pages[name, 'single']:17.1f} | "
            if (name, "batch") in best:
                line += f"{1 / best[name, 'batch']:14,.0f} {pages[name, 'batch']:16,.0f}"
            else:
                line += f"{'(no batch put)':>31}"
            print(line)
        ours, raw = names[0], names[1]
        print("  ours, WAL pages per single commit by b-tree: "
              + ", ".join(f"{name} {n:.2f}" for name, n in sorted(result["btrees"].items(), key=lambda kv: -kv[1])))
        peers = names[2:]
        if peers:
            top = min(peers, key=lambda n: best[n, "single"])
            single_ratio = best[top, "single"] / best[ours, "single"]
            print(f"  single: ours {single_ratio:.2f}x the best SQLite queue ({top}); target >= "
                  f"{TARGET_SINGLE_VS_BEST_PEER}x{'' if sync == 'FULL' else ' (judged at FULL)'}")  # fmt: skip
            if sync == "FULL":
                checks.append(single_ratio >= TARGET_SINGLE_VS_BEST_PEER)
        batch_ratio = best[raw, "batch"] / best[ours, "batch"]
        print(f"  batched: ours {batch_ratio:.2f}x raw sqlite3 making the same row writes; target >= "
              f"{TARGET_BATCH_VS_RAW}x{'' if sync == 'FULL' else ' (judged at FULL)'}")  # fmt: skip
        if sync == "FULL":
            checks.append(batch_ratio >= TARGET_BATCH_VS_RAW)
        if args.ledger_blocks:
            with tempfile.TemporaryDirectory() as tmp:
                side = asyncio.run(ledger_side(sync, args.ledger_blocks, args.batches * 2, Path(tmp)))
            print(f"  the ledger's side (Ledger.admit on one thread, thread CPU, best block): single "
                  f"{side['single'] * 1e6:.1f} us vs raw sqlite3 {side['raw single'] * 1e6:.1f} us "
                  f"({side['raw single'] / side['single']:.2f}x); batched {side['batch'] * 1e6:.1f} us/cmd vs "
                  f"{side['raw batch'] * 1e6:.1f} ({side['raw batch'] / side['batch']:.2f}x); the writer thread's "
                  f"round trip of a no-op {side['hop'] * 1e6:.1f} us")  # fmt: skip
    print(f"\n{sum(checks)}/{len(checks)} targets met")


if __name__ == "__main__":
    main()
