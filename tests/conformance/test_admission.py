"""Admission and identity (spec: "Admission and identity")."""

import pytest

from archetype.commands import (
    CommandConflictError,
    DeferredItem,
    InvalidCommandError,
    NotDurableError,
    UnregisteredOperationError,
    WorldClosingError,
    WorldNotFoundError,
)
from archetype.commands.identity import command_digest
from archetype.world import CreateWorld, Despawn, DestroyWorld, Step, Update
from tests.component_modules.alpha import Health, Position
from tests.support.faults import AuthoritySeam, answer_lost
from tests.conformance.helpers import at, outbox


async def test_a_persisted_row_holds_everything_the_spec_lists(rt, world_id, authority):
    identity = await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=5), at(3, priority=2, max_attempts=4),
                                         command_id="cmd-1")  # fmt: skip
    row = await authority.command(world_id=world_id, command_id="cmd-1")
    assert row["command_id"] == "cmd-1" and row["schema_version"] == 1
    assert row["world_id"] == world_id and row["scheduled_tick"] == 3
    assert row["priority"] == 2 and row["sequence"] == identity.sequence == 1
    assert row["operation"] == "despawn"
    assert row["payload"] == '{"entity_id":5,"operation":"despawn","world_id":"w-conf"}'
    assert row["digest"] == identity.digest == command_digest(row)
    assert row["principal"] is None and row["origin"] == "local"
    assert row["max_attempts"] == 4 and row["attempts"] == 0
    assert row["reserved_entity_id"] is None and row["status"] == "PENDING"


async def test_generated_command_ids_are_unique(rt, world_id):
    a = await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=5), at(0))
    b = await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=5), at(0))
    assert a.command_id != b.command_id and b.sequence == a.sequence + 1


async def test_sequences_are_per_world_and_monotonic(rt, world_id):
    other = await rt.dispatcher.apply(CreateWorld(name="other", world_id="w-other"))
    seqs = [(await rt.dispatcher.defer(Despawn(world_id=w, entity_id=1), at(0))).sequence
            for w in (world_id, other, world_id, other, world_id)]  # fmt: skip
    assert seqs == [1, 1, 2, 2, 3]


async def test_identical_replay_returns_the_existing_identity_from_any_runtime(rt, make_runtime, world_id):
    op = Update(world_id=world_id, entity_id=1, components=[Health(hp=3)])
    first = await rt.dispatcher.defer(op, at(2), command_id="same")
    again = await make_runtime("runner-b").dispatcher.defer(op, at(2), command_id="same")
    assert again.replayed and not first.replayed
    assert (again.sequence, again.digest) == (first.sequence, first.digest)
    assert [e["event_type"] for e in await outbox(rt.authority, world_id)] == ["admitted"]


@pytest.mark.parametrize(
    "change",
    [
        dict(op=Despawn(world_id="w-conf", entity_id=2)),
        dict(options=at(3)),
        dict(options=at(2, priority=1)),
        dict(options=at(2, max_attempts=9)),
    ],
)
async def test_reusing_a_command_id_with_different_content_is_a_conflict(rt, world_id, change):
    base = dict(op=Despawn(world_id=world_id, entity_id=1), options=at(2))
    await rt.dispatcher.defer(base["op"], base["options"], command_id="k")
    changed = {**base, **change}
    with pytest.raises(CommandConflictError):
        await rt.dispatcher.defer(changed["op"], changed["options"], command_id="k")


async def test_a_conflict_survives_a_lost_answer_of_the_first_persistence(rt, world_id, authority):
    rt.scheduler.authority = answer_lost(authority, "admit")
    with pytest.raises(ConnectionResetError):
        await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0), command_id="k")
    rt.scheduler.authority = authority
    with pytest.raises(CommandConflictError):
        await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=2), at(0), command_id="k")
    assert (await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0), command_id="k")).replayed


async def test_a_batch_is_all_or_nothing(rt, world_id, authority):
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0), command_id="taken")
    batch = [
        DeferredItem(op=Despawn(world_id=world_id, entity_id=2), options=at(0), command_id="new-1"),
        DeferredItem(op=Despawn(world_id=world_id, entity_id=9), options=at(0), command_id="taken"),  # conflicts
    ]
    with pytest.raises(CommandConflictError):
        await rt.dispatcher.defer_batch(batch)
    assert await authority.command(world_id=world_id, command_id="new-1") is None
    assert len(await outbox(authority, world_id)) == 1


async def test_a_batch_admits_in_order_and_replays_whole(rt, world_id):
    batch = [DeferredItem(op=Despawn(world_id=world_id, entity_id=i), options=at(0), command_id=f"b{i}") for i in range(1, 6)]
    first = await rt.dispatcher.defer_batch(batch)
    assert [i.sequence for i in first] == [1, 2, 3, 4, 5]
    again = await rt.dispatcher.defer_batch(batch)
    assert all(i.replayed for i in again) and [i.sequence for i in again] == [1, 2, 3, 4, 5]


async def test_a_batch_cannot_span_worlds_or_be_empty_or_repeat_an_id(rt, world_id, authority):
    other = await rt.dispatcher.apply(CreateWorld(name="other", world_id="w-other"))
    with pytest.raises(InvalidCommandError, match="span"):
        await rt.dispatcher.defer_batch([
            DeferredItem(op=Despawn(world_id=world_id, entity_id=1), options=at(0)),
            DeferredItem(op=Despawn(world_id=other, entity_id=1), options=at(0)),
        ])  # fmt: skip
    with pytest.raises(InvalidCommandError):
        await rt.dispatcher.defer_batch([])
    with pytest.raises(InvalidCommandError, match="twice"):
        await rt.dispatcher.defer_batch([
            DeferredItem(op=Despawn(world_id=world_id, entity_id=1), options=at(0), command_id="x"),
            DeferredItem(op=Despawn(world_id=world_id, entity_id=2), options=at(0), command_id="x"),
        ])  # fmt: skip
    assert await outbox(authority, world_id) == []


async def test_unregistered_direct_only_and_invalid_commands_fail_before_the_catalog_is_touched(rt, world_id, authority):
    from typing import Literal

    from archetype.world.operations import Operation

    class Stranger(Operation):
        operation: Literal["stranger"] = "stranger"
        world_id: str

    counting = AuthoritySeam(authority)
    rt.scheduler.authority = counting
    bad = [
        (UnregisteredOperationError, Stranger(world_id=world_id), at(0), None),
        (NotDurableError, Step(world_id=world_id), at(0), None),
        (NotDurableError, DestroyWorld(world_id=world_id), at(0), None),
        (InvalidCommandError, Despawn(world_id=world_id, entity_id=1), at(0), "bad id with spaces"),
    ]
    for error, op, options, command_id in bad:
        with pytest.raises(error):
            await rt.dispatcher.defer(op, options, command_id=command_id)
    with pytest.raises(ValueError):
        await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), {"tick": True})
    assert counting.calls == []


async def test_admission_fails_closed_unless_the_world_is_active(rt, world_id):
    with pytest.raises(WorldNotFoundError):
        await rt.dispatcher.defer(Despawn(world_id="w-missing", entity_id=1), at(0))
    await rt.dispatcher.apply(DestroyWorld(world_id=world_id))
    with pytest.raises(WorldClosingError):
        await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0))


async def test_component_values_are_stored_by_name_and_fingerprint(rt, world_id, authority):
    await rt.dispatcher.defer(Update(world_id=world_id, entity_id=1, components=[Position(x=1, y=2)]), at(0), command_id="u")
    row = await authority.command(world_id=world_id, command_id="u")
    fingerprint = Position.component_fingerprint()
    assert row["payload"] == (
        '{"components":[{"data":{"x":1.0,"y":2.0},"fingerprint":"' + fingerprint + '","name":"Position"}],'
        '"entity_id":1,"operation":"update","world_id":"w-conf"}'
    )
