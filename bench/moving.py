"""The moving world's components and per-entity processor, shared by bench/world_bench.py and the
process it times another version of the code in (bench/tick_server.py): one definition, so both
sides move the same entities. Only APIs every version has (Component, world.update, the
vectorised table of archetype.vector)."""

from __future__ import annotations

from typing import Any

from archetype.world import Component


class Position(Component):
    x: float
    y: float


class Velocity(Component):
    dx: float
    dy: float


def move_each(world: Any, tick: int, entity_id: int, components: tuple[Any, ...]) -> None:
    position, velocity = components
    world.update(entity_id, [Position(x=position.x + velocity.dx, y=position.y + velocity.dy)])


def move_columns(world: Any, tick: int, table: Any) -> None:
    """The vectorised processor (archetype.vector): the same moves, a column at a time."""
    table[Position].x += table[Velocity].dx
    table[Position].y += table[Velocity].dy
