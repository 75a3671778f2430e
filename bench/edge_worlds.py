"""The worlds of bench/workerd_runtime.py, staged into its Worker (`--module bench.edge_worlds`) and
set up on its local baseline alike: every `edge-*` world is stepped by its Durable Object;
`edge-moving-*` worlds move each of their entities every tick (bench/moving.py's per-entity
processor), the others have no processor and step only when a command is due."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench.moving import Position, Velocity, move_each

if TYPE_CHECKING:  # the Runtime is CPython's; at the edge `setup` gets an EdgeRuntime of the same shape
    from archetype.runtime import Runtime

MOVING = "edge-moving-"


def setup(runtime: Runtime) -> None:
    def moving(world: Any) -> None:
        if world.world_id.startswith(MOVING):
            world.add_processor(move_each, Position, Velocity)

    runtime.worlds.on_load.append(moving)


def edge_hosted(world_id: str) -> bool:
    return world_id.startswith("edge-")
