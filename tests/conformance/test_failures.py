"""Failures you can see and steer (docs/ledger.md, "World health" and "Redrive"; docs/guide/failures.md):
a tick that fails before it is prepared stalls its world durably, and the next published tick
recovers it; an operator's retry starts its attempts (and a runner's backoff) again; a clean
shutdown gives every lease back; a command's own Retryable/Permanent verdict
wins over the exception-type rule; a dead letter is redriven as a new, linked command."""

import json

import pytest

from archetype import Permanent, Retryable
from archetype.commands import (
    CommandConflictError,
    CommandNotFoundError,
    CommandStatus,
    InvalidCommandError,
    NotDeadLetteredError,
    RedriveConflictError,
    StaleWriterError,
    WorldClosingError,
    WorldNotFoundError,
)
from archetype.commands.host import Backoff
from archetype.world import CreateWorld, DestroyWorld
from archetype.world.error_text import ERROR_TEXT_LIMIT
from tests.component_modules import flaky
from tests.conformance.authorities import LEDGERS
from tests.conformance.helpers import (
    acknowledge_all,
    at,
    dead_letter,
    fail_next,
    failing_processor,
    manifests,
    outbox,
    probe,
    records,
    settled,
    step,
)

AUTHORITIES = LEDGERS  # its reason: docs/testing.md, "Which authorities"


class Busy(Retryable, LookupError):
    """A verdict beside the type rule: a LookupError that says it is transient."""


def health(info: dict) -> tuple:
    return info["health"], info["failed_attempts"], info["health_error"]


async def test_a_failing_processor_stalls_the_world_durably_and_a_published_tick_recovers_it(rt, world_id, authority, clock):
    await rt.dispatcher.defer(probe(world_id, "a"), at(0), command_id="a")
    await failing_processor(rt, world_id, 3)
    before = (await authority.world_info(world_id))["updated_at"]
    for attempt in range(3):
        clock.advance(10)
        with pytest.raises(RuntimeError, match=f"processor bug #{attempt}"):
            await step(rt, world_id)
    info = await authority.world_info(world_id)
    assert health(info) == ("STALLED", 3, "RuntimeError: processor bug #2")
    assert info["stalled_since"] == before + 10 and info["tick_head"] == -1
    # the innocent command is neither charged nor held while the world is stalled
    row = await authority.command(world_id, "a")
    assert (row["status"], row["attempts"], row["last_error"], row["lease_owner"]) == ("PENDING", 0, None, None)
    world_events = [e for e in await outbox(authority, world_id) if e["command_id"] == ""]
    assert [(e["event_type"], e["status"], e["tick"]) for e in world_events] == [("world_stalled", "STALLED", 0)]
    assert json.loads(world_events[0]["payload"])["error"] == "RuntimeError: processor bug #0"

    assert await step(rt, world_id) == 1
    info = await authority.world_info(world_id)
    assert health(info) == ("ACTIVE", 0, None) and info["stalled_since"] is None
    last = (await outbox(authority, world_id))[-1]
    assert (last["event_type"], last["status"], last["tick"]) == ("world_recovered", "ACTIVE", 0)
    assert json.loads(last["payload"]) == {"attempts": 3, "max_attempts": None, "error": "RuntimeError: processor bug #2",
                                           "since": before + 10, "actor": None}  # fmt: skip


async def test_retry_now_starts_a_stalled_worlds_attempts_again_and_records_the_request(rt, world_id, authority, clock):
    await rt.dispatcher.defer(probe(world_id, "a"), at(0), command_id="a")
    await failing_processor(rt, world_id, 4)
    for attempt in range(3):
        clock.advance(10)
        with pytest.raises(RuntimeError, match=f"processor bug #{attempt}"):
            await step(rt, world_id)
    stalled = await authority.world_info(world_id)
    clock.advance(5)
    retried = await authority.retry_world(world_id, actor="ops Café")
    # still STALLED (nothing published yet), with its error and since; only the count starts again
    assert health(retried) == ("STALLED", 0, "RuntimeError: processor bug #2")
    assert (retried["stalled_since"], retried["tick_head"]) == (stalled["stalled_since"], -1)
    assert retried["updated_at"] == stalled["updated_at"] + 5
    event = (await outbox(authority, world_id))[-1]
    assert (event["command_id"], event["event_type"], event["status"], event["tick"]) == ("", "world_retry_requested", "STALLED", 0)
    assert json.loads(event["payload"]) == {"attempts": 3, "max_attempts": None, "error": "RuntimeError: processor bug #2",
                                            "since": stalled["stalled_since"], "actor": "ops Café"}  # fmt: skip
    # asked twice: nothing more (no event, no change)
    events = await outbox(authority, world_id)
    assert await authority.retry_world(world_id) == retried and await outbox(authority, world_id) == events
    row = await authority.command(world_id, "a")
    assert (row["status"], row["attempts"]) == ("PENDING", 0)  # the innocent command is untouched

    with pytest.raises(RuntimeError, match="processor bug #3"):  # counted from 0 again, in the same stall
        await step(rt, world_id)
    assert health(await authority.world_info(world_id)) == ("STALLED", 1, "RuntimeError: processor bug #3")
    await step(rt, world_id)
    trail = [e["event_type"] for e in await outbox(authority, world_id) if e["command_id"] == ""]
    assert trail == ["world_stalled", "world_retry_requested", "world_recovered"]
    assert json.loads((await outbox(authority, world_id))[-1]["payload"])["attempts"] == 1


async def test_retry_now_refuses_no_world_and_leaves_a_healthy_one_alone(rt, world_id, authority):
    before = await authority.world_info(world_id)
    assert await authority.retry_world(world_id) == before  # not stalled: nothing to retry
    assert await outbox(authority, world_id) == []
    with pytest.raises(WorldNotFoundError):
        await authority.retry_world("nowhere")
    gone = await rt.dispatcher.apply(CreateWorld(name="gone", world_id="w-gone"))
    await rt.dispatcher.apply(DestroyWorld(world_id=gone))
    with pytest.raises(WorldClosingError):
        await authority.retry_world(gone)


async def test_a_runner_waiting_out_the_backoff_retries_at_once_when_asked(rt, world_id, authority):
    rt.worlds.backoff = Backoff(base_s=3600, cap_s=3600)  # an hour: only a retry request ends the wait
    rt.worlds.retry_check_s = 0  # asks the ledger every time (a runner: at once after a failure, then every second)
    await rt.dispatcher.defer(probe(world_id, "a"), at(0), command_id="a")
    await failing_processor(rt, world_id, 2)
    for _ in range(2):
        with pytest.raises(RuntimeError):
            await step(rt, world_id)
    assert not await rt.worlds.retry_due(world_id)  # it asked the ledger: no request
    await authority.retry_world(world_id)
    assert await rt.worlds.retry_due(world_id)
    await step(rt, world_id)  # the processor is fixed
    assert health(await authority.world_info(world_id)) == ("ACTIVE", 0, None)
    assert await rt.worlds.retry_due(world_id)


async def test_a_healthy_world_writes_no_health_events(rt, world_id, authority):
    await rt.dispatcher.defer(probe(world_id, "a"), at(0), command_id="a")
    await step(rt, world_id)
    await step(rt, world_id)
    assert [e["event_type"] for e in await outbox(authority, world_id)] == ["admitted", "applied"]
    assert health(await authority.world_info(world_id)) == ("ACTIVE", 0, None)


async def test_a_failure_reported_by_a_fenced_writer_changes_nothing(rt, make_runtime, world_id, authority):
    world = await rt.worlds.get(world_id)
    await make_runtime("runner-b").worlds.get(world_id)  # takes the writer
    with pytest.raises(StaleWriterError):
        await authority.record_tick_failure(world_id, "runner-a", "s", world.writer_epoch, 0, "RuntimeError: x")
    with pytest.raises(InvalidCommandError):
        await authority.record_tick_failure(world_id, "runner-b", "s", world.writer_epoch + 1, 0, "x" * (ERROR_TEXT_LIMIT + 1))
    assert health(await authority.world_info(world_id)) == ("ACTIVE", 0, None)


async def test_closing_the_host_gives_back_every_lease_uncharged(rt, world_id, authority):
    for label in ("a", "b"):
        await rt.dispatcher.defer(probe(world_id, label), at(0), command_id=label)
    world = await rt.worlds.get(world_id)
    await rt.scheduler.materialize(world, 0)  # leased, then the runner shuts down before the tick publishes
    assert {(await authority.command(world_id, c))["status"] for c in "ab"} == {"LEASED"}
    await rt.worlds.close()
    rows = [await authority.command(world_id, c) for c in "ab"]
    assert [(r["status"], r["attempts"], r["lease_owner"]) for r in rows] == [("PENDING", 0, None)] * 2
    assert [e["event_type"] for e in await outbox(authority, world_id)] == ["admitted", "admitted"]  # bookkeeping


async def test_permanent_dead_letters_at_once_and_retryable_wins_over_the_type_rule(rt, world_id, authority):
    fail_next("perm", Permanent("the account is closed"))
    fail_next("busy", Busy("try later"))
    await rt.dispatcher.defer(probe(world_id, "perm"), at(0, max_attempts=3), command_id="perm")
    await rt.dispatcher.defer(probe(world_id, "after"), at(0), command_id="after")
    await rt.dispatcher.defer(probe(world_id, "busy"), at(0, max_attempts=3), command_id="busy")
    assert await step(rt, world_id) == 1  # a permanent failure does not stop the drain; a retryable one does
    result = await records(rt, world_id)
    assert (result["perm"].status, result["perm"].attempts) == (CommandStatus.DEAD_LETTER, 1)
    assert result["perm"].last_error == "Permanent: the account is closed"
    assert (result["busy"].status, result["busy"].last_error) == (CommandStatus.RETRYABLE, "Busy: try later")
    assert settled((await manifests(authority, world_id))[0]) == [("perm", "permanent"), ("after", "applied"), ("busy", "failed")]
    events = [(e["command_id"], e["event_type"]) for e in await outbox(authority, world_id) if e["event_type"] != "admitted"]
    assert events == [("perm", "dead_lettered"), ("after", "applied"), ("busy", "retry_scheduled")]


async def test_a_redrive_is_a_new_linked_command_with_a_fresh_budget_and_the_dead_record_untouched(rt, world_id, authority, clock):
    dead = await dead_letter(rt, world_id, "d")
    assert dead["status"] == "DEAD_LETTER"
    await step(rt, world_id)  # the tick head moves on: the redrive is due at the next tick
    clock.advance(5)
    redriven = await authority.redrive(world_id, "d")
    assert {k: redriven[k] for k in ("command_id", "replayed", "redriven_from")} == {
        "command_id": "d.redrive", "replayed": False, "redriven_from": dead["sequence"]}
    assert await authority.command(world_id, "d") == {**dead, "redriven_by": redriven["sequence"]}  # untouched but its mark
    new = await authority.command(world_id, "d.redrive")
    assert new["sequence"] == redriven["sequence"] > dead["sequence"] and new["digest"] == redriven["digest"]
    assert {k: new[k] for k in ("status", "attempts", "max_attempts", "priority", "operation", "payload", "scheduled_tick",
                                "redriven_from", "principal", "last_error")} == {  # fmt: skip
        "status": "PENDING", "attempts": 0, "max_attempts": 2, "priority": 3, "operation": dead["operation"],
        "payload": dead["payload"], "scheduled_tick": 2, "redriven_from": dead["sequence"], "principal": None,
        "last_error": None,
    }  # fmt: skip
    assert await step(rt, world_id) == 1  # the fault is gone: the redrive applies
    trail = [(e["event_type"], e["status"]) for e in await outbox(authority, world_id) if e["command_id"] == "d.redrive"]
    assert trail == [("redriven", "PENDING"), ("applied", "APPLIED")]
    assert (await authority.command(world_id, "d"))["status"] == "DEAD_LETTER"


async def test_a_redrive_after_an_admission_takes_the_next_event_number(rt, world_id, authority):
    """Event numbers are handed out once, in order, whatever appended them: a redrive's `redriven`
    event follows an admission's `admitted` one (since schema version 21 read off its command row)."""
    await dead_letter(rt, world_id, "d")
    await rt.dispatcher.defer(probe(world_id, "later"), at(10**6), command_id="later")
    await authority.redrive(world_id, "d")
    events = await outbox(authority, world_id)
    assert [e["event_seq"] for e in events] == list(range(1, len(events) + 1))
    assert [(e["command_id"], e["event_type"]) for e in events[-2:]] == [("later", "admitted"), ("d.redrive", "redriven")]
    assert (await authority.watermark(world_id))["committed_seq"] == len(events)


async def test_a_redrive_is_idempotent_by_its_key_and_happens_once(rt, world_id, authority):
    await dead_letter(rt, world_id, "d")
    first = await authority.redrive(world_id, "d", new_command_id="again-1")
    replay = await authority.redrive(world_id, "d", new_command_id="again-1")
    assert replay == {**first, "replayed": True}
    with pytest.raises(RedriveConflictError):
        await authority.redrive(world_id, "d", new_command_id="again-2")
    with pytest.raises(RedriveConflictError):
        await authority.redrive(world_id, "d")
    assert [e["command_id"] for e in await outbox(authority, world_id) if e["event_type"] == "redriven"] == ["again-1"]


async def test_a_redrive_refuses_what_is_not_a_dead_letter_and_changes_nothing(rt, world_id, authority):
    from archetype.commands import ActorCtx, Role

    await rt.dispatcher.defer(probe(world_id, "open"), at(5), command_id="open")
    await dead_letter(rt, world_id, "d")
    player = ActorCtx(principal="p1", roles=frozenset({Role.player}))
    await dead_letter(rt, world_id, "mine", actor=player)
    events = len(await outbox(authority, world_id))
    with pytest.raises(NotDeadLetteredError):
        await authority.redrive(world_id, "open")
    with pytest.raises(CommandNotFoundError):
        await authority.redrive(world_id, "nope")
    with pytest.raises(CommandNotFoundError):  # another principal's dead letter is not in the trusted scope
        await authority.redrive(world_id, "mine")
    with pytest.raises(CommandConflictError):  # the new id is taken in that scope
        await authority.redrive(world_id, "d", new_command_id="open")
    with pytest.raises(InvalidCommandError):  # not a command id
        await authority.redrive(world_id, "d", new_command_id="not an id")
    assert len(await outbox(authority, world_id)) == events
    mine = await authority.redrive(world_id, "mine", scope="p1")
    assert (await authority.command(world_id, mine["command_id"], "p1"))["principal"] == "p1"


async def test_a_dead_letter_is_redriven_once_even_after_retention_pruned_its_redrive(rt, world_id, authority, clock):
    """"Redriven once" is the dead letter's own fact (`redriven_by`), kept as long as the dead letter:
    once the redrive settled and retention pruned it, no key redrives the dead letter again."""
    dead = await dead_letter(rt, world_id, "d")
    redriven = await authority.redrive(world_id, "d")
    assert (await authority.command(world_id, "d"))["redriven_by"] == redriven["sequence"]
    assert await step(rt, world_id) == 1  # the redrive runs the operation: once
    await acknowledge_all(authority, world_id)
    clock.advance(1)
    assert (await authority.prune(world_id, idempotency_window_ms=0))["commands"] == 1
    assert await authority.command(world_id, "d.redrive") is None
    assert {k: v for k, v in (await authority.command(world_id, "d")).items() if k != "redriven_by"} == {
        k: v for k, v in dead.items() if k != "redriven_by"}  # the dead letter itself is left as it was
    events = len(await outbox(authority, world_id))
    for key in (None, "d.redrive", "another"):  # not even the same key: that answer is past its window
        with pytest.raises(RedriveConflictError, match=f"#{redriven['sequence']}"):
            await authority.redrive(world_id, "d", new_command_id=key)
    assert len(await outbox(authority, world_id)) == events and await authority.history(world_id) == [
        await authority.command(world_id, "d")]
    assert await step(rt, world_id) == 0
    world = await rt.worlds.get(world_id)
    assert len(list(world.query(flaky.Probe))) == 1
