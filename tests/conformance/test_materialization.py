"""Materialization, settlement and the failure policy (spec: "Materialization and settlement", "Failure policy")."""

import pytest

from archetype.commands import CommandStatus
from archetype.world import Despawn, Spawn, TickOutcomeUnknownError
from archetype.world.world import PreTick
from tests.component_modules.alpha import Health, Position, Velocity
from tests.conformance.authorities import LEDGERS
from tests.conformance.helpers import at, fail_next, labels, outbox, probe, records, settled, statuses, step
from tests.support.faults import AuthoritySeam, answer_lost

AUTHORITIES = LEDGERS  # its reason: docs/testing.md, "Which authorities"


async def test_a_due_spawn_introduces_its_signature_in_its_own_tick(rt, world_id):
    seen = []
    world = await rt.worlds.get(world_id)
    world.add_hook(PreTick, lambda w, e: seen.append(("pre", e.tick, len(w.query(Position, Velocity)))))
    world.add_processor(lambda w, tick, eid, comps: seen.append(("process", tick, eid)), Position, Velocity)
    admission = await rt.dispatcher.defer_spawn(
        Spawn(world_id=world_id, components=[Position(x=0, y=0), Velocity(dx=1, dy=1)]), at(0)
    )
    await step(rt, world_id)
    assert seen == [("pre", 0, 1), ("process", 0, admission.entity_id)]


async def test_materializers_get_the_same_world_with_its_lock_held(rt, world_id):
    world = await rt.worlds.get(world_id)
    original = rt.registry.named("spawn").durable.materialize
    calls = []

    def spy(w, op):
        calls.append((w is world, w.lock.locked()))
        return original(w, op)

    object.__setattr__(rt.registry.named("spawn").durable, "materialize", spy)
    try:
        await rt.dispatcher.defer(Spawn(world_id=world_id, components=[Health(hp=1)]), at(0))
        await step(rt, world_id)
    finally:
        object.__setattr__(rt.registry.named("spawn").durable, "materialize", original)
    assert calls == [(True, True)]


async def test_staged_commands_become_applied_only_when_the_tick_publishes(rt, world_id, authority):
    await rt.dispatcher.defer(probe(world_id, "a"), at(0), command_id="a")
    world = await rt.worlds.get(world_id)

    class Down(Exception):
        pass

    publish = world.publisher.publish

    async def failing(prepared):
        raise Down("authority unreachable")

    world.publisher.publish = failing
    with pytest.raises(Down):
        await step(rt, world_id)
    assert (await statuses(rt, world_id))["a"] == CommandStatus.LEASED
    assert await authority.manifests(world_id=world_id) == []
    world.publisher.publish = publish
    assert await step(rt, world_id) == 1
    assert (await statuses(rt, world_id))["a"] == CommandStatus.APPLIED


async def test_a_retried_tick_does_not_duplicate_staged_mutations(rt, world_id):
    await rt.dispatcher.defer(Spawn(world_id=world_id, components=[Health(hp=1)]), at(0), command_id="s")
    world = await rt.worlds.get(world_id)
    fail = [RuntimeError("processor bug")]

    def flaky_processor(w, tick, eid, comps):
        if fail:
            raise fail.pop()

    world.add_processor(flaky_processor, Health)
    with pytest.raises(RuntimeError):
        await step(rt, world_id)
    assert await step(rt, world_id) == 1
    assert len(world.query(Health)) == 1


async def test_a_publication_whose_answer_was_lost_is_recognised_not_replayed(rt, world_id, authority):
    await rt.dispatcher.defer(probe(world_id, "a"), at(0), command_id="a")
    world = await rt.worlds.get(world_id)

    world.publisher.authority = answer_lost(authority, "publish")
    with pytest.raises(TickOutcomeUnknownError, match="may or may not have committed"):
        await step(rt, world_id)
    assert world.coordinator.prepared is not None  # the prepared tick is kept
    world.publisher.authority = authority
    assert await step(rt, world_id) == 1  # republished: recognised by its commit token
    assert len(await authority.manifests(world_id=world_id)) == 1
    events = [e["event_type"] for e in await outbox(authority, world_id) if e["command_id"] == "a"]
    assert events == ["admitted", "applied"]
    assert await step(rt, world_id) == 0 and world.tick == 1


async def test_a_definitive_refusal_of_a_publication_is_not_ambiguous(rt, world_id, authority):
    from archetype.commands import StaleWriterError

    await rt.dispatcher.defer(probe(world_id, "a"), at(0), command_id="a")
    world = await rt.worlds.get(world_id)

    async def fence_before_publishing(method, arguments):
        if method == "publish":
            await authority.acquire_writer(world_id)  # another runner takes over

    world.publisher.authority = AuthoritySeam(authority, before=fence_before_publishing)
    with pytest.raises(StaleWriterError):
        await world.step()


async def test_permanent_failures_are_rejected_and_the_drain_continues(rt, world_id):
    fail_next("lookup", LookupError("no such thing"))
    fail_next("type", TypeError("wrong type"))
    fail_next("value", ValueError("bad value"))
    for label in ("lookup", "type", "value", "fine"):
        await rt.dispatcher.defer(probe(world_id, label), at(0), command_id=label)
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=999), at(0), command_id="missing")
    assert await step(rt, world_id) == 1
    result = await records(rt, world_id)
    assert {k: v.status for k, v in result.items()} == {
        "lookup": "REJECTED", "type": "REJECTED", "value": "REJECTED", "fine": "APPLIED", "missing": "REJECTED",
    }  # fmt: skip
    assert result["lookup"].last_error.startswith("ValidationError") or "LookupError" in result["lookup"].last_error
    assert "LookupError: entity 999" in result["missing"].last_error
    assert await labels(rt, world_id) == {"fine"}


async def test_a_retryable_failure_releases_the_tail_uncharged_and_stops_the_drain(rt, world_id, authority):
    fail_next("flaky", ConnectionError("service down"))
    for label in ("before", "flaky", "after-1", "after-2"):
        await rt.dispatcher.defer(probe(world_id, label), at(0), command_id=label)
    assert await step(rt, world_id) == 1
    result = await records(rt, world_id)
    assert (result["before"].status, result["flaky"].status) == ("APPLIED", "RETRYABLE")
    assert result["flaky"].attempts == 1 and "ConnectionError" in result["flaky"].last_error
    for tail in ("after-1", "after-2"):
        assert (result[tail].status, result[tail].attempts) == ("PENDING", 0)
    assert await step(rt, world_id) == 3
    assert {k: (v.status, v.attempts) for k, v in (await records(rt, world_id)).items()} == {
        "before": ("APPLIED", 1), "flaky": ("APPLIED", 2), "after-1": ("APPLIED", 1), "after-2": ("APPLIED", 1),
    }  # fmt: skip


async def test_an_exhausted_retryable_command_dead_letters_and_later_commands_continue(rt, world_id):
    fail_next("doomed", ConnectionError("down"), ConnectionError("still down"))
    await rt.dispatcher.defer(probe(world_id, "doomed"), at(0, max_attempts=2), command_id="doomed")
    await rt.dispatcher.defer(probe(world_id, "next"), at(0), command_id="next")
    assert await step(rt, world_id) == 0  # doomed retries; next is released
    assert await step(rt, world_id) == 1  # doomed dead-letters; next continues in the same drain
    result = await records(rt, world_id)
    assert (result["doomed"].status, result["doomed"].attempts) == ("DEAD_LETTER", 2)
    assert result["next"].status == "APPLIED"


@pytest.mark.parametrize("fatal", [KeyboardInterrupt, SystemExit, GeneratorExit])
async def test_process_fatal_base_exceptions_propagate_and_change_no_product_state(rt, world_id, authority, fatal):
    fail_next("fatal", fatal())
    await rt.dispatcher.defer(probe(world_id, "fatal"), at(0), command_id="fatal")
    before = len(await outbox(authority, world_id))
    with pytest.raises(fatal):
        await step(rt, world_id)
    row = await authority.command(world_id=world_id, command_id="fatal")
    assert row["status"] == "LEASED" and row["last_error"] is None
    assert len(await outbox(authority, world_id)) == before


async def test_the_receipt_counts_applied_commands_and_the_ledger_names_them(rt, world_id, authority):
    fail_next("bad", ValueError("no"))
    for label in ("one", "bad", "two"):
        await rt.dispatcher.defer(probe(world_id, label), at(0), command_id=label)
    receipt = await (await rt.worlds.get(world_id)).step()
    assert receipt.commands_applied == 2
    (manifest,) = await authority.manifests(world_id=world_id)
    assert settled(manifest) == [("one", "applied"), ("bad", "rejected"), ("two", "applied")]
    assert manifest["commit_token"] == receipt.commit_token
