import pytest

from archetype.world import AsyncWorld, OnDestroy, OnSpawn, PostTick, PreTick, TickOutcomeUnknownError
from archetype.world.commit import InMemoryPublisher
from archetype.world.world import EntityIdsExhaustedError
from tests.component_modules.alpha import Health, Position, Velocity
from tests.component_modules.beta import Position as BetaPosition


async def spawn(world, *components, entity_id=None):
    await world.ensure_entity_ids()
    async with world.lock:
        return world.spawn(components, entity_id=entity_id)


async def test_step_runs_materialization_pretick_discovery_processors_commit_posttick_in_order():
    calls = []
    world = AsyncWorld("w1")

    async def materialize(w, tick):
        calls.append(("materialize", tick, w.lock.locked()))
        w.spawn([Position(x=0, y=0), Velocity(dx=1, dy=0)])  # a due spawn introduces its signature this tick

    world.materializer = materialize
    world.add_hook(PreTick, lambda w, e: calls.append(("pre", e.tick, len(w.query(Position)))))
    world.add_processor(lambda w, t, eid, comps: calls.append(("process", t, eid)), Position, Velocity)
    world.add_hook(PostTick, lambda w, e: calls.append(("post", e.receipt.tick, w.tick)))

    receipt = await world.step()

    assert calls == [("materialize", 0, True), ("pre", 0, 1), ("process", 0, 1), ("post", 0, 0)]
    assert receipt.world_id == "w1" and receipt.tick == 0 and receipt.commands_applied == 0
    assert receipt.commit_token == world.publisher.manifests[0].commit_token


async def test_processors_run_per_signature_and_see_their_components_in_order():
    world = AsyncWorld("w1")
    mover = await spawn(world, Position(x=0, y=0), Velocity(dx=2, dy=1))
    still = await spawn(world, Position(x=5, y=5))
    await spawn(world, Health(hp=3))

    def move(w, tick, entity_id, components):
        position, velocity = components
        w.update(entity_id, [position.model_copy(update={"x": position.x + velocity.dx})])

    world.add_processor(move, Position, Velocity)
    await world.step()
    await world.step()
    assert world.get(mover)[Position].x == 4
    assert world.get(still)[Position].x == 5


async def test_hooks_fire_on_spawn_and_destroy():
    seen = []
    world = AsyncWorld("w1")
    world.add_hook(OnSpawn, lambda w, e: seen.append(("spawn", e.entity_id)))
    world.add_hook(OnDestroy, lambda w, e: seen.append(("destroy", e.entity_id)))
    entity = await spawn(world, Health(hp=1))
    async with world.lock:
        world.despawn(entity)
    assert seen == [("spawn", entity), ("destroy", entity)]


def test_unknown_hook_kind_is_refused():
    with pytest.raises(ValueError):
        AsyncWorld("w1").add_hook(int, lambda w, e: None)


async def test_mutating_a_missing_entity_is_a_lookup_error():
    world = AsyncWorld("w1")
    for mutate in (
        lambda: world.despawn(42),
        lambda: world.update(42, [Health(hp=1)]),
        lambda: world.add_components(42, [Health(hp=1)]),
        lambda: world.remove_components(42, [Health]),
    ):
        with pytest.raises(LookupError):
            mutate()


async def test_double_spawn_of_one_id_is_a_value_error():
    world = AsyncWorld("w1")
    await spawn(world, Health(hp=1), entity_id=7)
    with pytest.raises(ValueError):
        await spawn(world, Health(hp=2), entity_id=7)


async def test_component_rules():
    world = AsyncWorld("w1")
    entity = await spawn(world, Health(hp=1))
    with pytest.raises(LookupError):
        world.update(entity, [Position(x=1, y=1)])  # not present
    with pytest.raises(ValueError):
        world.add_components(entity, [Health(hp=2)])  # already present
    with pytest.raises(LookupError):
        world.remove_components(entity, [Position])
    with pytest.raises(ValueError):
        world.spawn([Health(hp=1), Health(hp=2)])  # same component twice


async def test_entity_ids_start_at_one_and_stay_below_2_pow_53():
    world = AsyncWorld("w1")
    assert await spawn(world, Health(hp=1)) == 1
    with pytest.raises(ValueError):
        await spawn(world, Health(hp=1), entity_id=2**53)
    with pytest.raises(ValueError):
        await spawn(world, Health(hp=1), entity_id=0)


async def test_atomically_drops_every_mutation_of_a_failed_unit():
    world = AsyncWorld("w1")
    entity = await spawn(world, Health(hp=1))

    def half_done():
        world.update(entity, [Health(hp=99)])
        world.despawn(12345)  # fails: the update above must not survive

    with pytest.raises(LookupError):
        world.atomically(half_done)
    assert world.get(entity)[Health].hp == 1


async def test_schema_identical_classes_share_the_component_slot_but_keep_their_live_type():
    world = AsyncWorld("w1")
    entity = await spawn(world, BetaPosition(x=1, y=1))
    assert type(world.get(entity)[BetaPosition]) is BetaPosition
    assert [e for e, _ in world.query(Position)] == [entity]  # alpha.Position has the same identity


class FlakyPublisher(InMemoryPublisher):
    def __init__(self, failures):
        super().__init__()
        self.failures = list(failures)
        self.attempts = []

    async def publish(self, prepared):
        self.attempts.append(prepared)
        if self.failures:
            raise self.failures.pop(0)
        await super().publish(prepared)


async def test_a_failed_publication_keeps_the_prepared_tick_and_republishes_it_unchanged():
    publisher = FlakyPublisher([TickOutcomeUnknownError("answer lost"), ConnectionError("down")])
    world = AsyncWorld("w1", publisher=publisher)
    processed = []
    world.add_processor(lambda w, t, eid, c: processed.append(t), Health)
    await spawn(world, Health(hp=1))
    with pytest.raises(TickOutcomeUnknownError):
        await world.step()
    async with world.lock:
        late = world.spawn([Health(hp=5)])  # a direct mutation after the tick was prepared
    with pytest.raises(ConnectionError):
        await world.step()
    receipt = await world.step()
    assert len({p.manifest.commit_token for p in publisher.attempts}) == 1
    assert receipt.tick == 0 and world.tick == 0
    assert processed == [0]  # processors ran once: the prepared tick was not recomputed
    assert late not in publisher.manifests[0].written_entity_ids
    await world.step()
    assert late in publisher.manifests[1].written_entity_ids


async def test_a_processor_failure_leaves_the_tick_retryable_without_partial_writes():
    world = AsyncWorld("w1")
    entity = await spawn(world, Health(hp=1))
    fail = [True]

    def hurt(w, tick, entity_id, components):
        w.update(entity_id, [Health(hp=components[0].hp - 1)])
        if fail:
            fail.pop()
            raise RuntimeError("processor bug")

    world.add_processor(hurt, Health)
    with pytest.raises(RuntimeError):
        await world.step()
    assert world.tick == -1 and world.get(entity)[Health].hp == 1
    await world.step()
    assert world.tick == 0 and world.get(entity)[Health].hp == 0


async def test_exhausting_the_entity_id_block_within_a_tick_is_a_clear_error():
    world = AsyncWorld("w1")
    world.ID_BLOCK = 2
    await world.ensure_entity_ids()
    async with world.lock:
        world.spawn([Health(hp=1)])
        world.spawn([Health(hp=1)])
        with pytest.raises(EntityIdsExhaustedError):
            world.spawn([Health(hp=1)])


async def test_a_processor_sees_every_match_in_id_order_across_tables_as_earlier_calls_left_it():
    world = AsyncWorld("w1")
    first = await spawn(world, Position(x=1, y=0), Velocity(dx=1, dy=0))
    healthy = await spawn(world, Position(x=2, y=0), Velocity(dx=1, dy=0), Health(hp=1))  # another table
    doomed = await spawn(world, Position(x=3, y=0), Velocity(dx=1, dy=0))
    stopped = await spawn(world, Position(x=4, y=0), Velocity(dx=1, dy=0))
    await world.step()  # all four committed, in two tables
    world.add_hook(PreTick, lambda w, e: w.spawn([Position(x=5, y=0), Velocity(dx=1, dy=0)]))
    seen = []

    def process(w, tick, entity_id, components):
        seen.append((entity_id, components[0].x))
        if entity_id == first:
            w.despawn(doomed)
            w.update(healthy, [Position(x=20, y=0)])
            w.remove_components(stopped, [Velocity])

    world.add_processor(process, Position, Velocity)
    await world.step()
    assert seen == [(first, 1), (healthy, 20), (stopped + 1, 5)]
