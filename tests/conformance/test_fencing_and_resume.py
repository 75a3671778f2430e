"""Writer fencing and resume (DESIGN decisions 1 and 2)."""

import pytest

from archetype.commands import LeaseLostError, StaleWriterError
from archetype.world import Spawn, Update
from tests.component_modules.alpha import Health
from tests.conformance.authorities import LEDGERS
from tests.conformance.helpers import at, records, step

AUTHORITIES = LEDGERS  # its reason: docs/testing.md, "Which authorities"


async def test_acquiring_a_world_bumps_its_writer_epoch(rt, world_id, authority):
    before = (await authority.world_info(world_id=world_id))["writer_epoch"]
    first = await authority.acquire_writer(world_id=world_id)
    second = await authority.acquire_writer(world_id=world_id)
    assert second["writer_epoch"] == first["writer_epoch"] + 1 == before + 2


async def test_a_stale_writer_fails_closed(rt, make_runtime, world_id, authority):
    await rt.dispatcher.defer(Spawn(world_id=world_id, components=[Health(hp=1)]), at(0), command_id="s")
    stale = await rt.worlds.get(world_id)
    newer = make_runtime("runner-b")
    await newer.worlds.get(world_id)
    with pytest.raises(StaleWriterError):
        await step(rt, world_id)
    assert rt.worlds.loaded == []  # the fenced world is dropped, not patched up
    assert stale.tick == -1
    assert await authority.manifests(world_id=world_id) == []
    assert await step(newer, world_id) == 1


async def test_publishing_with_leases_taken_over_fails_closed(rt, world_id, authority, clock):
    await rt.dispatcher.defer(Spawn(world_id=world_id, components=[Health(hp=1)]), at(0), command_id="s")
    world = await rt.worlds.get(world_id)
    await rt.scheduler.materialize(world, 0)
    clock.advance(1_000)
    await authority.lease(world_id, "intruder", "intruder-session", world.writer_epoch, 0, 10, 1_000)
    with pytest.raises(LeaseLostError):
        await step(rt, world_id)
    assert (await records(rt, world_id))["s"].status == "LEASED"


async def test_a_new_runtime_resumes_the_world_at_its_tick_head(rt, make_runtime, world_id):
    spawned = await rt.dispatcher.defer_spawn(Spawn(world_id=world_id, components=[Health(hp=10)]), at(0))
    await rt.dispatcher.defer(Update(world_id=world_id, entity_id=spawned.entity_id, components=[Health(hp=7)]), at(1))
    await rt.dispatcher.defer(Update(world_id=world_id, entity_id=spawned.entity_id, components=[Health(hp=3)]), at(3))
    await step(rt, world_id)
    await step(rt, world_id)
    resumed = make_runtime("runner-b")
    world = await resumed.worlds.get(world_id)
    assert world.tick == 1 and world.get(spawned.entity_id)[Health].hp == 7
    assert [await step(resumed, world_id) for _ in range(2)] == [0, 1]
    assert world.get(spawned.entity_id)[Health].hp == 3
    assert sorted(r.status for r in await resumed.scheduler.history(world_id)) == ["APPLIED"] * 3


async def test_direct_mutations_become_durable_with_the_next_tick(rt, make_runtime, world_id):
    entity = await rt.dispatcher.apply(Spawn(world_id=world_id, components=[Health(hp=1)]))
    assert not (await make_runtime("peek").worlds.get(world_id)).exists(entity)
    rt.worlds.drop(world_id)  # the peek fenced rt; reload before stepping
    world = await rt.worlds.get(world_id)
    assert not world.exists(entity)  # never published: lost with the fenced process, by design
    entity = await rt.dispatcher.apply(Spawn(world_id=world_id, components=[Health(hp=1)]))
    await step(rt, world_id)
    assert (await make_runtime("later").worlds.get(world_id)).get(entity)[Health].hp == 1


async def test_a_stale_writer_can_neither_guard_nor_publish(rt, world_id, authority):
    from archetype.world import Despawn

    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0), command_id="c")
    old = await authority.acquire_writer(world_id)
    (row,) = await authority.lease(world_id, "old", "s", old["writer_epoch"], 0, 10, 1_000)
    await authority.acquire_writer(world_id)
    with pytest.raises(StaleWriterError):
        await authority.guard(world_id, "old", "s", old["writer_epoch"], row["sequence"])
    manifest = {
        "world_id": world_id, "tick": 0, "writer_epoch": old["writer_epoch"], "written_runs": [],
        "settlements": [{"sequence": row["sequence"], "command_id": "c", "outcome": "rejected", "error": "late"}],
        "commit_token": "0" * 64,
    }  # fmt: skip
    with pytest.raises(StaleWriterError):
        await authority.publish(world_id, "old", "s", manifest, {"snapshot": False, "chunks": []})
    assert (await records(rt, world_id))["c"].status == "LEASED"
