"""A game module for `archetype serve --module` and the Worker bundle (`stage.py --module`): its
components, a processor added by `setup`, and which worlds the edge steps itself."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.component_modules.alpha import Position, Velocity

if TYPE_CHECKING:  # the Runtime is CPython's; at the edge `setup` gets an EdgeRuntime of the same shape
    from archetype.runtime import Runtime


def _move(world, tick, entity_id, components) -> None:
    position, velocity = components
    world.update(entity_id, [Position(x=position.x + velocity.dx, y=position.y + velocity.dy)])


# Edge-hosted worlds without the processor: they have work only when a command is due.
IDLE_PREFIX = "edge-idle-"


def setup(runtime: Runtime) -> None:
    runtime.worlds.on_load.append(_add_mover)


def _add_mover(world) -> None:
    if not world.world_id.startswith(IDLE_PREFIX):
        world.add_processor(_move, Position, Velocity)


def edge_hosted(world_id: str) -> bool:
    """Worlds named edge-* are stepped by their Durable Object (edge-idle-* ones only for their
    commands); the rest by a runner."""
    return world_id.startswith("edge-")
