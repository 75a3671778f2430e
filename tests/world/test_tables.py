"""Archetype tables (archetype.world.state, Pyodide-safe: no numpy here): committed entities are
grouped by signature into tables in id order, structural changes move rows between tables when a
tick commits, and reads, queries and the published bytes are those of a plain per-entity model."""

import random

from archetype.world import AsyncWorld, columnar
from archetype.world.components import type_key
from archetype.world.state import WriteSet
from tests.component_modules.alpha import Health, Position, Velocity
from tests.world.test_storage import wire

POSITION, VELOCITY, HEALTH = (type_key(t) for t in (Position, Velocity, Health))


def tables(world):
    return {table.keys: list(table.ids) for table in world.state._tables.values()}


async def _world(count):
    world = AsyncWorld("w")
    await world.ensure_entity_ids(count)
    return world


async def test_structural_changes_move_rows_between_tables_at_commit():
    world = await _world(10)
    async with world.lock:
        a, b, c = world.atomically(lambda: [world.spawn([Position(x=i, y=0.0)]) for i in range(3)])
    await world.step()
    assert tables(world) == {(POSITION,): [a, b, c]}
    async with world.lock:
        world.atomically(lambda: world.add_components(a, [Health(hp=1)]))
        assert tables(world) == {(POSITION,): [a, b, c]}  # nothing moves before the tick commits
        assert world.query(Health) == [(a, (Health(hp=1),))]
    await world.step()
    assert tables(world) == {(POSITION,): [b, c], tuple(sorted((HEALTH, POSITION))): [a]}
    async with world.lock:
        world.atomically(lambda: (world.add_components(c, [Health(hp=3)]), world.remove_components(a, [Health])))
    await world.step()
    assert tables(world) == {(POSITION,): [a, b], tuple(sorted((HEALTH, POSITION))): [c]}
    async with world.lock:
        world.atomically(lambda: (world.despawn(c), world.despawn(b)))
    await world.step()
    assert tables(world) == {(POSITION,): [a]}  # an emptied table is gone
    assert world.get(a) == {Position: Position(x=0, y=0.0)} and not world.exists(b)


async def test_the_tables_hold_what_a_per_entity_model_holds():
    rng = random.Random(11)
    world = await _world(400)
    model: dict[int, dict] = {}
    for tick in range(30):
        async with world.lock:
            for _ in range(rng.randrange(1, 12)):
                live = sorted(model)
                kind = rng.choice(["spawn", "spawn", "update", "add", "remove", "despawn"]) if live else "spawn"
                entity = rng.choice(live) if live else None
                if kind == "spawn":
                    components = [Position(x=tick, y=rng.random())] + ([Health(hp=tick)] if rng.random() < 0.5 else [])
                    new = world.atomically(lambda components=components: world.spawn(components))
                    model[new] = {type(c): c for c in components}
                elif kind == "update":
                    world.atomically(lambda e=entity, t=tick: world.update(e, [Position(x=-t, y=0.5)]))
                    model[entity][Position] = Position(x=-tick, y=0.5)
                elif kind == "add" and Velocity not in model[entity]:
                    world.atomically(lambda e=entity, t=tick: world.add_components(e, [Velocity(dx=t, dy=1.0)]))
                    model[entity][Velocity] = Velocity(dx=tick, dy=1.0)
                elif kind == "remove" and Health in model[entity]:
                    world.atomically(lambda e=entity: world.remove_components(e, [Health]))
                    del model[entity][Health]
                elif kind == "despawn":
                    world.atomically(lambda e=entity: world.despawn(e))
                    del model[entity]
        await world.step()
        assert {e: world.get(e) for e, _ in world.state.items()} == model
        assert [e for e, _ in world.query(Position, Health)] == sorted(e for e, c in model.items() if Health in c)
        for table in world.state._tables.values():
            assert list(table.ids) == sorted(table.ids) and len(table.ids) == len(set(table.ids))
    # what it publishes is the canonical text of each entity, as a world loaded from the same entities has it
    reloaded = AsyncWorld("w", entities={e: {type_key(type(c)): c for c in cs.values()} for e, cs in model.items()})
    expected = [(e, wire(model[e].values())) for e in sorted(model)]
    assert published(world) == published(reloaded) == expected


def published(world):
    """The snapshot `world` would send, decoded as the ledger does."""
    sections, removed = world.state.sections(WriteSet({}, {}), True, world.encoder.component)
    return [entry for chunk in columnar.encode(sections, removed) for entry in columnar.decode(chunk)]


async def test_an_entity_joining_a_table_below_its_highest_id_keeps_it_in_id_order():
    world = await _world(10)
    async with world.lock:
        a, b, c = world.atomically(
            lambda: [world.spawn([Position(x=i, y=0.0)] + ([Health(hp=i)] if i else [])) for i in range(3)]
        )
    await world.step()
    async with world.lock:
        world.atomically(lambda: world.add_components(a, [Health(hp=9)]))
    await world.step()
    assert tables(world) == {tuple(sorted((HEALTH, POSITION))): [a, b, c]}
    assert [e for e, _ in world.query(Health)] == [a, b, c] and world.get(a)[Health] == Health(hp=9)
