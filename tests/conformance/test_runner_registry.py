"""The runner registry: which runners split the worlds, and who may run under a runner id
(docs/ledger.md, *The runner registry*); and the due-time index runners read beside it
(`pending_worlds`). Each ledger, the workerd engine included; the HTTP runner protocol's own bounds are
tests/api/test_least_privilege.py's."""

import pytest

from archetype.commands import InvalidCommandError, RunnerIdHeldError
from archetype.world import Spawn
from tests.component_modules.alpha import Health
from tests.conformance.authorities import LEDGERS
from tests.conformance.helpers import at

AUTHORITIES = LEDGERS  # its reason: docs/testing.md, "Which authorities"

LEASE = 5_000


async def test_a_registration_is_live_until_it_expires(authority, clock):
    row = await authority.register_runner("runner-a", "host-1", LEASE)
    assert row == {"runner_id": "runner-a", "instance": "host-1", "registered_at": clock.now_ms(),
                   "expires_at": clock.now_ms() + LEASE}  # fmt: skip
    assert await authority.live_runners() == [row]
    clock.advance(LEASE - 1)
    assert await authority.live_runners() == [row]
    clock.advance(1)  # an expiry equal to now has expired
    assert await authority.live_runners() == []


async def test_live_runners_are_in_runner_id_order(authority, clock):
    for runner_id in ("runner-c", "runner-a", "runner-b"):
        await authority.register_runner(runner_id, f"host-{runner_id}", LEASE)
        clock.advance(1)
    assert [r["runner_id"] for r in await authority.live_runners()] == ["runner-a", "runner-b", "runner-c"]


async def test_another_instance_is_refused_while_the_registration_lives(authority, clock):
    row = await authority.register_runner("runner-a", "host-1", LEASE)
    clock.advance(LEASE - 1)
    with pytest.raises(RunnerIdHeldError):
        await authority.register_runner("runner-a", "host-2", LEASE)
    with pytest.raises(RunnerIdHeldError):
        await authority.leave_runner("runner-a", "host-2")
    assert await authority.live_runners() == [row]  # refused: nothing changed


async def test_the_same_instance_gets_its_id_back_at_once_and_keeps_its_registration_time(authority, clock):
    row = await authority.register_runner("runner-a", "host-1", LEASE)
    clock.advance(100)
    resumed = await authority.register_runner("runner-a", "host-1", LEASE)  # a heartbeat, or a restart
    assert resumed == {**row, "expires_at": clock.now_ms() + LEASE}
    clock.advance(LEASE * 3)  # expired meanwhile: nobody took it, it is resumed just the same
    assert (await authority.register_runner("runner-a", "host-1", LEASE))["registered_at"] == row["registered_at"]


async def test_an_expired_registration_is_taken_by_another_instance_anew(authority, clock):
    await authority.register_runner("runner-a", "host-1", LEASE)
    clock.advance(LEASE)
    taken = await authority.register_runner("runner-a", "host-2", LEASE)
    assert taken == {"runner_id": "runner-a", "instance": "host-2", "registered_at": clock.now_ms(),
                     "expires_at": clock.now_ms() + LEASE}  # fmt: skip
    with pytest.raises(RunnerIdHeldError):  # the first instance is the other one now
        await authority.register_runner("runner-a", "host-1", LEASE)


async def test_leaving_ends_the_registration_at_once(authority, clock):
    await authority.register_runner("runner-a", "host-1", LEASE)
    await authority.register_runner("runner-b", "host-2", LEASE)
    clock.advance(10)
    left = await authority.leave_runner("runner-a", "host-1")
    assert left is not None and left["expires_at"] == clock.now_ms()
    assert [r["runner_id"] for r in await authority.live_runners()] == ["runner-b"]
    assert await authority.leave_runner("runner-a", "host-1") == left  # already gone: unchanged
    assert await authority.leave_runner("runner-z", "host-1") is None  # never registered
    assert (await authority.register_runner("runner-a", "host-3", LEASE))["instance"] == "host-3"  # free at once


@pytest.mark.parametrize(("runner_id", "instance", "lease_ms"), [
    ("", "host-1", LEASE), ("-leading-dash", "host-1", LEASE), ("a" * 129, "host-1", LEASE), ("has space", "h", LEASE),
    ("runner-a", "", LEASE), ("runner-a", "h" * 257, LEASE), ("runner-a", "host-1", 0), ("runner-a", "host-1", 86_400_001),
    ("runner-a", "host-1", 60_001),  # a minute at most: a runner proves it lives by renewing, not by a long registration
    ("runner-a", "host\u202e1", LEASE), ("runner-a", "host\n1", LEASE),  # an instance is printable text
])  # fmt: skip
async def test_bad_registrations_are_refused_and_change_nothing(authority, runner_id, instance, lease_ms):
    with pytest.raises(InvalidCommandError):
        await authority.register_runner(runner_id, instance, lease_ms)
    assert await authority.live_runners() == []


async def test_pending_worlds_are_the_worlds_with_an_open_command(rt, world_id, authority, clock):
    assert await authority.pending_worlds() == []  # idle: not read, not listed
    await rt.dispatcher.defer(Spawn(world_id=world_id, components=[Health(hp=1)]), at(7), command_id="later")
    await rt.dispatcher.defer(Spawn(world_id=world_id, components=[Health(hp=1)]), at(4), command_id="sooner")
    claimed = await authority.claim_world(world_id, "runner-a", LEASE)
    info = await authority.world_info(world_id)
    assert await authority.pending_worlds() == [{
        "world_id": world_id, "status": "ACTIVE", "tick_head": info["tick_head"], "next_tick": 4,
        "clock_tick": info["clock_tick"], "clock_ms": info["clock_ms"], "tick_mode": "lockstep", "tick_interval_ms": 100,
        "tick_lag_ms": 0, "host_owner": "runner-a", "host_expires_at": claimed["host_expires_at"],
    }]  # fmt: skip


async def test_hosted_worlds_are_the_worlds_a_lease_names(rt, world_id, authority, clock):
    from archetype.world import CreateWorld

    other = await rt.dispatcher.apply(CreateWorld(name="other", world_id="w-other"))
    assert await authority.hosted_worlds("runner-a") == []  # never claimed: nobody's
    held = await authority.claim_world(world_id, "runner-a", LEASE)
    await authority.claim_world(other, "runner-b", LEASE)
    assert await authority.hosted_worlds("runner-a") == [held]
    released = await authority.release_world(world_id, "runner-a", held["writer_epoch"])
    assert await authority.hosted_worlds("runner-a") == [released]  # released: its owner is kept
    clock.advance(LEASE)
    taken = await authority.claim_world(world_id, "runner-b", LEASE)
    assert await authority.hosted_worlds("runner-a") == []
    assert [w["world_id"] for w in await authority.hosted_worlds("runner-b")] == sorted([world_id, other])
    assert taken in await authority.hosted_worlds("runner-b")
