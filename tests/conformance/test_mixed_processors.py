"""A world that mixes per-entity and vectorised processors publishes, on each ledger, the
state its per-entity twin publishes, byte for byte, with the same written ids, tick after tick (a
failed tick run again included): the scenario of tests/world/test_mixed_processors.py."""

import pytest

from archetype.world import CreateWorld
from tests.conformance.authorities import LEDGERS
from tests.conformance.test_state_chunks import _all_state
from tests.world.test_mixed_processors import FAILING_TICK, install, populate

AUTHORITIES = LEDGERS  # its reason: docs/testing.md, "Which authorities"


async def _world(rt, world_id, vectorised):
    world = await rt.worlds.get(world_id)
    await world.ensure_entity_ids(100)
    async with world.lock:
        populate(world)
    await world.step()
    install(world, vectorised)
    return world


async def test_a_mixed_world_publishes_what_its_per_entity_twin_publishes(rt, world_id, authority):
    twin_id = await rt.dispatcher.apply(CreateWorld(name="twin", world_id="w-twin"))
    mixed, each = await _world(rt, world_id, True), await _world(rt, twin_id, False)
    for tick in range(1, 8):
        for world in (mixed, each):
            if tick == FAILING_TICK:
                with pytest.raises(RuntimeError, match="heal failed"):
                    await world.step()
            await world.step()
        published = [await _all_state(authority, w, 10_000) for w in (world_id, twin_id)]
        assert published[0] == published[1] and len(published[0]) > 40
        runs = [[m["written_runs"] for m in await authority.manifests(world_id=w)] for w in (world_id, twin_id)]
        assert runs[0] == runs[1] and len(runs[0]) == tick + 1
