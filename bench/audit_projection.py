"""Projection throughput: AuditLog (outbox read + one Iceberg commit per batch + acknowledgement)
against a raw pyiceberg append of the same rows, pre-converted to Arrow, in the same run.

    .venv/bin/python bench/audit_projection.py [--events 200000] [--batch 10000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import tempfile
import time
from pathlib import Path

from pyiceberg.catalog.sql import SqlCatalog

from archetype.audit import AuditLog
from archetype.audit.schema import PARTITION_SPEC, PROPERTIES, SCHEMA, SORT_ORDER, events_to_arrow
from local_catalog import open_local_authority

ADMIT_CHUNK = 1_000


async def build_outbox(authority, world_id: str, events: int) -> None:
    await authority.create_world(world_id=world_id, name=world_id)
    payload = json.dumps({"operation": "despawn", "world_id": world_id, "entity_id": 1}, separators=(",", ":"))
    for start in range(0, events, ADMIT_CHUNK):
        rows = [
            {"command_id": f"cmd-{n:08d}", "schema_version": 1, "scheduled_tick": n // 100, "priority": 0,
             "operation": "despawn", "payload": payload, "principal": f"user-{n % 17}", "origin": "gateway",
             "max_attempts": 3, "reserved_entity_id": None, "request_digest": None}
            for n in range(start, min(events, start + ADMIT_CHUNK))
        ]  # fmt: skip
        await authority.admit(world_id=world_id, commands=rows)


async def read_all(authority, world_id: str) -> list[dict]:
    events, after = [], 0
    while page := await authority.read_outbox(world_id=world_id, after_seq=after, limit=10_000):
        events += page
        after = page[-1]["event_seq"]
    return events


def raw_append(directory: Path, name: str, events: list[dict], batch: int, convert_in_timing: bool) -> float:
    """Plain `table.append` per batch into a fresh table of the same design. With
    `convert_in_timing`, turning the rows (outbox dicts) into Arrow is part of the timed work."""
    catalog = SqlCatalog(name, uri=f"sqlite:///{directory}/{name}.db", warehouse=(directory / name).as_uri())
    catalog.create_namespace("raw")
    table = catalog.create_table(("raw", "events"), schema=SCHEMA, partition_spec=PARTITION_SPEC,
                                 sort_order=SORT_ORDER, properties=PROPERTIES)  # fmt: skip
    chunks = [events[i : i + batch] for i in range(0, len(events), batch)]
    prebuilt = None if convert_in_timing else [events_to_arrow(chunk) for chunk in chunks]
    started = time.perf_counter()
    for index, chunk in enumerate(chunks):
        table.append(events_to_arrow(chunk) if prebuilt is None else prebuilt[index])
    return time.perf_counter() - started


async def projection_round(directory: Path, events: int, batch: int) -> tuple[list[dict], float]:
    """A fresh ledger and audit table, `events` events in one world; returns its rows and the projection time."""
    authority = open_local_authority(directory / "data")
    await build_outbox(authority, "warmup", 1)
    await build_outbox(authority, "bench", events)
    rows = await read_all(authority, "bench")
    audit = AuditLog.open_local(directory / "data", authority, batch_size=batch)
    await audit.project_world("warmup")  # table open, writer process started: as a running projector has them
    gc.freeze()  # the bench's own copy of every row must not make the timed work's GC passes longer
    started = time.perf_counter()
    appended = await audit.project_world("bench")
    elapsed = time.perf_counter() - started
    gc.unfreeze()
    assert appended == events and (await authority.watermark(world_id="bench"))["pending"] == 0
    await audit.close()
    await authority.close()
    return rows, elapsed


async def main(events: int, batch: int, rounds: int) -> None:
    """`rounds` interleaved rounds, each on fresh tables; medians reported."""
    raw, append_only, projection = [], [], []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(prefix="audit-bench-") as tmp:
            directory = Path(tmp)
            rows, projection_s = await projection_round(directory, events, batch)
            projection.append(projection_s)
            gc.freeze()
            raw.append(raw_append(directory, "raw", rows, batch, convert_in_timing=True))
            append_only.append(raw_append(directory, "append_only", rows, batch, convert_in_timing=False))
            gc.unfreeze()

    raw_rate, append_only_rate, projection_rate = (events / statistics.median(t) for t in (raw, append_only, projection))
    print(f"events {events} per round, {rounds} rounds, batch {batch} ({-(-events // batch)} commits per round); medians")
    print(f"raw pyiceberg append of the rows (dicts -> Arrow -> append): {raw_rate:10,.0f} events/s")
    print(f"raw pyiceberg append, Arrow pre-built (append only):         {append_only_rate:10,.0f} events/s")
    print(f"AuditLog projection (outbox read -> commit -> acknowledge):  {projection_rate:10,.0f} events/s")
    print(f"projection / raw: {projection_rate / raw_rate:.0%} (target >= 80%); "
          f"projection / append only: {projection_rate / append_only_rate:.0%}")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.events, args.batch, args.rounds))
