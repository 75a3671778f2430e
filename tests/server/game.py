"""A game module for `archetype serve --module`: its components, and a processor added by `setup`."""

from archetype.runtime import Runtime
from tests.component_modules.alpha import Position, Velocity


def _move(world, tick, entity_id, components) -> None:
    position, velocity = components
    world.update(entity_id, [Position(x=position.x + velocity.dx, y=position.y + velocity.dy)])


def setup(runtime: Runtime) -> None:
    runtime.worlds.on_load.append(lambda world: world.add_processor(_move, Position, Velocity))
