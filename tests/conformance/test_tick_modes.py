"""Tick modes, recorded per world at its creation (docs/ledger.md, *Tick modes*): a lockstep world
publishes every tick in order, none skipped, and its clock anchor follows its head; a realtime
world's is test_idle_ticks.py's. Every rule here is the ledger's, so it is proven on each ledger."""

import pytest

from archetype.commands import InvalidCommandError, WorldExistsError, WorldNotFoundError
from archetype.world import CreateWorld, Spawn
from tests.component_modules.alpha import Health
from tests.conformance.authorities import LEDGERS
from tests.conformance.helpers import at, manifests, records, step

AUTHORITIES = LEDGERS  # its reason: docs/testing.md, "Which authorities"

EMPTY = {"snapshot": False, "chunks": []}


def manifest(world, tick: int, token: str) -> dict:
    return {"world_id": world.world_id, "tick": tick, "writer_epoch": world.writer_epoch, "settlements": [],
            "written_runs": [], "commit_token": token}  # fmt: skip


async def test_a_world_records_its_tick_mode_and_interval_at_creation(rt, authority):
    await rt.dispatcher.apply(CreateWorld(name="sim", world_id="sim"))
    await rt.dispatcher.apply(CreateWorld(name="game", world_id="game", tick_mode="realtime", tick_interval_ms=50))
    await rt.dispatcher.apply(CreateWorld(name="batch", world_id="batch", tick_interval_ms=0))
    settings = {w["world_id"]: (w["tick_mode"], w["tick_interval_ms"], w["tick_lag_ms"]) for w in await authority.list_worlds()}
    assert settings == {"sim": ("lockstep", 100, 0), "game": ("realtime", 50, 0), "batch": ("lockstep", 0, 0)}
    # the same creation again is a replay; the same id with other tick settings is another world
    again = await authority.create_world("game", "game", "realtime", 50)
    assert (again["tick_mode"], again["tick_interval_ms"]) == ("realtime", 50)
    for mode, interval in (("lockstep", 50), ("realtime", 60)):
        with pytest.raises(WorldExistsError):
            await authority.create_world("game", "game", mode, interval)
    assert (await authority.world_info("game"))["tick_interval_ms"] == 50


@pytest.mark.parametrize(("mode", "interval"), [
    ("sometimes", 100), ("LOCKSTEP", 100), ("", 100), ("realtime", 0), ("lockstep", -1), ("realtime", -5),
    ("lockstep", 86_400_001), ("realtime", 86_400_001),
])  # fmt: skip
async def test_bad_tick_settings_are_refused_and_create_nothing(authority, mode, interval):
    with pytest.raises(InvalidCommandError):
        await authority.create_world("bad", "bad", mode, interval)
    with pytest.raises(WorldNotFoundError):
        await authority.world_info("bad")


async def test_a_lockstep_world_runs_every_tick_in_order(rt, world_id, authority):
    await rt.dispatcher.defer(Spawn(world_id=world_id, components=[Health(hp=1)]), at(3), command_id="at-3")
    await rt.dispatcher.defer(Spawn(world_id=world_id, components=[Health(hp=2)]), at(1), command_id="at-1")
    assert (await rt.worlds.step(world_id, 7)).tick == 0  # a later tick asked for: still the next one
    for _ in range(3):
        await step(rt, world_id)
    assert [m["tick"] for m in await manifests(authority, world_id)] == [0, 1, 2, 3]
    done = await records(rt, world_id)
    assert (done["at-1"].applied_tick, done["at-3"].applied_tick) == (1, 3)  # each in the tick it named


async def test_a_lockstep_world_refuses_a_tick_that_skips_and_nothing_changes(rt, world_id, authority):
    await step(rt, world_id)
    world = await rt.worlds.get(world_id)
    before = await authority.world_info(world_id)
    with pytest.raises(InvalidCommandError, match="lockstep"):
        await authority.publish(world_id, rt.scheduler.owner, rt.scheduler.session(world_id),
                                manifest(world, 2, "skips-tick-1"), EMPTY)  # fmt: skip
    assert await authority.world_info(world_id) == before
    assert [m["tick"] for m in await manifests(authority, world_id)] == [0]


async def test_a_lockstep_world_s_clock_anchor_follows_its_head(rt, world_id, authority, clock):
    """The tick head, when it was due (the host's `due_ms`; none: now; never after it published)
    and how late it published: what every host reads its next due time from."""
    created = (await authority.world_info(world_id))["created_at"]
    assert [(await authority.world_info(world_id))[k] for k in ("clock_tick", "clock_ms", "tick_lag_ms")] == [-1, created, 0]
    world = await rt.worlds.get(world_id)
    owner, session = rt.scheduler.owner, rt.scheduler.session(world_id)
    anchors = []
    for tick, due in ((0, clock.now_ms() - 30), (1, None), (2, clock.now_ms() + 500)):
        clock.advance(100)
        await authority.publish(world_id, owner, session, manifest(world, tick, f"t{tick}"), EMPTY, due_ms=due)
        info = await authority.world_info(world_id)
        anchors.append((info["tick_head"], info["clock_tick"], info["clock_ms"] - created, info["tick_lag_ms"]))
    assert anchors == [(0, 0, -30, 130), (1, 1, 200, 0), (2, 2, 300, 0)]
