"""Ordering and leasing (spec: "Ordering and leasing")."""

from archetype.world import Despawn, Spawn
from tests.component_modules.alpha import Health
from tests.conformance.helpers import at, manifests, records, step


def spawn(world_id, hp):
    return Spawn(world_id=world_id, components=[Health(hp=hp)])


async def test_due_rows_apply_in_tick_priority_sequence_order(rt, world_id, authority):
    await rt.dispatcher.defer(spawn(world_id, 1), at(1, priority=0), command_id="t1-p0-a")
    await rt.dispatcher.defer(spawn(world_id, 2), at(0, priority=5), command_id="t0-p5")
    await rt.dispatcher.defer(spawn(world_id, 3), at(1, priority=-1), command_id="t1-pm1")
    await rt.dispatcher.defer(spawn(world_id, 4), at(0, priority=0), command_id="t0-p0")
    await rt.dispatcher.defer(spawn(world_id, 5), at(1, priority=0), command_id="t1-p0-b")
    await step(rt, world_id)
    await step(rt, world_id)
    ticks = await manifests(authority, world_id)
    assert [m["applied_command_ids"] for m in ticks] == [["t0-p0", "t0-p5"], ["t1-pm1", "t1-p0-a", "t1-p0-b"]]


async def test_commands_wait_for_their_tick_and_late_ones_run_at_the_next(rt, world_id):
    await rt.dispatcher.defer(spawn(world_id, 1), at(2), command_id="at-2")
    assert [await step(rt, world_id) for _ in range(3)] == [0, 0, 1]
    assert (await records(rt, world_id))["at-2"].applied_tick == 2
    await rt.dispatcher.defer(spawn(world_id, 1), at(0), command_id="late")
    await step(rt, world_id)
    assert (await records(rt, world_id))["late"].applied_tick == 3


async def lease(authority, world_id, owner, tick=10, lease_ms=1_000):
    info = await authority.acquire_writer(world_id=world_id)
    rows = await authority.lease(world_id=world_id, owner=owner, writer_epoch=info["writer_epoch"],
                                tick=tick, limit=100, lease_ms=lease_ms)  # fmt: skip
    return info["writer_epoch"], rows


async def test_leasing_never_deletes_and_records_owner_expiry_and_attempt(rt, world_id, authority, clock):
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0), command_id="c")
    _, rows = await lease(authority, world_id, "owner-a")
    assert [r["command_id"] for r in rows] == ["c"]
    row = await authority.command(world_id=world_id, command_id="c")
    assert row["status"] == "LEASED" and row["lease_owner"] == "owner-a"
    assert row["lease_expires_at"] == clock.now_ms() + 1_000 and row["attempts"] == 1


async def test_another_owner_takes_over_only_after_expiry(rt, world_id, authority, clock):
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0), command_id="first")
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=2), at(0), command_id="second")
    await lease(authority, world_id, "owner-a")
    epoch, rows = await lease(authority, world_id, "owner-b")
    assert rows == []  # held by a live lease: order is never skipped
    clock.advance(1_000)
    _, rows = await lease(authority, world_id, "owner-b")
    assert [(r["command_id"], r["lease_owner"], r["attempts"]) for r in rows] == [("first", "owner-b", 2), ("second", "owner-b", 2)]


async def test_the_same_owner_renews_without_a_new_attempt(rt, world_id, authority, clock):
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0), command_id="c")
    info = await authority.acquire_writer(world_id=world_id)
    for _ in range(3):
        rows = await authority.lease(world_id=world_id, owner="a", writer_epoch=info["writer_epoch"],
                                    tick=0, limit=10, lease_ms=1_000)  # fmt: skip
        clock.advance(10)
    assert rows[0]["attempts"] == 1 and rows[0]["lease_expires_at"] == clock.now_ms() - 10 + 1_000


async def test_a_takeover_past_the_attempt_budget_dead_letters(rt, world_id, authority, clock):
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0, max_attempts=1), command_id="once")
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=2), at(0, max_attempts=2), command_id="twice")
    await lease(authority, world_id, "crashed-owner")
    clock.advance(1_001)
    _, rows = await lease(authority, world_id, "new-owner")
    assert [r["command_id"] for r in rows] == ["twice"]
    dead = await authority.command(world_id=world_id, command_id="once")
    assert dead["status"] == "DEAD_LETTER" and dead["attempts"] == 1


async def test_a_runner_killed_mid_tick_is_resumed_by_another_after_expiry(rt, make_runtime, world_id, clock):
    await rt.dispatcher.defer(spawn(world_id, 1), at(0), command_id="c")
    world = await rt.worlds.get(world_id)
    await rt.scheduler.materialize(world, 0)  # leased and staged, never published: the runner "dies" here
    other = make_runtime("runner-b")
    assert await step(other, world_id) == 0  # lease still live
    clock.advance(1_000)
    assert await step(other, world_id) == 1
    record = (await records(other, world_id))["c"]
    assert record.status == "APPLIED" and record.attempts == 2 and record.applied_tick == 1
