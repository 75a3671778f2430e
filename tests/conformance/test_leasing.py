"""Ordering and leasing (spec: "Ordering and leasing"; docs/ledger.md: runners, ordering and leasing)."""

import pytest

from archetype.commands import InvalidCommandError
from archetype.world import Despawn, Spawn
from tests.component_modules.alpha import Health
from tests.conformance.authorities import LEDGERS
from tests.conformance.helpers import applied, at, fail_next, manifests, probe, records, settled, step

AUTHORITIES = LEDGERS  # its reason: docs/testing.md, "Which authorities"


def spawn(world_id, hp):
    return Spawn(world_id=world_id, components=[Health(hp=hp)])


async def test_due_rows_apply_in_tick_priority_sequence_order(rt, world_id, authority):
    await rt.dispatcher.defer(spawn(world_id, 1), at(1, priority=0), command_id="t1-p0-a")
    await rt.dispatcher.defer(spawn(world_id, 2), at(0, priority=5), command_id="t0-p5")
    await rt.dispatcher.defer(spawn(world_id, 3), at(1, priority=-1), command_id="t1-pm1")
    await rt.dispatcher.defer(spawn(world_id, 4), at(0, priority=0), command_id="t0-p0")
    await rt.dispatcher.defer(spawn(world_id, 5), at(1, priority=0), command_id="t1-p0-b")
    await step(rt, world_id)
    await step(rt, world_id)
    ticks = await manifests(authority, world_id)
    assert [applied(m) for m in ticks] == [["t0-p0", "t0-p5"], ["t1-pm1", "t1-p0-a", "t1-p0-b"]]


# Where the ledger finds open commands changes nothing of their order (docs/storage.md, "Schema version
# 20"): a command due after the tick after the head when admitted is found in the due index, one due at
# once by walking the commands from a floor the publication moves up. These hold the order across both
# places, the lease's limit included, and the floor never passing a command still open.


async def test_the_lease_order_and_limit_hold_across_commands_due_at_once_and_due_later(rt, world_id, authority):
    rt.scheduler.lease_limit = 3
    # admitted at tick head -1: due later (tick 3 is after tick 0), the first in due order admitted last
    for priority in (2, 0, 4, -2):
        await rt.dispatcher.defer(spawn(world_id, 1), at(3, priority=priority), command_id=f"later-p{priority}")
    for _ in range(3):
        await step(rt, world_id)  # ticks 0-2: nothing due
    # admitted at tick head 2: due at once, between the earlier ones in priority, one for a passed tick
    await rt.dispatcher.defer(spawn(world_id, 2), at(3, priority=1), command_id="now-p1")
    await rt.dispatcher.defer(spawn(world_id, 3), at(3, priority=-1), command_id="now-p-1")
    await rt.dispatcher.defer(spawn(world_id, 4), at(0, priority=5), command_id="passed-p5")
    await rt.dispatcher.defer(spawn(world_id, 5), at(3, priority=3), command_id="now-p3")
    assert await authority.next_due_tick(world_id) == 0
    for _ in range(3):
        await step(rt, world_id)
    ticks = await manifests(authority, world_id)
    assert [applied(m) for m in ticks[-3:]] == [["passed-p5", "later-p-2", "now-p-1"], ["later-p0", "now-p1", "later-p2"],
                                                ["now-p3", "later-p4"]]  # fmt: skip
    assert await authority.next_due_tick(world_id) is None


async def test_a_command_left_open_below_later_settlements_is_still_found(rt, world_id, authority):
    """The floor stays at the first command due at once still open, however many after it settle."""
    rt.scheduler.lease_limit = 1
    await rt.dispatcher.defer(spawn(world_id, 1), at(0, priority=9), command_id="last")
    for i in range(3):
        await rt.dispatcher.defer(spawn(world_id, 2 + i), at(0, priority=i), command_id=f"first-{i}")
    for _ in range(3):
        await step(rt, world_id)
    assert await authority.next_due_tick(world_id) == 0
    await rt.dispatcher.defer(spawn(world_id, 9), at(0, priority=9), command_id="after")
    for _ in range(2):
        await step(rt, world_id)
    ticks = await manifests(authority, world_id)
    assert [applied(m) for m in ticks] == [["first-0"], ["first-1"], ["first-2"], ["last"], ["after"]]
    assert await authority.next_due_tick(world_id) is None


async def test_a_retryable_command_before_the_tick_s_settlements_runs_again(rt, world_id, authority):
    """A command that failed in a tick whose other settlements come after it in the world's admission
    order stays found (the publication's floor stops at it), and so do the commands released behind it."""
    await rt.dispatcher.defer(probe(world_id, "retry"), at(0, priority=5), command_id="retry")
    await rt.dispatcher.defer(probe(world_id, "a"), at(0, priority=0), command_id="a")
    await rt.dispatcher.defer(probe(world_id, "b"), at(0, priority=1), command_id="b")
    await rt.dispatcher.defer(probe(world_id, "released"), at(0, priority=7), command_id="released")
    fail_next("retry", RuntimeError("transient"))
    await step(rt, world_id)
    await step(rt, world_id)
    ticks = await manifests(authority, world_id)
    assert [settled(m) for m in ticks] == [[("a", "applied"), ("b", "applied"), ("retry", "failed")],
                                           [("retry", "applied"), ("released", "applied")]]  # fmt: skip


async def test_commands_wait_for_their_tick_and_late_ones_run_at_the_next(rt, world_id):
    await rt.dispatcher.defer(spawn(world_id, 1), at(2), command_id="at-2")
    assert [await step(rt, world_id) for _ in range(3)] == [0, 0, 1]
    assert (await records(rt, world_id))["at-2"].applied_tick == 2
    await rt.dispatcher.defer(spawn(world_id, 1), at(0), command_id="late")
    await step(rt, world_id)
    assert (await records(rt, world_id))["late"].applied_tick == 3


async def lease(authority, world_id, owner, session="s1", tick=10, lease_ms=1_000):
    info = await authority.acquire_writer(world_id)
    rows = await authority.lease(world_id, owner, session, info["writer_epoch"], tick, 100, lease_ms)
    return info["writer_epoch"], rows


async def test_leasing_never_deletes_never_charges_and_records_owner_and_expiry(rt, world_id, authority, clock):
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0), command_id="c")
    _, rows = await lease(authority, world_id, "owner-a")
    assert [(r["command_id"], r["suspect"]) for r in rows] == [("c", False)]
    row = await authority.command(world_id, "c")
    assert row["status"] == "LEASED" and row["lease_owner"] == "owner-a"
    assert row["lease_expires_at"] == clock.now_ms() + 1_000 and row["attempts"] == 0


async def test_another_owner_takes_over_only_after_expiry_and_takes_suspects(rt, world_id, authority, clock):
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0), command_id="first")
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=2), at(0), command_id="second")
    await lease(authority, world_id, "owner-a")
    _, rows = await lease(authority, world_id, "owner-b")
    assert rows == []  # held by a live lease: order is never skipped
    clock.advance(1_000)
    _, rows = await lease(authority, world_id, "owner-b")
    assert [(r["command_id"], r["lease_owner"], r["attempts"], r["suspect"]) for r in rows] == [
        ("first", "owner-b", 0, True), ("second", "owner-b", 0, True)
    ]  # fmt: skip


async def test_the_same_session_renews_and_a_restarted_owner_takes_its_leases_back_at_once(rt, world_id, authority, clock):
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0), command_id="c")
    info = await authority.acquire_writer(world_id)
    for _ in range(3):
        rows = await authority.lease(world_id, "a", "session-1", info["writer_epoch"], 0, 10, 1_000)
        clock.advance(10)
    assert (rows[0]["attempts"], rows[0]["suspect"]) == (0, False)
    assert rows[0]["lease_expires_at"] == clock.now_ms() - 10 + 1_000
    rows = await authority.lease(world_id, "a", "session-2", info["writer_epoch"], 0, 10, 1_000)  # long before expiry
    assert [(r["command_id"], r["suspect"]) for r in rows] == [("c", True)]


async def test_a_runner_killed_mid_tick_is_resumed_by_another_after_expiry(rt, make_runtime, world_id, clock):
    await rt.dispatcher.defer(spawn(world_id, 1), at(0), command_id="c")
    world = await rt.worlds.get(world_id)
    await rt.scheduler.materialize(world, 0)  # leased and staged, never published: the runner "dies" here
    other = make_runtime("runner-b")
    assert await step(other, world_id) == 0  # lease still live
    clock.advance(1_000)
    assert await step(other, world_id) == 1
    record = (await records(other, world_id))["c"]
    assert record.status == "APPLIED" and record.attempts == 1 and record.applied_tick == 1


async def test_a_restarted_runner_resumes_its_own_world_at_once(rt, make_runtime, world_id):
    await rt.dispatcher.defer(spawn(world_id, 1), at(0), command_id="c")
    world = await rt.worlds.get(world_id)
    await rt.scheduler.materialize(world, 0)  # the process dies here
    restarted = make_runtime("runner-a")  # same owner, new session: no waiting for the lease to expire
    assert await step(restarted, world_id) == 1
    assert (await records(restarted, world_id))["c"].attempts == 1


async def test_next_due_tick_is_the_lowest_tick_of_an_open_command(rt, world_id, authority):
    assert await authority.next_due_tick(world_id) is None  # nothing admitted
    await rt.dispatcher.defer(spawn(world_id, 1), at(3), command_id="at-3")
    await rt.dispatcher.defer(spawn(world_id, 2), at(1), command_id="at-1")
    assert await authority.next_due_tick(world_id) == 1
    await step(rt, world_id)
    await step(rt, world_id)  # tick 1 applies at-1: settled commands no longer count
    assert await authority.next_due_tick(world_id) == 3
    await step(rt, world_id)
    await step(rt, world_id)
    assert await authority.next_due_tick(world_id) is None
    try:
        await authority.next_due_tick("w-nowhere")
    except Exception as exc:
        assert getattr(exc, "code", None) == "world_not_found"
    else:
        raise AssertionError("a missing world must be refused")


@pytest.mark.parametrize("lease_ms", [0, 600_001])
async def test_a_command_lease_lasts_ten_minutes_at_most(rt, world_id, authority, lease_ms):
    """A row another owner holds unexpired stops every lease, so a command lease is bounded
    (docs/ledger.md, *Ordering and leasing*): refused, nothing leased."""
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0), command_id="c")
    with pytest.raises(InvalidCommandError):
        await lease(authority, world_id, "owner-a", lease_ms=lease_ms)
    assert (await authority.command(world_id, "c"))["status"] == "PENDING"
    _, rows = await lease(authority, world_id, "owner-a", lease_ms=600_000)
    assert [r["command_id"] for r in rows] == ["c"]
