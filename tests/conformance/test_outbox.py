"""The transactional outbox: one event per named transition, deterministic ids, read/ack, watermark."""

import pytest

from archetype.commands import CommandConflictError, DeferredItem, InvalidCommandError
from archetype.world import Despawn, DestroyWorld, Spawn
from tests.component_modules.alpha import Health
from tests.conformance.authorities import LEDGERS
from tests.conformance.helpers import at, fail_next, outbox, probe, step

AUTHORITIES = LEDGERS  # its reason: docs/testing.md, "Which authorities"


async def test_every_named_transition_appends_one_event(rt, world_id, authority):
    fail_next("retry-then-ok", ConnectionError("down"))
    fail_next("dead", ConnectionError("down"))
    await rt.dispatcher.defer(Spawn(world_id=world_id, components=[Health(hp=1)]), at(0), command_id="ok")
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=999), at(0), command_id="rejected")
    await rt.dispatcher.defer(probe(world_id, "retry-then-ok"), at(0), command_id="retry")
    await rt.dispatcher.defer(probe(world_id, "dead"), at(1, max_attempts=1), command_id="dead")
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(9), command_id="cancelled")
    for _ in range(3):
        await step(rt, world_id)
    await rt.dispatcher.apply(DestroyWorld(world_id=world_id))
    events = await outbox(authority, world_id)
    by_command: dict[str, list[str]] = {}
    for event in events:
        by_command.setdefault(event["command_id"], []).append(event["event_type"])
    assert by_command == {
        "ok": ["admitted", "applied"],
        "rejected": ["admitted", "rejected"],
        "retry": ["admitted", "retry_scheduled", "applied"],
        "dead": ["admitted", "dead_lettered"],
        "cancelled": ["admitted", "cancelled"],
    }
    assert [e["event_seq"] for e in events] == list(range(1, len(events) + 1))
    assert [e["event_id"] for e in events] == [f"{world_id}/{e['event_seq']}" for e in events]


async def test_a_watermark_inside_a_batch_s_events_reads_the_rest_and_never_the_acknowledged(rt, world_id, authority):
    """A batch's events (admitted together, settled in one tick) acknowledged part way: the rest are
    read, in order, and the acknowledged never again, from any starting point."""
    items = [DeferredItem(op=Despawn(world_id=world_id, entity_id=i + 1), options=at(0), command_id=f"b{i}") for i in range(6)]
    await rt.dispatcher.defer_batch(items)
    await step(rt, world_id)  # six `admitted`, then six `rejected` (no such entities)
    await authority.acknowledge_outbox(world_id=world_id, up_to_seq=4)
    assert [e["event_seq"] for e in await outbox(authority, world_id)] == list(range(5, 13))
    assert [e["event_seq"] for e in await authority.read_outbox(world_id=world_id, after_seq=2, limit=3)] == [5, 6, 7]
    assert [e["event_seq"] for e in await authority.read_outbox(world_id=world_id, after_seq=8, limit=2)] == [9, 10]
    await authority.acknowledge_outbox(world_id=world_id, up_to_seq=9)
    events = await outbox(authority, world_id)
    assert [(e["event_seq"], e["command_id"], e["event_type"]) for e in events] == [
        (10, "b3", "rejected"), (11, "b4", "rejected"), (12, "b5", "rejected")]
    assert (await authority.watermark(world_id=world_id))["pending"] == 3


async def test_events_carry_what_the_audit_needs(rt, world_id, authority, clock):
    await rt.dispatcher.defer(Spawn(world_id=world_id, components=[Health(hp=1)]), at(4), command_id="s")
    (event,) = await outbox(authority, world_id)
    assert event == {
        "event_id": f"{world_id}/1", "world_id": world_id, "event_seq": 1, "command_id": "s",
        "event_type": "admitted", "status": "PENDING", "operation": "spawn", "tick": 4, "principal": None,
        "origin": "local", "occurred_at": clock.now_ms(),
        "payload": '{"attempts":0,"max_attempts":3,"error":null}',
    }  # fmt: skip


async def test_read_acknowledge_and_watermark(rt, world_id, authority):
    for i in range(5):
        await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=i + 1), at(0), command_id=f"c{i}")
    assert await authority.watermark(world_id=world_id) == {
        "world_id": world_id, "committed_seq": 5, "projected_seq": 0, "pending": 5,
    }  # fmt: skip
    page = await authority.read_outbox(world_id=world_id, after_seq=0, limit=2)
    assert [e["event_seq"] for e in page] == [1, 2]
    mark = await authority.acknowledge_outbox(world_id=world_id, up_to_seq=2)
    assert (mark["projected_seq"], mark["pending"]) == (2, 3)
    assert [e["event_seq"] for e in await outbox(authority, world_id)] == [3, 4, 5]
    stale = await authority.acknowledge_outbox(world_id=world_id, up_to_seq=1)
    assert stale["projected_seq"] == 2  # a replayed, older acknowledgement never moves the watermark back
    with pytest.raises(InvalidCommandError):
        await authority.acknowledge_outbox(world_id=world_id, up_to_seq=99)


async def test_numbering_goes_on_after_every_event_is_acknowledged_and_every_command_pruned(rt, world_id, authority, clock):
    # the next sequence numbers are read off the commands and the outbox (docs/ledger.md, "Sequence
    # numbers"): emptied, neither may hand a number out again
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0), command_id="a")
    await step(rt, world_id)
    mark = await authority.watermark(world_id=world_id)
    assert mark["committed_seq"] == 2
    await authority.acknowledge_outbox(world_id=world_id, up_to_seq=2)
    assert await outbox(authority, world_id) == []
    clock.advance(1)
    assert (await authority.prune(world_id=world_id, idempotency_window_ms=0))["commands"] == 1
    assert (await authority.history(world_id=world_id)) == []
    info = await authority.world_info(world_id=world_id)
    assert (info["next_sequence"], info["next_event_seq"]) == (2, 3)
    again = await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(1), command_id="a")
    assert (again.sequence, again.replayed) == (2, False)
    (event,) = await outbox(authority, world_id)
    assert (event["event_seq"], event["event_id"]) == (3, f"{world_id}/3")
    assert await authority.watermark(world_id=world_id) == {
        "world_id": world_id, "committed_seq": 3, "projected_seq": 2, "pending": 1,
    }  # fmt: skip


async def test_failed_admissions_append_nothing(rt, world_id, authority):
    with pytest.raises(InvalidCommandError):
        await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0), command_id="bad id")
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0), command_id="k")
    with pytest.raises(CommandConflictError):
        await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=2), at(0), command_id="k")
    assert len(await outbox(authority, world_id)) == 1


async def test_the_columnar_read_is_the_same_page_column_by_column(rt, world_id, authority):
    for i in range(5):
        await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=i + 1), at(i % 2), command_id=f"c{i}")
    await authority.acknowledge_outbox(world_id=world_id, up_to_seq=1)
    rows = await authority.read_outbox(world_id=world_id, after_seq=0, limit=3)
    columns = await authority.read_outbox_columns(world_id=world_id, after_seq=0, limit=3)
    assert [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)] == rows
    assert [e["event_seq"] for e in rows] == [2, 3, 4]
    empty = await authority.read_outbox_columns(world_id=world_id, after_seq=5)
    assert set(empty) == set(rows[0]) and all(values == [] for values in empty.values())


async def test_events_read_in_order_one_by_one_wherever_they_are_kept(rt, world_id, authority):
    """An admission's event is its command row, a small tick's settlements go on the world row, a
    tick's that do not follow them and a destroy's are outbox rows (docs/storage.md, "Schema version
    22"): read a page of one at a time and acknowledged one by one, every event comes once, in order."""
    for tick in range(3):
        await rt.dispatcher.defer(Spawn(world_id=world_id, components=[Health(hp=tick)]), at(tick), command_id=f"c{tick}")
        await step(rt, world_id)
        if tick == 0:
            await authority.acknowledge_outbox(world_id=world_id, up_to_seq=2)
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(9), command_id="cancelled")
    await rt.dispatcher.apply(DestroyWorld(world_id=world_id))
    seen = []
    for seq in range(3, 9):
        (event,) = await authority.read_outbox(world_id=world_id, limit=1)
        assert (event["event_seq"], event["event_id"]) == (seq, f"{world_id}/{seq}")
        seen.append((event["command_id"], event["event_type"]))
        await authority.acknowledge_outbox(world_id=world_id, up_to_seq=seq)
    assert seen == [("c1", "admitted"), ("c1", "applied"), ("c2", "admitted"), ("c2", "applied"),
                    ("cancelled", "admitted"), ("cancelled", "cancelled")]  # fmt: skip
    assert await authority.read_outbox(world_id=world_id) == []
    assert (await authority.watermark(world_id=world_id))["pending"] == 0
