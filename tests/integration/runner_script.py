"""A separate process for the command-flow tests: `feed` admits commands, `step` steps a world."""

import asyncio
import sys

from archetype import Runtime
from archetype.commands import DeferredItem, DurableOptions
from archetype.world import Despawn, Spawn, Update
from tests.component_modules.alpha import Health


async def feed(data: str, world_id: str, start: int, count: int) -> None:
    rt = await Runtime.open_local(data)
    for i in range(start, start + count):
        tick = i // 10
        spawn = await rt.dispatcher.defer_spawn(Spawn(world_id=world_id, components=[Health(hp=i)]), DurableOptions(tick=tick),
                                                command_id=f"spawn-{i}")  # fmt: skip
        await rt.dispatcher.defer_batch([
            DeferredItem(op=Update(world_id=world_id, entity_id=spawn.entity_id, components=[Health(hp=i + 1000)]),
                         options=DurableOptions(tick=tick + 1), command_id=f"update-{i}"),
            DeferredItem(op=Despawn(world_id=world_id, entity_id=10**9 + i), options=DurableOptions(tick=tick),
                         command_id=f"ghost-{i}"),
        ])  # fmt: skip
    await rt.close()


async def step(data: str, world_id: str, ticks: int) -> None:
    rt = await Runtime.open_local(data, owner=f"runner-{ticks}")
    for _ in range(ticks):
        await rt.worlds.step(world_id)
        await asyncio.sleep(0.005)
    await rt.close()


if __name__ == "__main__":
    mode, data, world_id, *numbers = sys.argv[1:]
    asyncio.run({"feed": feed, "step": step}[mode](data, world_id, *map(int, numbers)))
