"""World state as snapshot and delta chunks (docs/storage.md), on every authority: what a runner
publishes in chunks, `load_state` answers entity by entity, paged, exactly as it was encoded."""

import pytest

from archetype.commands import InvalidCommandError
from archetype.vector import add_vector_processor
from tests.component_modules.alpha import Health, Position
from tests.component_modules.mixed import Tag
from tests.conformance.helpers import step
from tests.world.test_storage import wire


async def _all_state(authority, world_id, limit):
    entities, after = [], 0
    while True:
        page = (await authority.load_state(world_id=world_id, after_entity_id=after, limit=limit))["entities"]
        if not page:
            return entities
        entities += [(e["entity_id"], e["components"]) for e in page]
        after = page[-1]["entity_id"]


async def test_snapshots_and_deltas_read_back_as_the_published_entities(rt, world_id, authority, monkeypatch):
    # small chunks, so a little state spans several chunk rows
    monkeypatch.setattr("archetype.world.columnar.CHUNK_BYTES", 400)
    world = await rt.worlds.get(world_id)
    await world.ensure_entity_ids(40)
    async with world.lock:
        ids = world.atomically(lambda: [world.spawn([Position(x=float(i), y=-0.0), Health(hp=i)]) for i in range(30)])
    first = await world.step()  # the world's first publication with a change: a snapshot
    assert world.coordinator.prepared is None and first.tick == 0
    async with world.lock:  # a delta: two updates, a despawn, a spawn
        world.atomically(lambda: (world.update(ids[3], [Health(hp=-3)]), world.update(ids[29], [Position(x=2.0, y=1e-300)]),
                                  world.despawn(ids[10]), world.spawn([Health(hp=99)])))  # fmt: skip
    await world.step()
    async with world.lock:
        world.atomically(lambda: world.despawn(ids[3]))
    await world.step()
    expected = [
        (entity_id, world.encoder.text(entity_id, components)) for entity_id, components in sorted(world.state.items())
    ]
    assert len(expected) == 29
    for limit in (1, 4, 7, 10_000):
        assert await _all_state(authority, world_id, limit) == expected
    # a new runner loads the same state, and its first publication with a change is a snapshot
    rt.worlds.drop(world_id)
    reloaded = await rt.worlds.get(world_id)
    assert [(e, reloaded.encoder.text(e, c)) for e, c in sorted(reloaded.state.items())] == expected
    async with reloaded.lock:
        reloaded.atomically(lambda: reloaded.update(ids[0], [Health(hp=7)]))
    await step(rt, world_id)
    assert len(await _all_state(authority, world_id, 5)) == 29


async def test_a_malformed_state_chunk_is_refused(rt, world_id, authority):
    info = await authority.acquire_writer(world_id=world_id)
    manifest = {"world_id": world_id, "tick": 0, "writer_epoch": info["writer_epoch"], "settlements": [],
                "written_runs": [], "commit_token": "t0"}  # fmt: skip
    columnar = '{"first":%d,"last":%d,"removed":[],"sections":[]}'
    for chunks in (["{}"], ["[[0,[]]]"], ["[[2,[]]]", "[[1,[]]]"], [columnar % (0, 0)], ['{"first":1,"last":1}'],
                   [columnar % (2, 2), columnar % (1, 1)]):  # fmt: skip
        with pytest.raises(InvalidCommandError):
            await authority.publish(world_id=world_id, owner="o", session="s", manifest=manifest,
                                    writes={"snapshot": True, "chunks": chunks})  # fmt: skip
    assert await authority.manifests(world_id=world_id) == []


async def test_a_columnar_state_loads_identically_everywhere(rt, world_id, authority, monkeypatch):
    # numeric columns held in numpy by this runner (a vectorised processor), data rows, removed
    # ids, over several chunk rows: every authority answers the per-entity canonical text
    monkeypatch.setattr("archetype.world.columnar.CHUNK_BYTES", 2_000)
    world = await rt.worlds.get(world_id)
    sent = []
    publish = world.publisher.publish

    async def recorded(prepared):
        sent.append((prepared.snapshot, prepared.chunks))
        await publish(prepared)

    world.publisher.publish = recorded
    add_vector_processor(world, _drift, Position, writes=[Position])
    await world.ensure_entity_ids(80)
    async with world.lock:
        ids = world.atomically(lambda: [world.spawn(
            [Position(x=i / 7, y=-0.0)] + ([Health(hp=2**53 - 1 - i)] if i % 2 else [])
            + ([Tag(label=f"t{i}\u00e9\"", weight=1e-300 * i)] if i % 3 == 0 else [])
        ) for i in range(60)])  # fmt: skip
    await world.step()
    async with world.lock:
        world.atomically(lambda: (world.despawn(ids[5]), world.update(ids[7], [Health(hp=-1)]),
                                  world.add_components(ids[0], [Health(hp=1)])))  # fmt: skip
    await world.step()
    assert [snapshot for snapshot, _ in sent] == [True, False] and len(sent[0][1]) > 1
    assert all(chunk.startswith('{"first":') for _, chunks in sent for chunk in chunks)
    expected = [(entity_id, wire(components.values())) for entity_id, components in sorted(world.state.items())]
    assert len(expected) == 59 and '"x":0.25' in expected[0][1]  # drifted in the first tick
    for limit in (3, 10_000):
        assert await _all_state(authority, world_id, limit) == expected


def _drift(world, tick, table):
    if tick == 0:
        table[Position].x += 0.25
