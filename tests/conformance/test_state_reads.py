"""Reads for clients on every authority: `read_state` (a page of the published state, kept to
some component types and some entities, continued after `next_after`) and `commands_by_id`
(several commands of one scope in one read). The expected answers come from the runner's own
world state and the submitted ids, not from the ledger's reading of its chunks."""

import pytest

from archetype.commands import DurableOptions, InvalidCommandError
from archetype.commands.errors import UnknownComponentError, WorldNotFoundError
from archetype.commands.options import ActorCtx, Role
from archetype.commands.state_pages import STATE_READ_CHUNKS, entity_texts
from archetype.vector import add_vector_processor
from archetype.world import Despawn
from archetype.world.columnar import Part, Section, encode
from archetype.world.components import type_key
from tests.component_modules.alpha import Health, Position, Velocity
from tests.component_modules.mixed import Tag
from tests.world.test_storage import wire


async def read_all(authority, world_id, **filters):
    """Every page of a read, followed through `next_after`: (entity id, text) pairs and the pages' sizes."""
    found, sizes, after = [], [], 0
    while True:
        page = await authority.read_state(world_id=world_id, after_entity_id=after, **filters)
        entities = entity_texts(page["sections"])
        assert page["sections"] == sorted(page["sections"], key=lambda s: [(c["name"], c["fingerprint"]) for c in s["components"]])
        found += entities
        sizes.append(len(entities))
        if page["next_after"] is None:
            return found, sizes
        assert page["next_after"] >= after + 1 and (not entities or page["next_after"] >= found[-1][0])
        after = page["next_after"]


def expected(world, types=None, ids=None):
    """The reference: the runner's own state, kept and projected as read_state documents it."""
    keys = None if types is None else {type_key(t) for t in types}
    rows = []
    for entity_id, components in sorted(world.state.items()):
        if ids is not None and entity_id not in ids:
            continue
        if keys is not None:
            if not keys <= components.keys():
                continue
            components = {k: c for k, c in components.items() if k in keys}
        rows.append((entity_id, wire(components.values())))
    return rows


def _push(world, tick, table):
    table[Position].x += 0.5


async def _moving_world(rt, world_id, monkeypatch):
    """60 entities of mixed signatures over several snapshot chunks, a snapshot, then a column
    delta (Position only), a per-entity update, a despawn and a spawn over it."""
    monkeypatch.setattr("archetype.world.columnar.CHUNK_BYTES", 1_500)
    world = await rt.worlds.get(world_id)
    add_vector_processor(world, _push, Position, Velocity, writes=[Position])
    await world.ensure_entity_ids(80)
    async with world.lock:
        ids = world.atomically(lambda: [world.spawn(
            [Position(x=i / 3, y=-0.0), Velocity(dx=1.0, dy=2.0)] + ([Health(hp=i)] if i % 3 == 0 else [])
            + ([Tag(label=f"t{i}", weight=0.5)] if i % 4 == 0 else [])
        ) for i in range(60)])  # fmt: skip
    await world.step()
    async with world.lock:
        world.atomically(lambda: (world.update(ids[6], [Health(hp=-6)]), world.despawn(ids[9]),
                                  world.spawn([Health(hp=99)]), world.remove_components(ids[12], [Health])))  # fmt: skip
    await world.step()
    await world.step()
    return world, ids


async def test_pages_of_the_whole_state_are_the_published_entities(rt, world_id, authority, monkeypatch):
    world, _ = await _moving_world(rt, world_id, monkeypatch)
    for limit in (1, 7, 10_000):
        found, sizes = await read_all(authority, world_id, limit=limit)
        assert found == expected(world)
        assert max(sizes) <= limit
    assert (await authority.read_state(world_id=world_id))["tick_head"] == world.tick


@pytest.mark.parametrize("types", [[Position], [Health], [Health, Position], [Tag, Velocity, Position], [Tag, Health]])
async def test_a_component_filter_keeps_the_entities_with_every_type_and_only_those(rt, world_id, authority, monkeypatch,
                                                                                    types):  # fmt: skip
    world, _ = await _moving_world(rt, world_id, monkeypatch)
    for limit in (3, 10_000):
        found, _ = await read_all(authority, world_id, limit=limit, component_types=[type_key(t) for t in types])
        assert found == expected(world, types)
    # a current type may be named by its name alone
    found, _ = await read_all(authority, world_id, component_types=[t.__name__ for t in types])
    assert found == expected(world, types)


async def test_an_entity_filter_keeps_those_ids(rt, world_id, authority, monkeypatch):
    world, ids = await _moving_world(rt, world_id, monkeypatch)
    wanted = [ids[59], ids[0], ids[9], ids[30], ids[31], 10**6, ids[6]]  # unordered, a despawned and an unknown id
    found, _ = await read_all(authority, world_id, entity_ids=wanted, limit=2)
    assert found == expected(world, ids=set(wanted))
    found, _ = await read_all(authority, world_id, entity_ids=wanted, component_types=[type_key(Health)])
    assert found == expected(world, [Health], set(wanted))
    beyond = await authority.read_state(world_id=world_id, after_entity_id=ids[30], entity_ids=[ids[0], ids[30]])
    assert (beyond["sections"], beyond["next_after"]) == ([], None)


async def test_a_page_reads_a_bounded_number_of_chunks_and_says_where_to_go_on(rt, world_id, authority, monkeypatch):
    # only the last entity has Tag: the read of it crosses every chunk, STATE_READ_CHUNKS at a time.
    # The bound is the ledger's own (not patched here: on worker_workerd the ledger runs in workerd),
    # so the world writes many times that many chunks (CHUNK_BYTES is the writer's, in this process).
    monkeypatch.setattr("archetype.world.columnar.CHUNK_BYTES", 600)
    count = 100 * STATE_READ_CHUNKS
    world = await rt.worlds.get(world_id)
    await world.ensure_entity_ids(count)
    async with world.lock:
        world.atomically(lambda: [world.spawn([Health(hp=i)] + ([Tag(label="x", weight=1.0)] if i == count - 1 else []))
                                  for i in range(count)])  # fmt: skip
    await world.step()
    found, sizes = await read_all(authority, world_id, component_types=[type_key(Tag)])
    assert found == expected(world, [Tag]) and len(found) == 1
    assert len(sizes) > 2 and sizes[:-1] == [0] * (len(sizes) - 1)  # pages with nothing, and where to go on


@pytest.mark.parametrize("arguments, error", [
    ({"component_types": [f"Position:{'0' * 64}"]}, UnknownComponentError),  # not recorded
    ({"component_types": ["Nobody"]}, UnknownComponentError),
    ({"component_types": ["Position:abc"]}, InvalidCommandError),
    ({"component_types": []}, InvalidCommandError),
    ({"component_types": ["Position"] * 33}, InvalidCommandError),
    ({"entity_ids": []}, InvalidCommandError),
    ({"entity_ids": [0]}, InvalidCommandError),
    ({"entity_ids": [5, -5]}, InvalidCommandError),
    ({"entity_ids": list(range(1, 1_002))}, InvalidCommandError),
    ({"limit": 0}, InvalidCommandError),
    ({"limit": 10_001}, InvalidCommandError),
    ({"after_entity_id": -1}, InvalidCommandError),
])  # fmt: skip
async def test_a_bad_read_is_refused_with_its_code(rt, world_id, authority, arguments, error):
    world = await rt.worlds.get(world_id)
    await world.ensure_entity_ids(2)
    async with world.lock:
        world.atomically(lambda: world.spawn([Position(x=1.0, y=2.0)]))
    await world.step()
    before = await authority.world_info(world_id=world_id)
    with pytest.raises(error):
        await authority.read_state(world_id=world_id, **arguments)
    assert await authority.world_info(world_id=world_id) == before
    with pytest.raises(WorldNotFoundError):
        await authority.read_state(world_id="w-nowhere")


async def test_commands_by_id_answers_the_scopes_own_in_sequence_order(rt, world_id, authority):
    alice, bob = (ActorCtx(principal=p, roles=frozenset({Role.player})) for p in ("alice", "bob"))
    options = DurableOptions(tick=10**6)
    mine = [(await rt.dispatcher.defer_as(alice, Despawn(world_id=world_id, entity_id=n), options, command_id=f"a-{n}"))
            for n in (3, 1, 2)]  # fmt: skip
    await rt.dispatcher.defer_as(bob, Despawn(world_id=world_id, entity_id=1), options, command_id="a-1")  # bob's own a-1
    rows = await authority.commands_by_id(world_id=world_id, command_ids=["a-2", "a-1", "a-3", "a-9", "a-1"], scope="alice")
    assert [(r["command_id"], r["sequence"]) for r in rows] == [(m.command_id, m.sequence) for m in mine]
    assert [r["principal"] for r in rows] == ["alice"] * 3
    single = [await authority.command(world_id=world_id, command_id=m.command_id, scope="alice") for m in mine]
    assert rows == single  # the same rows `command` answers one by one
    bobs = await authority.commands_by_id(world_id=world_id, command_ids=["a-1", "a-2"], scope="bob")
    assert [(r["command_id"], r["principal"]) for r in bobs] == [("a-1", "bob")]
    assert await authority.commands_by_id(world_id=world_id, command_ids=["a-1"]) == []  # the trusted scope has none


@pytest.mark.parametrize("command_ids", [[], ["bad id"], [f"c-{n}" for n in range(1_001)]])
async def test_a_bad_commands_by_id_is_refused(rt, world_id, authority, command_ids):
    with pytest.raises(InvalidCommandError):
        await authority.commands_by_id(world_id=world_id, command_ids=command_ids, scope="alice")
    with pytest.raises(WorldNotFoundError):
        await authority.commands_by_id(world_id="w-nowhere", command_ids=["a-1"])


async def test_deltas_overlay_in_publication_order_whatever_their_kind(rt, world_id, authority):
    """Published chunks by hand (docs/storage.md): a column delta, then a whole entry of the same
    entity, then a column delta again, a despawn and a spawn of an id the snapshot never held: the
    latest source of each component wins, on every read."""
    epoch = (await authority.acquire_writer(world_id=world_id))["writer_epoch"]
    await rt.scheduler.record_components(world_id, [Position, Health])

    def chunk(ids, components, partial=False, removed=()):
        parts = [Part(type(column[0]), fields={f: [getattr(c, f) for c in column] for f in type(column[0]).model_fields})
                 for column in components]  # fmt: skip
        return encode([Section(ids, parts, partial=partial)] if ids else [], list(removed))

    async def publish(tick, chunks, snapshot=False):
        manifest = {"world_id": world_id, "tick": tick, "writer_epoch": epoch, "settlements": [],
                    "written_runs": [], "commit_token": f"t{tick}"}  # fmt: skip
        await authority.publish(world_id=world_id, owner="o", session="s", manifest=manifest,
                                writes={"snapshot": snapshot, "chunks": chunks})  # fmt: skip

    positions = [Position(x=float(i), y=0.0) for i in range(3)]
    await publish(0, chunk([1, 2, 3], [[Health(hp=i) for i in range(3)], positions]), snapshot=True)
    await publish(1, chunk([1, 2, 3], [[Position(x=10.0 + i, y=1.0) for i in range(3)]], partial=True))
    await publish(2, chunk([2], [[Health(hp=20)], [Position(x=-2.0, y=-2.0)]]))  # whole: the column delta before loses
    await publish(3, chunk([1, 2], [[Position(x=31.0, y=3.0), Position(x=32.0, y=3.0)]], partial=True) + chunk([], [], removed=[3]))
    await publish(4, chunk([9], [[Health(hp=9)]]))  # above the snapshot's last id
    expected = [(1, wire([Health(hp=0), Position(x=31.0, y=3.0)])), (2, wire([Health(hp=20), Position(x=32.0, y=3.0)])),
                (9, wire([Health(hp=9)]))]  # fmt: skip
    assert [(e["entity_id"], e["components"]) for e in (await authority.load_state(world_id=world_id))["entities"]] == expected
    assert (await read_all(authority, world_id, limit=1))[0] == expected
    found, _ = await read_all(authority, world_id, component_types=[type_key(Position)])
    assert found == [(1, wire([Position(x=31.0, y=3.0)])), (2, wire([Position(x=32.0, y=3.0)]))]
    await publish(5, chunk([2], [[Health(hp=21)], [Position(x=5.0, y=5.0)]]))  # a whole entry after the column delta
    found, _ = await read_all(authority, world_id, entity_ids=[2])
    assert found == [(2, wire([Health(hp=21), Position(x=5.0, y=5.0)]))]
