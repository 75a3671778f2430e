"""The audit projector's round reads only the worlds with events pending (WriterThreadAuthority.outbox_backlog)."""

from __future__ import annotations

import sqlite3

from archetype.commands import DurableOptions
from archetype.commands.port import ManualClock
from archetype.metrics import Metrics
from archetype.runtime import Runtime
from archetype.world import CreateWorld, Despawn
from local_catalog import CATALOG_FILE, open_local_authority


async def _world_with_events(rt: Runtime, name: str, events: int) -> str:
    world_id = await rt.dispatcher.apply(CreateWorld(name=name, world_id=name))
    for index in range(events):
        await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=index + 1), DurableOptions(tick=10**6),
                                  command_id=f"{name}-{index}")  # fmt: skip
    return world_id


async def test_the_backlog_is_exactly_the_worlds_with_unacknowledged_events(tmp_path):
    authority = open_local_authority(tmp_path, clock=ManualClock())
    rt = Runtime(authority)
    try:
        for index in range(30):  # idle worlds: never in the backlog
            await rt.dispatcher.apply(CreateWorld(name=f"idle-{index}", world_id=f"idle-{index}"))
        for name, events in (("b", 3), ("a", 2), ("c", 1)):
            await _world_with_events(rt, name, events)
        backlog = await authority.outbox_backlog()
        assert [(w["world_id"], w["pending"], w["committed_seq"], w["projected_seq"]) for w in backlog] == [
            ("a", 2, 2, 0), ("b", 3, 3, 0), ("c", 1, 1, 0)]
        assert {w["status"] for w in backlog} == {"ACTIVE"} and {w["health"] for w in backlog} == {"ACTIVE"}
        # the same figures `watermark` answers, for every world listed
        assert [await authority.watermark(w["world_id"]) for w in backlog] == [
            {k: w[k] for k in ("world_id", "committed_seq", "projected_seq", "pending")} for w in backlog]  # type: ignore[literal-required]

        await authority.acknowledge_outbox("b", 2)
        await authority.acknowledge_outbox("a", 2)
        assert [(w["world_id"], w["pending"]) for w in await authority.outbox_backlog()] == [("b", 1), ("c", 1)]
        await authority.acknowledge_outbox("b", 3)
        await authority.acknowledge_outbox("c", 1)
        assert await authority.outbox_backlog() == []
    finally:
        await rt.close()


async def test_the_backlog_read_does_not_walk_the_worlds(tmp_path):
    authority = open_local_authority(tmp_path, clock=ManualClock())
    await authority.close()
    from archetype.commands import ledger_sql as q

    with sqlite3.connect(tmp_path / CATALOG_FILE) as db:
        plan = " ".join(row[-1] for row in db.execute(f"EXPLAIN QUERY PLAN {q.BACKLOG_WORLDS}"))
    assert "SCAN w" not in plan and "SCAN worlds" not in plan, plan
    assert "SCAN outbox" not in plan and "SCAN o" not in plan, plan


def test_metrics_from_the_backlog_zero_a_drained_world_and_keep_the_stalled_ones():
    metrics = Metrics()
    row = {"world_id": "w", "status": "ACTIVE", "health": "STALLED", "pending": 4}
    metrics.observe_backlog([row, {**row, "world_id": "v", "health": "ACTIVE", "pending": 1}])
    assert metrics.audit_lag.labels("w")._value.get() == 4
    assert metrics.stalled._value.get() == 1
    metrics.observe_backlog([])  # both drained; w is still stalled: no event said otherwise
    assert metrics.audit_lag.labels("w")._value.get() == 0 and metrics.audit_lag.labels("v")._value.get() == 0
    assert metrics.stalled._value.get() == 1
    metrics.observe_backlog([{**row, "health": "ACTIVE", "pending": 1}])  # its world_recovered event
    assert metrics.stalled._value.get() == 0
