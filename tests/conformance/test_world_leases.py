"""World leases: who hosts a world, and when the host may change (docs/ledger.md, *World leases*;
DESIGN decision 8). Rung 1 and 2 of the ladder: each ledger, the workerd engine included."""

import pytest

from archetype.commands import InvalidCommandError, StaleWriterError, WorldLeaseHeldError
from archetype.world import Spawn
from tests.component_modules.alpha import Health
from tests.conformance.authorities import LEDGERS
from tests.conformance.helpers import at, records, step

AUTHORITIES = LEDGERS  # its reason: docs/testing.md, "Which authorities"

LEASE = 5_000


async def test_a_first_claim_takes_the_world_and_bumps_the_epoch(world_id, authority, clock):
    before = await authority.world_info(world_id)
    claimed = await authority.claim_world(world_id, "runner-a", LEASE)
    assert claimed["writer_epoch"] == before["writer_epoch"] + 1
    assert (claimed["host_owner"], claimed["host_expires_at"]) == ("runner-a", clock.now_ms() + LEASE)
    assert await authority.world_info(world_id) == claimed


async def test_another_runner_cannot_claim_an_unexpired_lease(world_id, authority, clock):
    claimed = await authority.claim_world(world_id, "runner-a", LEASE)
    clock.advance(LEASE - 1)
    with pytest.raises(WorldLeaseHeldError):
        await authority.claim_world(world_id, "runner-b", LEASE)
    assert await authority.world_info(world_id) == claimed  # refused: nothing changed


async def test_the_owner_resumes_its_own_lease_without_moving_the_epoch(world_id, authority, clock):
    claimed = await authority.claim_world(world_id, "runner-a", LEASE)
    clock.advance(10)
    resumed = await authority.claim_world(world_id, "runner-a", LEASE)  # a restarted runner, same id
    assert resumed["writer_epoch"] == claimed["writer_epoch"]
    assert resumed["host_expires_at"] == clock.now_ms() + LEASE
    clock.advance(LEASE * 3)  # expired, but nobody took it meanwhile
    assert (await authority.claim_world(world_id, "runner-a", LEASE))["writer_epoch"] == claimed["writer_epoch"]


async def test_renewal_extends_the_lease_and_is_fenced(world_id, authority, clock):
    claimed = await authority.claim_world(world_id, "runner-a", LEASE)
    clock.advance(LEASE - 1)
    renewed = await authority.renew_world(world_id, "runner-a", claimed["writer_epoch"], LEASE)
    assert renewed["host_expires_at"] == clock.now_ms() + LEASE and renewed["writer_epoch"] == claimed["writer_epoch"]
    clock.advance(LEASE - 1)
    with pytest.raises(WorldLeaseHeldError):  # the heartbeat kept it
        await authority.claim_world(world_id, "runner-b", LEASE)
    with pytest.raises(StaleWriterError):  # not the host
        await authority.renew_world(world_id, "runner-b", claimed["writer_epoch"], LEASE)
    with pytest.raises(StaleWriterError):  # not the epoch
        await authority.renew_world(world_id, "runner-a", claimed["writer_epoch"] - 1, LEASE)
    with pytest.raises(InvalidCommandError):
        await authority.renew_world(world_id, "runner-a", claimed["writer_epoch"], 0)
    assert (await authority.world_info(world_id))["host_expires_at"] == renewed["host_expires_at"]


async def test_an_expired_lease_is_taken_over_and_fences_the_old_host(world_id, authority, clock):
    old = await authority.claim_world(world_id, "runner-a", LEASE)
    clock.advance(LEASE)  # an expiry equal to now has expired
    new = await authority.claim_world(world_id, "runner-b", LEASE)
    assert new["writer_epoch"] == old["writer_epoch"] + 1 and new["host_owner"] == "runner-b"
    with pytest.raises(StaleWriterError):
        await authority.renew_world(world_id, "runner-a", old["writer_epoch"], LEASE)
    with pytest.raises(StaleWriterError):
        await authority.release_world(world_id, "runner-a", old["writer_epoch"])
    with pytest.raises(StaleWriterError):
        await authority.lease(world_id, "runner-a", "s-a", old["writer_epoch"], 0, 10, 1_000)
    assert await authority.world_info(world_id) == new


async def test_a_released_lease_is_free_at_once_and_its_owner_takes_it_back_quietly(world_id, authority, clock):
    claimed = await authority.claim_world(world_id, "runner-a", LEASE)
    released = await authority.release_world(world_id, "runner-a", claimed["writer_epoch"])
    assert released["host_expires_at"] == clock.now_ms() and released["writer_epoch"] == claimed["writer_epoch"]
    again = await authority.claim_world(world_id, "runner-a", LEASE)
    assert again["writer_epoch"] == claimed["writer_epoch"]
    await authority.release_world(world_id, "runner-a", again["writer_epoch"])
    handed = await authority.claim_world(world_id, "runner-b", LEASE)  # a handover: no waiting for expiry
    assert handed["writer_epoch"] == claimed["writer_epoch"] + 1 and handed["host_owner"] == "runner-b"


async def test_acquire_writer_forces_the_writer_and_frees_the_lease(world_id, authority):
    claimed = await authority.claim_world(world_id, "runner-a", LEASE)
    forced = await authority.acquire_writer(world_id)
    assert forced["writer_epoch"] == claimed["writer_epoch"] + 1
    assert (forced["host_owner"], forced["host_expires_at"]) == (None, None)
    with pytest.raises(StaleWriterError):
        await authority.renew_world(world_id, "runner-a", claimed["writer_epoch"], LEASE)
    assert (await authority.claim_world(world_id, "runner-b", LEASE))["writer_epoch"] == forced["writer_epoch"] + 1


async def test_a_takeover_ends_the_old_hosts_command_leases_at_once(make_runtime, world_id, authority, clock):
    a = make_runtime("runner-a", world_lease_ms=LEASE, lease_ms=60_000)
    await a.dispatcher.defer(Spawn(world_id=world_id, components=[Health(hp=1)]), at(0), command_id="s")
    world = await a.worlds.get(world_id)
    await a.scheduler.materialize(world, 0)  # leased for a minute; then runner-a dies
    assert (await records(a, world_id))["s"].status == "LEASED"
    clock.advance(LEASE)
    b = make_runtime("runner-b", world_lease_ms=LEASE, lease_ms=60_000)
    assert await step(b, world_id) == 1  # no waiting out runner-a's minute: its epoch is fenced
    assert (await records(b, world_id))["s"].status == "APPLIED"
    assert (await authority.world_info(world_id))["host_owner"] == "runner-b"


async def test_a_leased_host_is_refused_a_world_another_host_holds(make_runtime, world_id):
    a = make_runtime("runner-a", world_lease_ms=LEASE)
    b = make_runtime("runner-b", world_lease_ms=LEASE)
    await a.dispatcher.defer(Spawn(world_id=world_id, components=[Health(hp=1)]), at(0), command_id="s")
    assert await step(a, world_id) == 1
    with pytest.raises(WorldLeaseHeldError):
        await b.worlds.get(world_id)
    assert b.worlds.loaded == [] and await step(a, world_id) == 0  # runner-a was not fenced


async def test_a_closed_world_cannot_be_claimed(rt, world_id, authority):
    from archetype.commands import WorldClosingError
    from archetype.world import DestroyWorld

    await rt.dispatcher.apply(DestroyWorld(world_id=world_id))
    with pytest.raises(WorldClosingError):
        await authority.claim_world(world_id, "runner-a", LEASE)


@pytest.mark.parametrize("lease_ms", [0, 60_001, 86_400_000])
async def test_a_world_lease_lasts_a_minute_at_most(world_id, authority, lease_ms):
    """A host proves it lives by renewing its lease, so a claim or renewal beyond a minute is
    refused and changes nothing (docs/ledger.md, *World leases*)."""
    before = await authority.world_info(world_id)
    with pytest.raises(InvalidCommandError):
        await authority.claim_world(world_id, "runner-a", lease_ms)
    assert await authority.world_info(world_id) == before
    claimed = await authority.claim_world(world_id, "runner-a", 60_000)
    with pytest.raises(InvalidCommandError):
        await authority.renew_world(world_id, "runner-a", claimed["writer_epoch"], lease_ms)
    assert await authority.world_info(world_id) == claimed
