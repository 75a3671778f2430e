"""A game module for `archetype serve --module` whose processor raises on every tick that has a
Position in it (the failing processor of docs/guide/failures.md)."""

from archetype.runtime import Runtime
from tests.component_modules.alpha import Position


def _overheat(world, tick, entity_id, components) -> None:
    raise RuntimeError(f"the reactor overheated at entity {entity_id}")


def setup(runtime: Runtime) -> None:
    runtime.worlds.on_load.append(lambda world: world.add_processor(_overheat, Position))
