"""History at scale: one world with 1,000,000 audit events (plus a small neighbour world).

Prints, before and after compaction: data files a one-command GetAuditHistory must read versus
all data files (pyiceberg scan planning), and the query's latency. Then the cost of the two
dedup strategies measured on the same table: dedup on write (anti-join each batch against the
event ids already stored) versus dedup on read (inside every history query).

    .venv/bin/python bench/audit_history.py [--events 1000000] [--days 10] [--batch 20000]
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, LessThanOrEqual

from archetype.audit.catalog import local_catalog
from archetype.audit.history import dedupe, row_filter
from archetype.audit.maintenance import maintain
from archetype.audit.schema import events_to_arrow
from archetype.audit.table import AuditTable
from archetype.commands import GetAuditHistory

START_MS = 1_700_000_000_000
DAY_MS = 86_400_000
SETTLE_LAG = 500  # events between a command's admission and its settlement


def world_events(world_id: str, count: int, days: int, seed: int):
    """`count` events, two per command (admitted, then applied about SETTLE_LAG events later),
    spread evenly over `days`; command ids are random hex like the scheduler's."""
    rng = random.Random(seed)
    commands = [f"{rng.getrandbits(64):016x}" for _ in range(count // 2)]
    step_ms = days * DAY_MS // count
    order = sorted([(2 * n, n, "admitted") for n in range(len(commands))]
                   + [(2 * (n + SETTLE_LAG // 2) + 1, n, "applied") for n in range(len(commands))])  # fmt: skip
    for seq, (_, command, kind) in enumerate(order, start=1):
        yield {
            "event_id": f"{world_id}/{seq}", "world_id": world_id, "event_seq": seq, "command_id": commands[command],
            "event_type": kind, "status": "PENDING" if kind == "admitted" else "APPLIED", "operation": "update",
            "tick": seq // 1_000, "principal": f"user-{command % 97}", "origin": "gateway",
            "occurred_at": START_MS + seq * step_ms, "payload": '{"attempts":1,"max_attempts":3,"error":null}',
        }  # fmt: skip


def load(table: AuditTable, world_id: str, count: int, days: int, batch: int) -> float:
    started, chunk = time.perf_counter(), []
    for event in world_events(world_id, count, days, seed=len(world_id)):
        chunk.append(event)
        if len(chunk) == batch:
            table.append_in_order(world_id, events_to_arrow(chunk))
            chunk = []
    if chunk:
        table.append_in_order(world_id, events_to_arrow(chunk))
    return time.perf_counter() - started


def timed(fn, repeat: int = 7) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def report(table: AuditTable, label: str, command_id: str, tick: int) -> None:
    query = GetAuditHistory(world_id="big", command_id=command_id)
    planned, total = table.files(row_filter(query))
    seconds, events = timed(lambda: table.history(query))
    print(f"[{label}] one-command history: {planned} of {total} data files planned, "
          f"{len(events)} events, median {seconds * 1000:.1f} ms")  # fmt: skip
    ranged = GetAuditHistory(world_id="big", command_id=command_id, tick_from=tick, tick_to=tick + 1)
    planned, _ = table.files(row_filter(ranged))
    seconds, _ = timed(lambda: table.history(ranged))
    print(f"[{label}] ... with its tick range:  {planned} of {total} data files planned, median {seconds * 1000:.1f} ms")
    planned, _ = table.files(EqualTo("world_id", "small"))
    print(f"[{label}] the small world's files:    {planned} of {total}")
    for after in (0, 700_000):
        first_page = GetAuditHistory(world_id="big", after_event_seq=after, limit=100)
        seconds, _ = timed(lambda: table.history(first_page))  # noqa: B023 - called in this iteration
        print(f"[{label}] a 100-event page of the world after event {after}: median {seconds * 1000:.1f} ms")


def dedup_costs(table: AuditTable, batch: int, tick: int) -> None:
    """Dedup on write must look up each batch's ids in the table; dedup on read sorts one answer."""
    recent = table.scan(And(EqualTo("world_id", "big"), GreaterThanOrEqual("event_seq", 400_001),
                            LessThanOrEqual("event_seq", 400_000 + batch)))  # fmt: skip
    ids = recent.column("event_id")

    def write_side() -> int:  # the anti-join a dedup-on-write appender needs before every commit
        lo, hi = 400_001, 400_000 + batch
        stored = table.table.scan(
            row_filter=And(EqualTo("world_id", "big"), GreaterThanOrEqual("event_seq", lo), LessThanOrEqual("event_seq", hi)),
            selected_fields=("event_id",),
        ).to_arrow().column("event_id")
        return pc.sum(pc.is_in(ids, value_set=stored)).as_py()

    def write_side_unordered() -> int:  # a queue batch has no sequence range to prune by: the world's ids
        stored = table.table.scan(row_filter=EqualTo("world_id", "big"), selected_fields=("event_id",)).to_arrow().column("event_id")
        return pc.sum(pc.is_in(ids, value_set=stored)).as_py()

    answer = table.scan(row_filter(GetAuditHistory(world_id="big", tick_from=tick, tick_to=tick + 1)))
    doubled = pa.concat_tables([answer, answer])
    write_s, _ = timed(write_side, repeat=3)
    unordered_s, _ = timed(write_side_unordered, repeat=3)
    read_s, _ = timed(lambda: dedupe(doubled), repeat=7)
    mark_s, _ = timed(lambda: table.projected_seq("big"), repeat=7)
    print(f"dedup on write, ordered batch of {batch} (ids in its sequence range): {write_s * 1000:8.1f} ms per batch")
    print(f"dedup on write, unordered batch (all of the world's ids):            {unordered_s * 1000:8.1f} ms per batch")
    print(f"dedup on read, a {doubled.num_rows}-row answer with every row twice:              {read_s * 1000:8.2f} ms per query")
    print(f"committed projection mark (what the local projector uses):           {mark_s * 1e6:8.1f} us per batch")


def main(events: int, days: int, batch: int) -> None:
    with tempfile.TemporaryDirectory(prefix="audit-history-") as tmp:
        table = AuditTable(local_catalog(Path(tmp)))
        load_s = load(table, "big", events, days, batch) + load(table, "small", 10_000, days, batch)
        gc.collect()
        print(f"loaded {events + 10_000} events in {load_s:.1f} s ({(events + 10_000) / load_s:,.0f} events/s, batches of {batch})")
        probe = next(e for e in world_events("big", events, days, seed=3) if e["event_seq"] == events // 2)
        report(table, "appended", probe["command_id"], probe["tick"])
        started = time.perf_counter()
        done = maintain(table, older_than_ms=0, keep_last=1)
        print(f"maintenance {time.perf_counter() - started:.1f} s: {done.compaction.partitions} partitions, "
              f"{done.compaction.files_before} -> {done.compaction.files_after} files, "
              f"{done.snapshots_expired} snapshots expired")  # fmt: skip
        report(table, "compacted", probe["command_id"], probe["tick"])
        dedup_costs(table, batch, probe["tick"])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--days", type=int, default=10)
    parser.add_argument("--batch", type=int, default=20_000)
    args = parser.parse_args()
    main(args.events, args.days, args.batch)
