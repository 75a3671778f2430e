"""World state as snapshot and delta chunks (docs/storage.md), on every authority: what a runner
publishes in chunks, `load_state` answers entity by entity, paged, exactly as it was encoded."""

import json

import pytest

from archetype.commands import InvalidCommandError
from archetype.vector import add_vector_processor
from tests.component_modules.alpha import Health, Position, Velocity
from tests.component_modules.mixed import Tag
from tests.conformance.helpers import step
from tests.support.publications import record_publications
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


async def test_an_entity_without_components_loads_back_in_a_delta_and_a_snapshot(rt, world_id, authority):
    # its section has ids and no columns: the reader must not take its rows from the columns
    world = await rt.worlds.get(world_id)
    await world.ensure_entity_ids(4)
    async with world.lock:
        ids = world.atomically(lambda: [world.spawn([Position(x=float(i), y=0.0)]) for i in range(3)])
    await world.step()  # a snapshot
    async with world.lock:
        world.atomically(lambda: world.remove_components(ids[0], [Position]))
    await world.step()  # a delta holding the stripped entity
    expected = [(entity_id, world.encoder.text(entity_id, c)) for entity_id, c in sorted(world.state.items())]
    assert expected[0] == (ids[0], "[]")
    assert await _all_state(authority, world_id, 10) == expected
    rt.worlds.drop(world_id)
    reloaded = await rt.worlds.get(world_id)
    assert reloaded.state.get(ids[0]) == {}
    async with reloaded.lock:
        reloaded.atomically(lambda: [reloaded.update(e, [Position(x=9.0, y=9.0)]) for e in ids[1:]])
    await step(rt, world_id)  # every entity with components changed whole: a snapshot
    assert (await _all_state(authority, world_id, 10))[0] == (ids[0], "[]")


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
    sent = record_publications(world)
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
    assert [prepared.snapshot for prepared in sent] == [True, False] and len(sent[0].chunks) > 1
    assert all(chunk.startswith('{"first":') for prepared in sent for chunk in prepared.chunks)
    expected = [(entity_id, wire(components.values())) for entity_id, components in sorted(world.state.items())]
    assert len(expected) == 59 and '"x":0.25' in expected[0][1]  # drifted in the first tick
    for limit in (3, 10_000):
        assert await _all_state(authority, world_id, limit) == expected


def _drift(world, tick, table):
    if tick == 0:
        table[Position].x += 0.25


def _sweep(world, tick, table):
    table[Position].x += 1.5


async def test_a_column_delta_overlays_only_its_columns_everywhere(rt, world_id, authority, monkeypatch):
    # a vectorised processor moves every Position and leaves Velocity and Health alone: its deltas
    # are partial sections of the Position column only, overlaid on the snapshot (and on each
    # other, and on a whole entry a per-entity update sent in between) by every authority
    monkeypatch.setattr("archetype.world.columnar.CHUNK_BYTES", 1_500)
    world = await rt.worlds.get(world_id)
    sent = record_publications(world)
    add_vector_processor(world, _sweep, Position, Velocity, writes=[Position, Velocity])
    await world.ensure_entity_ids(60)
    async with world.lock:
        ids = world.atomically(lambda: [world.spawn(
            [Position(x=i / 3, y=-0.0), Velocity(dx=1.0, dy=2.0)] + ([Health(hp=i)] if i >= 30 else [])
        ) for i in range(40)])  # fmt: skip
    await world.step()
    for tick in range(4):
        if tick == 1:  # a whole entry between partial ones, and a despawn
            async with world.lock:
                world.atomically(lambda: (world.update(ids[8], [Velocity(dx=-1.0, dy=0.0)]), world.despawn(ids[9])))
        await world.step()
        expected = [(e, wire(c.values())) for e, c in sorted(world.state.items())]
        for limit in (3, 10_000):
            assert await _all_state(authority, world_id, limit) == expected
    snapshots = [prepared.snapshot for prepared in sent]
    assert snapshots[:2] == [True, False] and True in snapshots[2:]
    partial = [s for chunk in sent[1].chunks for s in json.loads(chunk)["sections"]]
    assert partial and all(s["partial"] and [c["name"] for c in s["components"]] == ["Position"] for s in partial)
    assert any("id_runs" in s for s in partial)  # consecutive ids (four or more of them): listed as runs
    # a runner loading the world reads back what it holds
    rt.worlds.drop(world_id)
    reloaded = await rt.worlds.get(world_id)
    assert sorted(reloaded.state.items()) == sorted(world.state.items())


async def test_a_manifest_lists_the_written_ids_as_runs(rt, world_id, authority):
    world = await rt.worlds.get(world_id)
    await world.ensure_entity_ids(10)
    async with world.lock:
        ids = world.atomically(lambda: [world.spawn([Health(hp=i)]) for i in range(6)])
    await world.step()
    async with world.lock:
        world.atomically(lambda: [world.update(ids[i], [Health(hp=-i)]) for i in (0, 1, 2, 4)])
    await world.step()
    assert [m["written_runs"] for m in await authority.manifests(world_id=world_id)] == [
        [[ids[0], ids[5]]], [[ids[0], ids[2]], [ids[4], ids[4]]],
    ]  # fmt: skip


@pytest.mark.parametrize("runs", [[[0, 1]], [[3, 2]], [[1, 2], [3, 4]], [[2, 5], [4, 6]], [[1]], [[1, 2, 3]], [[4, 5], [1, 2]]])
async def test_a_manifest_whose_written_runs_are_not_canonical_is_refused(rt, world_id, authority, runs):
    info = await authority.acquire_writer(world_id=world_id)
    manifest = {"world_id": world_id, "tick": 0, "writer_epoch": info["writer_epoch"], "settlements": [],
                "written_runs": runs, "commit_token": "t0"}  # fmt: skip
    with pytest.raises(InvalidCommandError):
        await authority.publish(world_id=world_id, owner="o", session="s", manifest=manifest,
                                writes={"snapshot": False, "chunks": []})  # fmt: skip
    assert await authority.manifests(world_id=world_id) == []
    assert (await authority.load_state(world_id=world_id))["tick_head"] == -1


async def test_a_delta_that_replaces_the_deltas_is_kept_in_their_place(rt, world_id, authority):
    # what the ledger does with `replaces_deltas`: the deltas since the snapshot are deleted, the
    # new one kept, in the tick's one transaction; a snapshot cannot carry it
    info = await authority.acquire_writer(world_id=world_id)
    epoch = info["writer_epoch"]
    def text(hp):
        return f'[{{"data":{{"hp":{hp}}},"fingerprint":"{Health.__component_fingerprint__}","name":"Health"}}]'

    def entity(entity_id, hp):
        return f"[[{entity_id},{text(hp)}]]"

    async def publish(tick, chunks, snapshot=False, replaces=False):
        manifest = {"world_id": world_id, "tick": tick, "writer_epoch": epoch, "settlements": [],
                    "written_runs": [], "commit_token": f"t{tick}"}  # fmt: skip
        await authority.publish(world_id=world_id, owner="o", session="s", manifest=manifest,
                                writes={"snapshot": snapshot, "chunks": chunks, "replaces_deltas": replaces})  # fmt: skip

    await publish(0, [entity(1, 1)], snapshot=True)
    await publish(1, [entity(2, 2)])
    await publish(2, [entity(1, 10)], replaces=True)
    state = (await authority.load_state(world_id=world_id))["entities"]
    assert [(e["entity_id"], e["components"]) for e in state] == [(1, text(10))]
    with pytest.raises(InvalidCommandError):
        await publish(3, [entity(5, 5)], snapshot=True, replaces=True)
    assert [m["tick"] for m in await authority.manifests(world_id=world_id)] == [0, 1, 2]
    assert len((await authority.load_state(world_id=world_id))["entities"]) == 1
