"""A game module for `archetype serve --module` whose processor is broken while the file named by
$ARCHETYPE_TEST_BROKEN exists: the world stalls, and deleting the file is deploying the fix."""

import os
from pathlib import Path

from archetype.runtime import Runtime
from tests.component_modules.alpha import Position


def _overheat(world, tick, entity_id, components) -> None:
    if Path(os.environ["ARCHETYPE_TEST_BROKEN"]).exists():
        raise RuntimeError(f"the reactor overheated at entity {entity_id}")


def setup(runtime: Runtime) -> None:
    runtime.worlds.on_load.append(lambda world: world.add_processor(_overheat, Position))
