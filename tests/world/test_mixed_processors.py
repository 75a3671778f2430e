"""A world that mixes per-entity and vectorised processors (archetype.vector, CPython only): what
it builds (a component object per row changed through the columns and read through the
per-entity API, once; none for a world that reads no column per entity) and what it publishes
(the state the same processors written per entity publish, byte for byte, with the same written
ids). tests/conformance/test_mixed_processors.py runs the same scenario on every authority."""

import numpy as np
import pytest

from archetype.vector import UNREAD_WRITES, _Layout, add_vector_processor
from archetype.world import AsyncWorld, PostTick, PreTick
from archetype.world.components import type_key
from tests.component_modules.alpha import Health, Position, Velocity
from tests.component_modules.mixed import Tag
from tests.world.test_vector import Folding


@pytest.fixture
def builds(monkeypatch):
    """The component objects archetype.vector builds from columns, by class, as they are built."""
    made = []
    build = _Layout.build

    def counted(self, values):
        made.append(self.cls)
        return build(self, values)

    monkeypatch.setattr(_Layout, "build", counted)
    return made


# -- the scenario: the same tick written twice, per entity and mixed --
def triage(world, tick, entity_id, components):
    """Per entity, first: changes another component of some entities (they stay in the columns of
    the vectorised processors after it), the Position of others (those are processed from their
    entries), moves some to another table (a Tag added or taken away) and despawns some."""
    health, position = components
    if entity_id % 5 == tick % 5:
        world.update(entity_id, [Health(hp=health.hp - 1)])
    if entity_id % 7 == tick % 7:
        world.update(entity_id, [Position(x=position.x, y=position.y + 1.0)])
    if entity_id % 11 == tick % 11:
        if Tag in world.get(entity_id):
            world.remove_components(entity_id, [Tag])
        else:
            world.add_components(entity_id, [Tag(label="seen", weight=position.x)])
    if entity_id % 17 == tick % 17:
        world.despawn(entity_id)


def drift(world, tick, table):
    position, velocity = table[Position], table[Velocity]
    position.x = np.where(table.ids % 3 == tick % 3, position.x + velocity.dx, position.x)


def drift_each(world, tick, entity_id, components):
    position, velocity = components
    if entity_id % 3 == tick % 3:
        world.update(entity_id, [Position(x=position.x + velocity.dx, y=position.y)])


def watch(world, tick, entity_id, components):
    """Per entity, after `drift`: reads the Position it wrote, writes Health."""
    position, health = components
    if position.x > 4 and entity_id % 2 == tick % 2:
        world.update(entity_id, [Health(hp=health.hp + 10)])


def heal(world, tick, table):
    health = table[Health]
    health.hp = np.where(table.ids % 4 == tick % 4, health.hp + 2, health.hp)


def heal_each(world, tick, entity_id, components):
    (health,) = components
    if entity_id % 4 == tick % 4:
        world.update(entity_id, [Health(hp=health.hp + 2)])


FAILING_TICK = 4


def install(world, vectorised):
    """The scenario's processors, `drift` and `heal` vectorised or not; the first run of tick
    FAILING_TICK fails in `heal`, after everything else ran, and runs again."""
    failed = []

    def arrive(world, event):  # a newcomer a tick (one without Health every other tick)
        world.spawn(
            [Position(x=0.5, y=0.0), Velocity(dx=0.25 + event.tick, dy=0.0)] + [Health(hp=0)] * (event.tick % 2)
        )

    def failing_once(heal):
        def run(world, tick, *args):
            if tick == FAILING_TICK and not failed:
                failed.append(tick)
                raise RuntimeError("heal failed")
            heal(world, tick, *args)

        return run

    world.add_hook(PreTick, arrive)
    world.add_processor(triage, Health, Position)
    if vectorised:
        add_vector_processor(world, drift, Position, Velocity, writes=[Position])
    else:
        world.add_processor(drift_each, Position, Velocity)
    world.add_processor(watch, Position, Health)
    if vectorised:
        add_vector_processor(world, failing_once(heal), Health)
    else:
        world.add_processor(failing_once(heal_each), Health)


def populate(world):
    """60 entities: Position and Velocity, most with Health, some with a Tag (another table)."""
    world.atomically(lambda: [world.spawn(
        [Position(x=i / 4, y=-1.0), Velocity(dx=0.5 + i, dy=0.0)] + ([Health(hp=i)] if i % 6 else [])
        + ([Tag(label="t", weight=1.0)] if i % 9 == 0 else [])
    ) for i in range(60)])  # fmt: skip


async def _world(vectorised):
    world = AsyncWorld("w")
    await world.ensure_entity_ids(100)
    async with world.lock:
        populate(world)
    world.publisher = Folding(world)
    await world.step()
    install(world, vectorised)
    return world


async def test_mixed_processors_publish_what_per_entity_ones_publish():
    mixed, each = await _world(True), await _world(False)
    for tick in range(1, 9):
        for world in (mixed, each):
            if tick == FAILING_TICK:
                with pytest.raises(RuntimeError, match="heal failed"):
                    await world.step()
                assert world.tick == tick - 1
            await world.step()
        assert mixed.tick == each.tick == tick
        assert mixed.publisher.state == each.publisher.state  # the published components texts
        written = [world.publisher.sent[-1].manifest.written_entity_ids for world in (mixed, each)]
        assert written[0] == written[1] and written[0]
        assert sorted(mixed.state.items()) == sorted(each.state.items())
    assert len(mixed.state.tables(frozenset({type_key(Position)}))) > 1  # the Tag made tables of its own


# -- what a mixed world builds --
async def _moving_world(count=40):
    world = AsyncWorld("w")
    await world.ensure_entity_ids(count)
    async with world.lock:
        world.atomically(
            lambda: [world.spawn([Position(x=i, y=0.0), Velocity(dx=1.0, dy=0.0), Health(hp=i)]) for i in range(count)]
        )
    await world.step()
    return world


def nudge(world, tick, table):
    """Moves the entities whose id is the tick's modulo 13: 3 or 4 of 40 a tick."""
    table[Position].x[table.ids % 13 == tick % 13] += 1.0


def nudge_each(world, tick, entity_id, components):
    position, _ = components
    if entity_id % 13 == tick % 13:
        world.update(entity_id, [Position(x=position.x + 1.0, y=position.y)])


def nudged(world, tick):
    return sum(1 for entity_id, _ in world.query(Position) if entity_id % 13 == tick % 13)


async def test_per_entity_reads_of_columns_build_each_changed_row_once(builds):
    world = await _moving_world()
    reads = []

    def look(world, tick, entity_id, components):
        reads.append(entity_id)

    world.add_processor(look, Position)  # the committed columns
    add_vector_processor(world, nudge, Position, Velocity, writes=[Position])
    world.add_processor(look, Position, Velocity)  # the column `nudge` wrote, twice
    world.add_processor(look, Position)
    await world.step()  # the first reads build every row they read, once
    assert builds.count(Position) == 40 + nudged(world, world.tick) and builds.count(Velocity) == 40
    for _ in range(4):
        builds.clear()
        reads.clear()
        await world.step()
        # a moved row is built once, when `look` first reads it; every other row is kept from the
        # column before (per read, as before: 120 of each type)
        assert len(reads) == 120 and builds == [Position] * nudged(world, world.tick)


async def test_a_world_whose_per_entity_code_reads_no_column_builds_no_component(builds):
    world = await _moving_world()
    add_vector_processor(world, nudge, Position, Velocity, writes=[Position])
    for _ in range(6):  # a snapshot, deltas
        await world.step()
    assert builds == []


async def test_a_column_stops_keeping_components_once_per_entity_code_stops_reading_it(builds):
    world = await _moving_world()
    add_vector_processor(world, nudge, Position, Velocity, writes=[Position])
    world.add_hook(PostTick, lambda world, event: world.query(Position) if event.receipt.tick <= 2 else None)
    key = type_key(Position)

    def held():
        (table,) = world.state.tables(frozenset({key}))
        held = table.columns[key].held()
        return 0 if held is None else sum(component is not None for component in held)

    for _ in range(2):
        await world.step()
    assert held() == 40  # read after the tick
    for _ in range(UNREAD_WRITES):
        await world.step()
    assert 0 < held() < 40  # handed on through UNREAD_WRITES columns, less the rows they moved
    await world.step()
    assert held() == 0


async def test_entities_whose_other_components_changed_stay_in_the_columns(builds):
    # every entity's Health is written per entity first: the vectorised processor still runs on
    # its table's columns (one call with every row), and only the rows it moved are built (into
    # those entities' entries, which win over the columns)
    def age(world, tick, entity_id, components):
        health, _ = components
        world.update(entity_id, [Health(hp=health.hp + 1)])

    def aging(vectorised):
        async def made():
            world = await _moving_world()
            world.publisher = Folding(world)
            world.add_processor(age, Health, Position)
            if vectorised:
                add_vector_processor(world, counted, Position, Velocity, writes=[Position])
            else:
                world.add_processor(nudge_each, Position, Velocity)
            return world

        return made

    calls = []

    def counted(world, tick, table):
        # on the table's columns, not on columns made from the entries: what it only reads is
        # the committed column itself
        (committed,) = world.state.tables(frozenset({type_key(Velocity)}))
        calls.append(
            (len(table), np.shares_memory(table[Velocity].dx, committed.columns[type_key(Velocity)].arrays["dx"]))
        )
        nudge(world, tick, table)

    mixed, each = await aging(True)(), await aging(False)()
    for tick in range(1, 5):
        builds.clear()
        calls.clear()
        await mixed.step()
        await each.step()
        assert calls == [(40, True)]
        assert builds == [Position] * nudged(mixed, tick) or tick == 1  # (the first tick builds what `age` reads)
        assert mixed.publisher.state == each.publisher.state
        assert sorted(mixed.state.items()) == sorted(each.state.items())


async def test_an_entity_that_lost_one_of_the_types_this_tick_is_not_processed(monkeypatch):
    # its columns still have a row for it (it moves out when the tick commits), and a column
    # written since holds no component for that row to tell: its entry does
    monkeypatch.setattr("archetype.vector.UNREAD_WRITES", 0)  # no column hands components on

    def strip(world, tick, entity_id, components):
        if entity_id == 1:  # nudged in tick 1
            world.remove_components(entity_id, [Velocity])

    def spin(world, tick, table):
        table[Velocity].dy += 1.0

    def spin_each(world, tick, entity_id, components):
        (velocity,) = components
        world.update(entity_id, [Velocity(dx=velocity.dx, dy=velocity.dy + 1.0)])

    async def made(vectorised):
        world = await _moving_world()
        world.publisher = Folding(world)
        world.add_processor(strip, Position)
        if vectorised:
            add_vector_processor(world, spin, Velocity)
            add_vector_processor(world, nudge, Position, Velocity, writes=[Position])
        else:
            world.add_processor(spin_each, Velocity)
            world.add_processor(nudge_each, Position, Velocity)
        return world

    mixed, each = await made(True), await made(False)
    await mixed.step()
    await each.step()
    assert mixed.tick == 1 and mixed.get(1) == {Position: Position(x=0.0, y=0.0), Health: Health(hp=0)}  # not nudged
    assert mixed.publisher.state == each.publisher.state


async def test_a_written_column_shares_no_memory_with_another(builds):
    # commits write per-entity changes into a column's arrays in place: a column a processor
    # assigned from another (a read-only view, or one array for two fields) must be its own
    def borrow(world, tick, table):
        table[Position].y = table[Velocity].dx
        table[Velocity].dy = table[Velocity].dx

    world = await _moving_world()
    add_vector_processor(world, borrow, Position, Velocity, writes=[Position, Velocity])
    await world.step()
    (table,) = world.state.tables(frozenset({type_key(Position)}))
    arrays = [a for key in sorted(table.columns) if key != type_key(Health) for a in table.columns[key].arrays.values()]
    assert len(arrays) == 4
    assert not any(np.shares_memory(a, b) for i, a in enumerate(arrays) for b in arrays[i + 1 :])
