"""State at a tick on each ledger (docs/storage.md, "State at a tick"): `read_state` with a
tick answers the state the world published at that tick, for every tick of its retention window,
and `tick_not_retained` outside it. The reference is the runner's own state, recorded after each
tick as it ran, never the ledger's reading of its chunks."""

import pytest

from archetype.commands import InvalidCommandError, TickNotRetainedError
from archetype.vector import add_vector_processor
from archetype.world.components import type_key
from tests.component_modules.alpha import Health, Position, Velocity
from tests.conformance.authorities import LEDGERS
from tests.conformance.test_state_reads import _push, expected, read_all

AUTHORITIES = LEDGERS  # its reason: docs/testing.md, "Which authorities"


async def _recorded_world(rt, world_id, monkeypatch, ticks=12):
    """A world whose ticks publish every kind of state write: a snapshot, column deltas replacing
    each other (a vectorised processor), per-entity deltas that do not replace, spawns, despawns and
    a tick changing every entity whole (a snapshot again); and what it held after each tick."""
    monkeypatch.setattr("archetype.world.columnar.CHUNK_BYTES", 1_500)
    world = await rt.worlds.get(world_id)
    add_vector_processor(world, _push, Position, Velocity, writes=[Position])
    await world.ensure_entity_ids(200)
    async with world.lock:
        ids = world.atomically(lambda: [world.spawn([Position(x=i / 3, y=-0.0), Velocity(dx=1.0, dy=2.0)]
                                                    + ([Health(hp=i)] if i % 3 == 0 else [])) for i in range(40)])  # fmt: skip
    recorded = {}
    for tick in range(ticks):
        async with world.lock:
            if tick % 4 == 1:
                world.atomically(lambda t=tick: (world.update(ids[3 * t], [Health(hp=-t)]), world.despawn(ids[20 + t]),
                                                 world.spawn([Health(hp=100 + t)])))  # fmt: skip
            if tick == 6:  # every entity changed whole: a snapshot
                world.atomically(lambda: [world.update(e, [Health(hp=6)] if type_key(Health) in c else [Velocity(dx=0.5, dy=0.5)])
                                          for e, c in sorted(world.state.items())])  # fmt: skip
        await world.step()
        recorded[world.tick] = expected(world), expected(world, [Health])
    return world, recorded


async def test_the_state_at_each_tick_is_what_the_world_published_then(rt, world_id, authority, monkeypatch):
    world, recorded = await _recorded_world(rt, world_id, monkeypatch)
    assert len({repr(state) for state, _ in recorded.values()}) == len(recorded)  # every tick changed the state
    for tick, (state, healthy) in recorded.items():
        for limit in (7, 10_000):
            found, _ = await read_all(authority, world_id, limit=limit, tick=tick)
            assert found == state, tick
        found, _ = await read_all(authority, world_id, tick=tick, component_types=[type_key(Health)])
        assert found == healthy, tick
        page = await authority.read_state(world_id=world_id, tick=tick)
        assert page["tick_head"] == tick
    head, _ = await read_all(authority, world_id)
    assert head == recorded[world.tick][0]


async def test_retention_keeps_the_window_and_refuses_the_rest(rt, world_id, authority, monkeypatch):
    world, recorded = await _recorded_world(rt, world_id, monkeypatch)
    head = world.tick
    keep = 4
    pruned = await authority.prune(world_id=world_id, keep_ticks=keep)
    assert pruned["state_rows"] > 0  # the snapshot and deltas before the window went
    for tick in range(head - keep + 1, head + 1):
        found, _ = await read_all(authority, world_id, tick=tick)
        assert found == recorded[tick][0], tick
    before = await authority.world_info(world_id=world_id)
    for tick in (-1, 0, head - keep, head + 1, 10**9):
        with pytest.raises(TickNotRetainedError):
            await authority.read_state(world_id=world_id, tick=tick)
    with pytest.raises(InvalidCommandError):  # (a tick beyond 2**53-1 no transport carries)
        await authority.read_state(world_id=world_id, tick=-2)
    assert await authority.world_info(world_id=world_id) == before
    # a second prune of the same window finds nothing more, and the window still reads
    assert (await authority.prune(world_id=world_id, keep_ticks=keep))["state_rows"] == 0
    found, _ = await read_all(authority, world_id, tick=head - keep + 1)
    assert found == recorded[head - keep + 1][0]


async def test_a_fresh_world_holds_its_state_at_tick_minus_one_only(rt, world_id, authority):
    page = await authority.read_state(world_id=world_id, tick=-1)
    assert (page["sections"], page["next_after"], page["tick_head"]) == ([], None, -1)
    with pytest.raises(TickNotRetainedError):
        await authority.read_state(world_id=world_id, tick=0)


async def test_a_world_emptied_reads_empty_from_then_on_and_full_before(rt, world_id, authority):
    """The snapshot of a world with no entity left has no chunk to store, and still marks its tick."""
    world = await rt.worlds.get(world_id)
    await world.ensure_entity_ids(3)
    async with world.lock:
        ids = world.atomically(lambda: [world.spawn([Health(hp=i)]) for i in range(3)])
    await world.step()
    full = expected(world)
    async with world.lock:
        world.atomically(lambda: [world.despawn(e) for e in ids])
    await world.step()
    await world.step()
    for tick, state in ((0, full), (1, []), (2, [])):
        found, _ = await read_all(authority, world_id, tick=tick)
        assert found == state, tick
    assert (await authority.load_state(world_id=world_id))["entities"] == []
