"""A game module for `archetype serve --module` whose processor holds the stepping process's event
loop for `BLOCK_S` seconds, once (a long tick, not a hang: tests/server/test_stepper.py)."""

import time

from archetype.runtime import Runtime
from tests.component_modules.alpha import Position

LONG_TICK_HANG_S = 5.0  # the serve's --hang-timeout in that test
BLOCK_S = LONG_TICK_HANG_S + 3.0  # held well past it
_blocked = False


def _think_hard(world, tick, entity_id, components) -> None:
    global _blocked
    if not _blocked:
        _blocked = True
        time.sleep(BLOCK_S)  # synchronous: nothing else on the loop runs meanwhile


def setup(runtime: Runtime) -> None:
    runtime.worlds.on_load.append(lambda world: world.add_processor(_think_hard, Position))
