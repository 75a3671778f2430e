"""The edge-hosting parity script: the same admissions and ticks for a world, whoever hosts it
(a `serve` runner loop, the Durable Object's alarm on the stand-in, or on the real interpreter),
and the snapshot the hosts must agree on byte for byte, in either tick mode (the world's interval
is the Worker's default TICK_INTERVAL_MS, and serve's runner runs at the same rate)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from archetype.canonical import canonical_json
from archetype.commands import DurableOptions
from archetype.commands.port import ManualClock
from archetype.metrics import Metrics
from archetype.modules import set_up_modules
from archetype.runtime import Runtime
from archetype.world import CreateWorld, Despawn, Spawn, Update
from archetype.world_runner import WorldRunner
from durable_world.edge import TICK_INTERVAL_MS
from tests.component_modules.alpha import Position, Velocity
from tests.server import game

PARITY_WORLD = "edge-parity"  # tests/server/game.py hosts edge-* worlds at the edge


async def spawn_mover(rt: Runtime, world_id: str, command_id: str, tick: int = 0, x: float = 0.0) -> int:
    op = Spawn(world_id=world_id, components=[Position(x=x, y=0), Velocity(dx=1, dy=2)])
    return (await rt.dispatcher.defer_spawn(op, DurableOptions(tick=tick), command_id=command_id)).entity_id


async def create(rt: Runtime, name: str, world_id: str, tick_mode: str) -> None:
    await rt.dispatcher.apply(CreateWorld(name=name, world_id=world_id, tick_mode=tick_mode, tick_interval_ms=TICK_INTERVAL_MS))


async def scripted(rt: Runtime, world_id: str, step: Callable[[], Awaitable[Any]], clock: ManualClock,
                   tick_mode: str = "lockstep") -> None:  # fmt: skip
    """Create the world, admit spawns, a rejected despawn and an update, and run four ticks."""
    await create(rt, "parity", world_id, tick_mode)
    first = await spawn_mover(rt, world_id, "spawn-a")
    await spawn_mover(rt, world_id, "spawn-b", tick=1, x=10.0)
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=999), DurableOptions(tick=1), command_id="ghost")
    for _ in range(2):
        clock.advance(TICK_INTERVAL_MS)
        await step()
    update = Update(world_id=world_id, entity_id=first, components=[Velocity(dx=-1, dy=0)])
    await rt.dispatcher.defer(update, DurableOptions(tick=2), command_id="turn")
    for _ in range(2):
        clock.advance(TICK_INTERVAL_MS)
        await step()


async def later(rt: Runtime, world_id: str, step: Callable[[], Awaitable[Any]], clock: ManualClock,
                tick_mode: str = "lockstep") -> None:  # fmt: skip
    """Create the world; a spawn due at once, then (after one tick) commands due 3 and 6 ticks on,
    and a restart of the host between them (`step` is handed `restart=True` then); ten ticks' time."""
    await create(rt, "later", world_id, tick_mode)
    first = await spawn_mover(rt, world_id, "spawn-now")
    clock.advance(TICK_INTERVAL_MS)
    await step()
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=999), DurableOptions(tick=3), command_id="ghost-3")
    update = Update(world_id=world_id, entity_id=first, components=[Velocity(dx=5, dy=5)])
    await rt.dispatcher.defer(update, DurableOptions(tick=6), command_id="turn-6")
    await spawn_mover(rt, world_id, "spawn-6", tick=6, x=100.0)
    for n in range(9):
        clock.advance(TICK_INTERVAL_MS)
        await step(restart=n == 4)


async def hosted_snapshot(authority: Any, world_id: str, delivered: list[Any] | tuple[Any, ...] = ()) -> str:
    """Manifests, the outbox stream (what the audit queue was sent, then what is still unsent) and state."""
    return canonical_json({
        "manifests": await authority.manifests(world_id, limit=1000),
        "outbox": [*delivered, *await authority.read_outbox(world_id, limit=1000)],
        "state": await authority.load_state(world_id),
    })  # fmt: skip


Script = Callable[[Runtime, str, Callable[..., Awaitable[Any]], ManualClock, str], Awaitable[None]]


async def serve_hosted_snapshot(directory: Path, world_id: str = PARITY_WORLD, script: Script = scripted,
                                module: ModuleType = game, tick_mode: str = "lockstep") -> str:  # fmt: skip
    """The script on a local authority, stepped by `archetype serve`'s own runner loop with the
    module set up as `serve --module` does; a restart is a new runtime and runner on the catalog."""
    clock = ManualClock()
    stop = asyncio.Event()
    host: dict[str, Any] = {}

    async def start() -> None:
        host["rt"] = serve = await Runtime.open_local(directory, clock=clock, audit=None, owner="serve@host")
        set_up_modules(serve, [module])
        host["runner"] = WorldRunner(serve, serve.authority, Metrics(), tick_rate=1, clock=clock)  # type: ignore[arg-type]

    async def one_pass(restart: bool = False) -> None:
        runner = host["runner"]
        if restart:
            await host["rt"].close()
            await start()
            runner = host["runner"]
        if not runner.passes:  # the first pass comes after a sweep, as in `serve`
            await runner.sweep(stop)
        runner.passes += 1
        await runner.run_pass(stop)

    await start()
    admitter = host["rt"]
    try:
        await script(admitter, world_id, one_pass, clock, tick_mode)
        return await hosted_snapshot(host["rt"].authority, world_id)
    finally:
        await host["rt"].close()
