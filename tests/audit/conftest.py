from __future__ import annotations

import pytest

from archetype.commands import ActorCtx, DurableOptions, Role
from archetype.runtime import Runtime
from archetype.world import CreateWorld, Despawn, Spawn, Step
from tests.component_modules.alpha import Health

DAY_MS = 86_400_000
ALICE = ActorCtx(principal="alice", roles=frozenset({Role.player}))
BOB = ActorCtx(principal="bob", roles=frozenset({Role.player}))


@pytest.fixture
async def rt(tmp_path, clock):
    runtime = await Runtime.open_local(tmp_path / "data", clock=clock, owner="runner-a", lease_ms=1_000)
    yield runtime
    await runtime.close()


async def populate(rt, clock) -> str:
    """World w1 over two days: alice's spawn applied at tick 0, bob's despawn rejected at tick 1,
    a trusted spawn still pending for tick 5; world w2 holds a command with the same id "a"."""
    w1 = await rt.dispatcher.apply(CreateWorld(name="one", world_id="w1"))
    w2 = await rt.dispatcher.apply(CreateWorld(name="two", world_id="w2"))
    await rt.dispatcher.defer_as(ALICE, Spawn(world_id=w1, components=[Health(hp=1)]), DurableOptions(tick=0), command_id="a")
    await rt.dispatcher.defer_as(BOB, Despawn(world_id=w1, entity_id=99), DurableOptions(tick=1), command_id="b")
    await rt.dispatcher.apply(Step(world_id=w1))  # tick 0: a applied
    clock.advance(DAY_MS)
    await rt.dispatcher.apply(Step(world_id=w1))  # tick 1: b rejected
    await rt.dispatcher.defer(Spawn(world_id=w1, components=[Health(hp=2)]), DurableOptions(tick=5), command_id="c")
    await rt.dispatcher.defer(Spawn(world_id=w2, components=[Health(hp=3)]), DurableOptions(tick=0), command_id="a")
    return w1
