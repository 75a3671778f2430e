"""Destroy: close admission, cancel every unsettled command, close the world."""

import asyncio

import pytest

from archetype.commands import WorldClosingError
from archetype.world import Despawn, DestroyWorld, Spawn
from tests.component_modules.alpha import Health
from tests.conformance.authorities import LEDGERS
from tests.conformance.helpers import at, outbox, records

AUTHORITIES = LEDGERS  # its reason: docs/testing.md, "Which authorities"


async def test_destroy_cancels_every_unsettled_command_with_events(rt, world_id, authority, clock):
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(5), command_id="pending")
    await rt.dispatcher.defer(Spawn(world_id=world_id, components=[Health(hp=1)]), at(0), command_id="leased")
    world = await rt.worlds.get(world_id)
    await rt.scheduler.materialize(world, 0)
    cancelled = await rt.dispatcher.apply(DestroyWorld(world_id=world_id))
    assert cancelled == 2
    result = await records(rt, world_id)
    assert {k: v.status for k, v in result.items()} == {"pending": "CANCELLED", "leased": "CANCELLED"}
    assert (await authority.world_info(world_id=world_id))["status"] == "DESTROYED"
    events = [(e["command_id"], e["event_type"], e["status"]) for e in await outbox(authority, world_id)]
    assert events[-2:] == [("pending", "cancelled", "CANCELLED"), ("leased", "cancelled", "CANCELLED")]


async def test_destroy_is_idempotent_and_leaves_settled_commands_alone(rt, world_id, authority):
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0), command_id="rejected")
    from tests.conformance.helpers import step

    await step(rt, world_id)
    assert await rt.dispatcher.apply(DestroyWorld(world_id=world_id)) == 0
    assert await rt.dispatcher.apply(DestroyWorld(world_id=world_id)) == 0
    assert (await records(rt, world_id))["rejected"].status == "REJECTED"


async def test_an_admission_racing_destroy_commits_before_the_cancellation_or_fails(rt, make_runtime, world_id, authority):
    feeder = make_runtime("feeder")
    outcomes: dict[str, str] = {}

    async def admit(i):
        try:
            await feeder.dispatcher.defer(Despawn(world_id=world_id, entity_id=i), at(0), command_id=f"c{i}")
            outcomes[f"c{i}"] = "admitted"
        except WorldClosingError:
            outcomes[f"c{i}"] = "refused"

    tasks = [asyncio.create_task(admit(i)) for i in range(1, 41)]
    await asyncio.sleep(0)
    await asyncio.gather(rt.dispatcher.apply(DestroyWorld(world_id=world_id)), *tasks)
    ledger = await records(rt, world_id)
    assert set(ledger) == {k for k, v in outcomes.items() if v == "admitted"}
    assert all(r.status == "CANCELLED" for r in ledger.values())
    with pytest.raises(WorldClosingError):
        await feeder.dispatcher.defer(Despawn(world_id=world_id, entity_id=99), at(0))
    admitted_seq = {e["command_id"]: e["event_seq"] for e in await outbox(authority, world_id) if e["event_type"] == "admitted"}
    first_cancel = min(e["event_seq"] for e in await outbox(authority, world_id) if e["event_type"] == "cancelled") if ledger else None
    assert all(seq < first_cancel for seq in admitted_seq.values())


async def test_a_runner_cannot_publish_into_a_destroyed_world(rt, world_id):
    await rt.dispatcher.defer(Spawn(world_id=world_id, components=[Health(hp=1)]), at(0), command_id="s")
    world = await rt.worlds.get(world_id)
    await rt.scheduler.materialize(world, 0)
    await rt.scheduler.authority.destroy(world_id=world_id)
    with pytest.raises(WorldClosingError):
        await world.step()
