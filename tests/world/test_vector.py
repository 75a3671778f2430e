"""Vectorised processors (archetype.vector, CPython only): the same entities, the same order and
the same results as the per-entity API, through the world's layered state and its encoding."""

import math

import pytest

from archetype.canonical import NonCanonicalValueError
from archetype.vector import add_vector_processor, layout
from archetype.world import AsyncWorld, Component
from archetype.world.components import component_text
from tests.component_modules.alpha import Health, Position, Velocity


def move(world, tick, table):
    table[Position].x += table[Velocity].dx
    table[Position].y = table[Position].y * 2


def move_each(world, tick, entity_id, components):
    position, velocity = components
    world.update(entity_id, [Position(x=position.x + velocity.dx, y=position.y * 2)])


async def _world(register):
    world = AsyncWorld("w")
    await world.ensure_entity_ids(20)
    async with world.lock:
        world.atomically(lambda: [
            world.spawn([Position(x=i * 0.1, y=-0.0 if i % 3 else 1e-300), Velocity(dx=i, dy=0.5)] + ([Health(hp=i)] if i % 2 else []))
            for i in range(12)
        ] + [world.spawn([Position(x=1.0, y=2.0)])])  # fmt: skip
    await world.step()
    register(world)
    return world


async def test_a_vector_processor_does_what_the_per_entity_one_does():
    vector = await _world(lambda w: add_vector_processor(w, move, Position, Velocity, writes=[Position]))
    each = await _world(lambda w: w.add_processor(move_each, Position, Velocity))
    for _ in range(3):
        a, b = await vector.step(), await each.step()
        assert a.commit_token == b.commit_token  # the same write-set, byte for byte
    assert sorted(vector.state.items()) == sorted(each.state.items())


async def test_only_changed_rows_are_written():
    def nudge_third(world, tick, table):
        table[Position].x[table.ids == 3] += 1.0

    world = await _world(lambda w: add_vector_processor(w, nudge_third, Position, Velocity))
    await world.step()
    assert world.publisher.manifests[-1].written_entity_ids == (3,)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
async def test_a_non_finite_column_fails_the_tick_whole(bad):
    def poison(world, tick, table):
        table[Position].x[-1] = bad

    world = await _world(lambda w: add_vector_processor(w, poison, Position, Velocity))
    before = sorted(world.state.items())
    with pytest.raises(NonCanonicalValueError):
        await world.step()
    assert sorted(world.state.items()) == before and world.tick == 0


def test_a_component_built_from_columns_is_the_validated_one():
    # (the texts written from columns are compared with component_text by the commit tokens above)
    for value in (Position(x=-0.0, y=2.0), Position(x=1e-300, y=-2.5e300), Health(hp=-(2**53 - 1))):
        item = layout(type(value))
        data = {field: getattr(value, field) for field in item.fields}
        rebuilt = item.build(data)
        assert rebuilt == value and component_text(rebuilt) == component_text(value)


def test_only_plain_numeric_components_have_columns():
    class Named(Component):
        label: str

    with pytest.raises(TypeError):
        layout(Named)
