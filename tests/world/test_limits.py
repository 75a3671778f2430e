"""The state limits as mutations land (docs/ledger.md, "State limits"): a component, an entity, one
write and a tick's write-set, each measured in characters of canonical text; a mutation over one
raises StateTooLargeError and leaves nothing, and the world's later mutations are counted as if it
never happened."""

import pytest

from archetype.world import AsyncWorld
from archetype.world.limits import COMMAND_LIMIT, COMPONENT_LIMIT, ENTITY_LIMIT, WRITE_SET_LIMIT, StateTooLargeError
from tests.component_modules.bulky import Appendix, Margin, Note

OVERHEAD = 200  # more than a Note's text adds to its data: name, fingerprint, keys


async def world_with(*mutations) -> AsyncWorld:
    world = AsyncWorld("limits")
    await world.ensure_entity_ids(64)
    for mutation in mutations:
        world.atomically(lambda m=mutation: m(world))
    return world


def spawn_notes(*sizes: int):
    return lambda world: [world.spawn([Note(text="n" * size)]) for size in sizes]


async def test_each_limit_refuses_the_mutation_that_crosses_it_and_nothing_of_it_lands():
    world = await world_with()
    cases = [
        (spawn_notes(COMPONENT_LIMIT), "component Note of entity"),
        (lambda w: w.spawn([Note(text="n" * (ENTITY_LIMIT // 2)), Margin(text="m" * (ENTITY_LIMIT // 2))]), "entity"),
        (spawn_notes(*[COMPONENT_LIMIT - OVERHEAD] * (COMMAND_LIMIT // COMPONENT_LIMIT + 1)), "the write"),
    ]
    for mutation, what in cases:
        with pytest.raises(StateTooLargeError, match=f"^{what}"):
            world.atomically(lambda m=mutation: m(world))
        assert list(world.state.items()) == [] and world.budget.total == 0


async def test_the_write_set_counts_every_entity_written_since_the_last_tick_once_as_last_written():
    per = COMPONENT_LIMIT - OVERHEAD
    fits = WRITE_SET_LIMIT // COMPONENT_LIMIT  # writes of `per` characters that fit
    world = await world_with(*[spawn_notes(per)] * fits)
    first = next(entity_id for entity_id, _ in world.state.items())
    # rewriting an entity counts it once, as last written: a smaller note makes room
    world.atomically(lambda: world.update(first, [Note(text="small")]))
    world.atomically(lambda: world.spawn([Note(text="n" * (per - 1_000))]))
    with pytest.raises(StateTooLargeError, match="^the tick's write-set"):
        world.atomically(lambda: world.spawn([Appendix(text="a" * per)]))
    await world.step()  # published: the next tick's write-set starts empty
    world.atomically(lambda: world.spawn([Appendix(text="a" * per)]))
    assert world.budget.total < 2 * COMPONENT_LIMIT


async def test_a_tick_that_fails_gives_back_what_its_commands_counted():
    world = await world_with(spawn_notes(COMPONENT_LIMIT - OVERHEAD))
    before = world.budget.total

    async def materialize(w, tick):
        w.atomically(lambda: w.spawn([Note(text="n" * 500_000)]))
        raise RuntimeError("the tick fails after its command landed")

    world.materializer = materialize
    with pytest.raises(RuntimeError):
        await world.step()
    assert world.budget.total == before
