"""What a tick tells the code it runs (docs/ledger.md, "Tick modes", `dt`): the tick number and the
simulated time step `world.dt`, to per-entity and vectorised processors, PreTick hooks and commands
alike; and a lockstep world's step is always the next tick."""

from __future__ import annotations

from archetype.vector import add_vector_processor
from archetype.world import AsyncWorld, PreTick
from tests.component_modules.alpha import Position, Velocity


async def a_world(mode: str, interval_ms: int, seen: list) -> AsyncWorld:
    world = AsyncWorld("w", tick_mode=mode, tick_interval_ms=interval_ms)  # type: ignore[arg-type]
    await world.ensure_entity_ids()
    async with world.lock:
        world.atomically(lambda: world.spawn([Position(x=0, y=0), Velocity(dx=1, dy=0)]))

    def per_entity(w: AsyncWorld, tick: int, entity_id: int, components: tuple) -> None:
        seen.append(("entity", tick, w.dt))

    def vectorised(w: AsyncWorld, tick: int, table) -> None:
        seen.append(("vector", tick, w.dt))
        table[Position].x += table[Velocity].dx * w.dt

    world.add_hook(PreTick, lambda w, event: seen.append(("pre", event.tick, event.dt)))
    world.add_processor(per_entity, Position)
    add_vector_processor(world, vectorised, Position, Velocity, writes=[Position])
    return world


async def test_a_lockstep_tick_is_one_interval_and_always_the_next():
    seen: list = []
    world = await a_world("lockstep", 250, seen)
    assert [(await world.step(tick)).tick for tick in (None, 7, None)] == [0, 1, 2]  # 7: still the next one
    assert seen == [(kind, tick, 0.25) for tick in (0, 1, 2) for kind in ("pre", "entity", "vector")]
    assert world.query(Position)[0][1][0].x == 0.75  # moved by dx * dt on each of three ticks


async def test_a_realtime_step_covers_the_ticks_it_coalesced():
    seen: list = []
    world = await a_world("realtime", 50, seen)
    assert [(await world.step(tick)).tick for tick in (None, 4, None)] == [0, 4, 5]
    dts = [(tick, dt) for kind, tick, dt in seen if kind == "vector"]
    assert dts == [(0, 0.05), (4, 0.2), (5, 0.05)]  # tick 0 covers one tick (from -1), tick 4 four
    assert {(tick, dt) for _, tick, dt in seen} == set(dts)  # the same for hooks and per-entity processors


async def test_an_unpaced_lockstep_world_has_no_time_step():
    seen: list = []
    world = await a_world("lockstep", 0, seen)
    await world.step()
    assert {dt for *_, dt in seen} == {0.0}
