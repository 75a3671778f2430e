"""A simulation module for `archetype serve --module` (tests/crash/test_lockstep_restarts.py): one
counter a processor moves on every tick, as slowly as its `Work` says, and markers to schedule."""

from __future__ import annotations

import time
from typing import Any

from archetype.world import AsyncWorld, Component


class Count(Component):
    n: int


class Work(Component):
    ms: int  # how long the processor takes on this entity each tick: a slow processor


class Marker(Component):
    label: int


def count(world: AsyncWorld, tick: int, entity_id: int, components: tuple[Count, Work]) -> None:
    counter, work = components
    if work.ms:
        time.sleep(work.ms / 1000)
    world.update(entity_id, [Count(n=counter.n + 1)])


def setup(runtime: Any) -> None:
    runtime.worlds.on_load.append(lambda world: world.add_processor(count, Count, Work))
