"""A stalled world's recovery is logged at the level its stall was: visible at the default log level
(warning) of `archetype serve`, as docs/guide/failures.md and docs/ledger.md ("World health")
promise: one line when the stall starts, one when the world recovers."""

import logging

import pytest

from archetype import Runtime
from archetype.world import Component, CreateWorld, Spawn, Step


class Reactor(Component):
    heat: int


async def test_the_recovery_line_shows_at_the_default_level(tmp_path, caplog):
    caplog.set_level(logging.WARNING)  # serve's default --log-level
    rt = await Runtime.open_local(tmp_path, audit=None)
    world_id = await rt.dispatcher.apply(CreateWorld(name="plant", world_id="plant"))
    world = await rt.worlds.get(world_id)
    broken = [True]

    def overheat(w, tick, entity_id, components):
        if broken[0]:
            raise RuntimeError("the reactor overheated")

    world.add_processor(overheat, Reactor)
    await rt.dispatcher.apply(Spawn(world_id=world_id, components=[Reactor(heat=1)]))
    for _ in range(2):
        with pytest.raises(RuntimeError):
            await rt.worlds.step(world_id)
    broken[0] = False
    await rt.dispatcher.apply(Step(world_id=world_id))
    await rt.close()
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "archetype.worlds"]
    assert [level for level, _ in lines] == ["ERROR", "WARNING"], lines
    assert lines[1][1] == "world plant: recovered: tick 0 published after 2 failed attempts"
