"""AuditLog projection: append-then-acknowledge, failure without acknowledgement, replay without
duplicates, lag per world, concurrent projectors, and the partition layout."""

from __future__ import annotations

import asyncio
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyiceberg.expressions import EqualTo

from archetype.audit import AuditLog
from archetype.audit.writer import AuditWriteError
from archetype.commands import DurableOptions, GetAuditHistory
from archetype.world import Despawn
from tests.audit.conftest import DAY_MS, populate
from tests.support.faults import AuthoritySeam

pytestmark = pytest.mark.timeout(120)

EXPECTED = {"w1": 5, "w2": 1}  # events appended per world by populate()


def RecordingAuthority(inner, before=None) -> AuthoritySeam:
    """The real authority, with a hook run before each call (to observe or to fail it)."""
    return AuthoritySeam(inner, before=before)


def rows_of(audit: AuditLog, world_id: str) -> list[int]:
    return sorted(audit.table.scan(EqualTo("world_id", world_id)).column("event_seq").to_pylist())


async def test_projection_appends_each_event_once_and_acknowledges_it(rt, clock):
    await populate(rt, clock)
    assert await rt.audit.project_once() == EXPECTED
    assert rows_of(rt.audit, "w1") == [1, 2, 3, 4, 5]
    assert [lag["pending"] for lag in await rt.audit.lag()] == [0, 0]
    assert await rt.authority.read_outbox(world_id="w1") == []
    assert await rt.audit.project_once() == {}  # nothing pending: no empty commits either
    assert len(rt.audit.table.table.snapshots()) == 2


async def test_acknowledgement_follows_the_commit_of_the_batch(rt, clock, tmp_path):
    await populate(rt, clock)
    seen_at_ack = []

    def before(method, args):
        if method == "acknowledge_outbox":
            seen_at_ack.append((args["up_to_seq"], rows_of(audit, args["world_id"])))

    audit = AuditLog.open_local(tmp_path / "data", RecordingAuthority(rt.authority, before), batch_size=2)
    await audit.project_once()
    assert [up_to for up_to, _ in seen_at_ack] == [2, 4, 5, 1]  # w1 in batches of two, then w2
    for up_to, committed in seen_at_ack:  # everything acknowledged is in the table (the next batch may be too)
        assert set(range(1, up_to + 1)) <= set(committed)
    await audit.close()


async def test_a_failed_append_acknowledges_nothing_and_the_next_round_recovers(rt, clock, tmp_path):
    await populate(rt, clock)
    data_files = Path(rt.audit.table.table.location().removeprefix("file://")) / "data"
    data_files.write_text("not a directory")  # the writer cannot store Parquet files: every append fails
    with pytest.raises(AuditWriteError):
        await rt.audit.project_world("w1")
    assert (await rt.authority.watermark(world_id="w1"))["pending"] == 5
    assert len(await rt.authority.read_outbox(world_id="w1")) == 5
    assert rows_of(rt.audit, "w1") == []

    data_files.unlink()
    await rt.audit.project_world("w1")
    assert rows_of(rt.audit, "w1") == [1, 2, 3, 4, 5]


async def test_a_crash_between_append_and_acknowledgement_replays_without_duplicates(rt, clock, tmp_path):
    await populate(rt, clock)

    def crash(method, args):
        if method == "acknowledge_outbox":
            raise ConnectionError("projector killed before acknowledging")

    crashing = AuditLog.open_local(tmp_path / "data", RecordingAuthority(rt.authority, crash))
    with pytest.raises(ConnectionError):
        await crashing.project_world("w1")
    await crashing.close()
    assert rows_of(rt.audit, "w1") == [1, 2, 3, 4, 5]  # committed ...
    assert (await rt.authority.watermark(world_id="w1"))["pending"] == 5  # ... not acknowledged

    restarted = AuditLog.open_local(tmp_path / "data", RecordingAuthority(rt.authority))
    assert await restarted.project_world("w1") == 0  # the committed mark says: nothing to append
    assert (await restarted.authority.watermark(world_id="w1"))["pending"] == 0
    assert rows_of(restarted, "w1") == [1, 2, 3, 4, 5]
    history = await restarted.history(GetAuditHistory(world_id="w1"))
    assert [e.event_seq for e in history] == [1, 2, 3, 4, 5]
    await restarted.close()


async def test_duplicate_rows_from_a_replayed_delivery_are_invisible_in_history(rt, clock):
    await populate(rt, clock)
    events = await rt.authority.read_outbox(world_id="w1")
    rt.audit.table.append(events)
    rt.audit.table.append(list(reversed(events[1:4])))  # a redelivery, out of order
    assert len(rows_of(rt.audit, "w1")) == 8
    history = await rt.audit.history(GetAuditHistory(world_id="w1"))
    assert [e.event_id for e in history] == [f"w1/{seq}" for seq in range(1, 6)]


async def test_lag_is_reported_per_world(rt, clock):
    await populate(rt, clock)
    lags = {lag["world_id"]: lag for lag in await rt.audit.lag()}
    assert lags["w1"] == {"world_id": "w1", "committed_seq": 5, "projected_seq": 0, "pending": 5}
    assert lags["w2"]["pending"] == 1
    await rt.audit.project_world("w1")
    lags = {lag["world_id"]: lag for lag in await rt.audit.lag()}
    assert (lags["w1"]["pending"], lags["w2"]["pending"]) == (0, 1)
    await rt.dispatcher.defer(Despawn(world_id="w1", entity_id=7), DurableOptions(tick=9))
    assert {lag["world_id"]: lag["pending"] for lag in await rt.audit.lag()} == {"w1": 1, "w2": 1}


async def test_concurrent_projectors_append_every_event_exactly_once(rt, clock, tmp_path):
    await populate(rt, clock)
    first = AuditLog.open_local(tmp_path / "data", rt.authority, batch_size=1)
    second = AuditLog.open_local(tmp_path / "data", rt.authority, batch_size=1)
    await asyncio.gather(first.project_once(), second.project_once())
    assert rows_of(rt.audit, "w1") == [1, 2, 3, 4, 5]
    assert rows_of(rt.audit, "w2") == [1]
    await first.close()
    await second.close()


async def test_run_forever_projects_until_stopped(rt, clock):
    await populate(rt, clock)
    stop = asyncio.Event()
    task = asyncio.create_task(rt.audit.run_forever(stop, interval=0.05))
    deadline = time.monotonic() + 120  # generous: each round appends through the writer process, slow on a busy machine
    while any(lag["pending"] for lag in await rt.audit.lag()):
        assert time.monotonic() < deadline, "the projector did not catch up"
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(task, timeout=120)  # a round in progress finishes first
    assert rows_of(rt.audit, "w1") == [1, 2, 3, 4, 5]


async def test_files_are_partitioned_per_world_and_per_day(rt, clock):
    await populate(rt, clock)
    await rt.audit.project_once()
    table = rt.audit.table
    table.table.refresh()  # the writer process committed; this copy of the metadata is behind
    first_day = datetime.date.fromtimestamp(clock.now_ms() // 1000 - DAY_MS // 1000)
    partitions = {(p["world_id"], p["occurred_day"]) for p in table.table.inspect.partitions().column("partition").to_pylist()}
    assert partitions == {("w1", first_day), ("w1", first_day + datetime.timedelta(days=1)), ("w2", first_day + datetime.timedelta(days=1))}
    assert table.files(EqualTo("world_id", "w2")) == (1, 3)
    assert table.files(EqualTo("occurred_day", first_day.isoformat())) == (1, 3)


def test_a_writer_whose_parent_is_gone_stops_with_one_line_not_a_traceback(tmp_path):
    """The projector killed while its writer appends: the writer's answer meets a broken pipe."""
    with subprocess.Popen([sys.executable, "-m", "archetype.audit.writer", str(tmp_path)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as writer:  # fmt: skip
        writer.stdout.close()  # the parent's end of the answers: gone
        writer.stdin.write(json.dumps({"world_id": "w", "path": str(tmp_path / "missing.arrow")}).encode() + b"\n")
        writer.stdin.close()
        assert writer.wait(60) == 0
        assert writer.stderr.read().decode().splitlines() == ["the audit writer's parent (the projector) is gone; stopping"]
