"""A game module for `archetype serve --module` that fails on purpose (docs/guide/failures.md):
its processor raises on every tick that has a Position in it (the world stalls), and its OnSpawn
hook raises `Permanent` for a ship flying backwards (the command dead-letters at once)."""

from archetype import Permanent
from archetype.runtime import Runtime
from archetype.world.world import OnSpawn
from tests.component_modules.alpha import Position, Velocity


def _overheat(world, tick, entity_id, components) -> None:
    raise RuntimeError(f"the reactor overheated at entity {entity_id}")


def _refuse_reverse(world, event) -> None:
    velocity = world.get(event.entity_id).get(Velocity)
    if velocity is not None and velocity.dx < 0:
        raise Permanent("ships do not fly backwards")


def _equip(world) -> None:
    world.add_processor(_overheat, Position)
    world.add_hook(OnSpawn, _refuse_reverse)


def setup(runtime: Runtime) -> None:
    runtime.worlds.on_load.append(_equip)
