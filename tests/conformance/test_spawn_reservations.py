"""Durable spawn reservations (DESIGN decision 3; spec: SpawnReserved)."""

import pytest

from archetype.commands import ActorCtx, CommandConflictError, ReservationNotOwnedError, Role
from archetype.world import ReserveEntityIds, Spawn, SpawnReserved
from tests.component_modules.alpha import Health, Position
from tests.conformance.authorities import LEDGERS
from tests.conformance.helpers import at, records, step

AUTHORITIES = LEDGERS  # its reason: docs/testing.md, "Which authorities"

PLAYER = ActorCtx(principal="pat", roles={Role.player})
MALLORY = ActorCtx(principal="mallory", roles={Role.player})


def ship(world_id, hp=1):
    return Spawn.from_components(world_id=world_id, components=[Health(hp=hp)])


async def test_defer_spawn_reserves_one_id_and_admits_spawn_reserved(rt, world_id, authority):
    admission = await rt.dispatcher.defer_spawn_as(PLAYER, ship(world_id), at(0), command_id="s1")
    row = await authority.command(world_id, "s1", scope="pat")
    assert row["operation"] == "spawn_reserved" and row["reserved_entity_id"] == admission.entity_id
    assert row["principal"] == "pat"
    assert await step(rt, world_id) == 1
    world = await rt.worlds.get(world_id)
    assert world.get(admission.entity_id)[Health].hp == 1


async def test_a_retry_from_another_runtime_reuses_the_reservation(rt, make_runtime, world_id, authority):
    first = await rt.dispatcher.defer_spawn_as(PLAYER, ship(world_id), at(0), command_id="s1")
    before = (await authority.world_info(world_id=world_id))["next_entity_id"]
    again = await make_runtime("runner-b").dispatcher.defer_spawn_as(PLAYER, ship(world_id), at(0), command_id="s1")
    assert again.entity_id == first.entity_id and again.command.replayed
    assert (await authority.world_info(world_id=world_id))["next_entity_id"] == before


@pytest.mark.parametrize("change", ["components", "options"])
async def test_a_conflicting_retry_fails_and_allocates_nothing(rt, world_id, authority, change):
    await rt.dispatcher.defer_spawn_as(PLAYER, ship(world_id), at(0), command_id="s1")
    before = await authority.world_info(world_id=world_id)
    op, options = (ship(world_id, hp=2), at(0)) if change == "components" else (ship(world_id), at(1))
    with pytest.raises(CommandConflictError):
        await rt.dispatcher.defer_spawn_as(PLAYER, op, options, command_id="s1")
    assert await authority.world_info(world_id=world_id) == before


async def test_another_principals_identical_key_is_its_own_spawn(rt, world_id):
    mine = await rt.dispatcher.defer_spawn_as(PLAYER, ship(world_id), at(0), command_id="s1")
    theirs = await rt.dispatcher.defer_spawn_as(MALLORY, ship(world_id, hp=2), at(0), command_id="s1")
    assert theirs.entity_id != mine.entity_id and not theirs.command.replayed


async def test_a_reserved_command_id_admits_nothing_else_after_a_lost_admission(rt, world_id, authority):
    from archetype.world import Despawn

    request = rt.scheduler.spawn_request_digest(ship(world_id), at(0), "pat")
    await authority.reserve_spawn(world_id, "s1", "pat", request, 0)  # ... and the admission's answer never came
    with pytest.raises(CommandConflictError):
        await rt.dispatcher.defer_as(PLAYER, Despawn(world_id=world_id, entity_id=1), at(0), command_id="s1")
    assert await authority.command(world_id, "s1", scope="pat") is None
    retried = await rt.dispatcher.defer_spawn_as(PLAYER, ship(world_id), at(0), command_id="s1")
    assert not retried.command.replayed and await step(rt, world_id) == 1


async def test_a_spawn_reservation_cannot_take_an_existing_command_id(rt, world_id):
    from archetype.world import Despawn

    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0), command_id="taken")
    with pytest.raises(CommandConflictError):
        await rt.dispatcher.defer_spawn(ship(world_id), at(0), command_id="taken")


async def test_trusted_spawn_reserved_needs_a_reservation_it_owns(rt, world_id, authority):
    forged = SpawnReserved(world_id=world_id, entity_id=77, components=[Health(hp=1)])
    with pytest.raises(ReservationNotOwnedError):
        await rt.dispatcher.defer(forged, at(0), command_id="forged")
    assert await authority.command(world_id=world_id, command_id="forged") is None

    other = await rt.dispatcher.defer_spawn(ship(world_id), at(0), command_id="owner")
    stolen = SpawnReserved(world_id=world_id, entity_id=other.entity_id, components=[Health(hp=1)])
    with pytest.raises((ReservationNotOwnedError, CommandConflictError)):
        await rt.dispatcher.defer(stolen, at(0), command_id="thief")

    actors = await rt.dispatcher.defer_spawn_as(PLAYER, ship(world_id), at(0), command_id="players")
    on_actors = SpawnReserved(world_id=world_id, entity_id=actors.entity_id, components=[Health(hp=1)])
    with pytest.raises(ReservationNotOwnedError):  # the same command id, but the reservation is pat's
        await rt.dispatcher.defer(on_actors, at(0), command_id="players")

    request = rt.scheduler.spawn_request_digest(ship(world_id), at(0), None)
    entity = await authority.reserve_spawn(world_id, "mine", None, request, 0)
    with pytest.raises(CommandConflictError):  # its own reservation, for another request
        await rt.dispatcher.defer(SpawnReserved(world_id=world_id, entity_id=entity, components=[Health(hp=2)]),
                                  at(0), command_id="mine")  # fmt: skip
    owned = SpawnReserved(world_id=world_id, entity_id=entity, components=[Health(hp=1)])
    identity = await rt.dispatcher.defer(owned, at(0), command_id="mine")
    assert not identity.replayed


async def test_a_restarted_world_never_hands_out_a_reserved_id_again(rt, make_runtime, world_id):
    reserved = await rt.dispatcher.defer_spawn(ship(world_id), at(5), command_id="later")
    ids = await rt.dispatcher.apply(ReserveEntityIds(world_id=world_id, count=3))
    restarted = make_runtime("runner-b")
    spawned = await restarted.dispatcher.apply(Spawn(world_id=world_id, components=[Position(x=0, y=0)]))
    assert spawned not in {reserved.entity_id, *ids}
    for _ in range(6):
        await step(restarted, world_id)
    assert (await records(restarted, world_id))["later"].status == "APPLIED"
    world = await restarted.worlds.get(world_id)
    assert world.exists(reserved.entity_id) and world.exists(spawned)


async def test_a_spawn_over_quota_reserves_nothing(make_runtime, world_id, authority):
    from archetype.commands import QuotaExceededError

    limited = make_runtime("gateway")
    limited.scheduler.quota = 1
    await limited.dispatcher.defer_spawn_as(PLAYER, ship(world_id), at(0), command_id="first")
    before = await authority.world_info(world_id=world_id)
    with pytest.raises(QuotaExceededError):
        await limited.dispatcher.defer_spawn_as(PLAYER, ship(world_id, hp=2), at(0), command_id="second")
    assert await authority.world_info(world_id=world_id) == before
    assert (await limited.dispatcher.defer_spawn_as(PLAYER, ship(world_id, hp=2), at(1), command_id="second")).entity_id
