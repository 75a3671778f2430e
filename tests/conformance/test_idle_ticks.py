"""Realtime worlds: empty ticks are coalesced, never run or published (docs/ledger.md, *Idle worlds*
and *Tick modes*). Lockstep worlds, which never skip a tick, are test_tick_modes.py's."""

import pytest

from archetype.commands import StaleWriterError
from archetype.world import CreateWorld, Spawn
from tests.component_modules.alpha import Health
from tests.conformance.authorities import LEDGERS
from tests.conformance.helpers import at, records, step

AUTHORITIES = LEDGERS  # its reason: docs/testing.md, "Which authorities"


@pytest.fixture
async def world_id(rt) -> str:
    return await rt.dispatcher.apply(CreateWorld(name="game", world_id="w-realtime", tick_mode="realtime"))


async def test_a_step_to_a_later_tick_coalesces_the_empty_ticks_between(rt, world_id, authority):
    await rt.dispatcher.defer(Spawn(world_id=world_id, components=[Health(hp=1)]), at(5), command_id="late")
    assert await step(rt, world_id) == 0  # tick 0: the command is not due yet
    receipt = await rt.worlds.step(world_id, 7)
    assert (receipt.tick, receipt.commands_applied) == (7, 1)  # due at 5, run at the tick the world woke at
    assert [m["tick"] for m in await authority.manifests(world_id=world_id)] == [0, 7]
    assert (await authority.world_info(world_id=world_id))["tick_head"] == 7
    assert (await records(rt, world_id))["late"].applied_tick == 7
    assert await step(rt, world_id) == 0
    assert [m["tick"] for m in await authority.manifests(world_id=world_id)] == [0, 7, 8]


async def test_a_tick_at_or_before_the_tick_head_is_refused(rt, world_id, authority):
    await rt.worlds.step(world_id, 3)
    world = await rt.worlds.get(world_id)
    manifest = {"world_id": world_id, "tick": 3, "writer_epoch": world.writer_epoch, "settlements": [],
                "written_runs": [], "commit_token": "another-tick-3"}
    with pytest.raises(StaleWriterError):
        await authority.publish(world_id, rt.scheduler.owner, rt.scheduler.session(world_id), manifest,
                                {"snapshot": False, "chunks": []})
    assert (await authority.world_info(world_id=world_id))["tick_head"] == 3


async def test_an_earlier_tick_than_the_next_is_not_a_step_backwards(rt, world_id):
    await rt.worlds.step(world_id, 4)
    assert (await rt.worlds.step(world_id, 2)).tick == 5  # the next tick: a world's clock never goes back


async def test_a_world_s_tick_clock_is_anchored_at_its_creation_and_stepping_never_moves_it(rt, world_id, authority, clock):
    """Every host of a world reads its clock from this anchor (archetype.commands.clock), so a
    restarted runner or an evicted Durable Object goes on with the same clock. A due time sent with
    a realtime tick is not an anchor: it changes nothing."""
    info = await authority.world_info(world_id=world_id)
    assert (info["clock_tick"], info["clock_ms"], info["tick_lag_ms"]) == (-1, info["created_at"], 0)
    await rt.worlds.step(world_id, 7)
    clock.advance(250)
    world = await rt.worlds.get(world_id)
    manifest = {"world_id": world_id, "tick": 9, "writer_epoch": world.writer_epoch, "settlements": [],
                "written_runs": [], "commit_token": "tick-9"}
    await authority.publish(world_id, rt.scheduler.owner, rt.scheduler.session(world_id), manifest,
                            {"snapshot": False, "chunks": []}, due_ms=clock.now_ms() - 100)
    moved = await authority.world_info(world_id=world_id)
    assert moved["tick_head"] == 9
    assert (moved["clock_tick"], moved["clock_ms"], moved["tick_lag_ms"]) == (-1, info["created_at"], 0)
