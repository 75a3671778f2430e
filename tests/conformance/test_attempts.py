"""Attempts and crashes (docs/ledger.md, "Attempts and crashes"): a runner that dies, however
often, charges nothing that was not being materialized under the crash guard; a command that
kills its runner every time is charged once per guarded crash and dead-letters after its budget."""

import pytest

from archetype.commands import CommandStatus
from tests.conformance.authorities import LEDGERS
from tests.conformance.helpers import applied, at, fail_next, manifests, outbox, probe, records, step
from tests.support.faults import AuthoritySeam

AUTHORITIES = LEDGERS  # its reason: docs/testing.md, "Which authorities"

COMMANDS = 20


async def die_mid_tick(rt, world_id):
    """The runner leases and materializes a tick, then its process is gone before it publishes."""
    world = await rt.worlds.get(world_id)
    await rt.scheduler.materialize(world, world.tick + 1)


async def test_crashes_past_the_budget_dead_letter_nothing_that_never_failed(make_runtime, world_id, authority):
    rt = make_runtime("runner-a")
    for index in range(COMMANDS):
        await rt.dispatcher.defer(probe(world_id, f"c{index}"), at(0, max_attempts=1), command_id=f"c{index}")
    for _ in range(5):  # five incarnations of the runner die mid-tick, each holding every command
        await die_mid_tick(rt, world_id)
        rt = make_runtime("runner-a")
    assert await step(rt, world_id) == COMMANDS
    assert {(r.status, r.attempts) for r in (await records(rt, world_id)).values()} == {(CommandStatus.APPLIED, 1)}
    assert [e["event_type"] for e in await outbox(authority, world_id)].count("dead_lettered") == 0


async def test_another_owner_takes_a_crashed_runners_commands_after_expiry_without_charging(rt, make_runtime, world_id, clock):
    await rt.dispatcher.defer(probe(world_id, "c"), at(0, max_attempts=1), command_id="c")
    await die_mid_tick(rt, world_id)
    clock.advance(1_000)
    other = make_runtime("runner-b")
    assert await step(other, world_id) == 1
    assert (await records(other, world_id))["c"].attempts == 1


@pytest.mark.parametrize("max_attempts", [1, 3])
async def test_a_command_that_kills_its_runner_dead_letters_after_its_budget(make_runtime, world_id, authority, max_attempts):
    crashes = 1 + max_attempts  # the first crash is not attributed; each guarded one is
    fail_next("poison", *[SystemExit("poison pill")] * crashes)
    rt = make_runtime("runner-a")
    await rt.dispatcher.defer(probe(world_id, "before"), at(0), command_id="before")
    await rt.dispatcher.defer(probe(world_id, "poison"), at(0, max_attempts=max_attempts), command_id="poison")
    await rt.dispatcher.defer(probe(world_id, "after"), at(0), command_id="after")
    for crash in range(crashes):
        with pytest.raises(SystemExit):
            await step(rt, world_id)
        rt = make_runtime("runner-a")  # the process restarts under the same runner id
        # the crash the guard names is charged by the next lease
        assert (await authority.command(world_id, "poison"))["attempts"] == max(crash - 1, 0)
    assert await step(rt, world_id) == 2
    result = await records(rt, world_id)
    assert (result["poison"].status, result["poison"].attempts) == (CommandStatus.DEAD_LETTER, max_attempts)
    assert "crash guard" in result["poison"].last_error
    assert {k: (r.status, r.attempts) for k, r in result.items() if k != "poison"} == {
        "before": (CommandStatus.APPLIED, 1), "after": (CommandStatus.APPLIED, 1),
    }  # fmt: skip
    events = [e["event_type"] for e in await outbox(authority, world_id) if e["command_id"] == "poison"]
    assert events == ["admitted", *["retry_scheduled"] * (max_attempts - 1), "dead_lettered"]
    assert applied((await manifests(authority, world_id))[0]) == ["before", "after"]


async def test_a_poison_caught_in_process_is_recovered_like_a_restart(rt, world_id):
    fail_next("poison", SystemExit("poison pill"), SystemExit("poison pill"))
    await rt.dispatcher.defer(probe(world_id, "poison"), at(0, max_attempts=1), command_id="poison")
    for _ in range(2):  # the same runtime, stepped again after the exception: its session ended with it
        with pytest.raises(SystemExit):
            await step(rt, world_id)
    assert await step(rt, world_id) == 0
    assert (await records(rt, world_id))["poison"].status == CommandStatus.DEAD_LETTER


async def test_guarding_costs_nothing_on_the_common_path(rt, world_id, authority):
    for index in range(5):
        await rt.dispatcher.defer(probe(world_id, f"c{index}"), at(0), command_id=f"c{index}")
    seam = AuthoritySeam(authority)
    rt.scheduler.authority = seam
    await step(rt, world_id)
    assert [method for method, _ in seam.calls if method == "guard"] == []


async def test_only_suspects_are_guarded_and_the_guard_is_cleared_after_the_drain(make_runtime, world_id, authority):
    rt = make_runtime("runner-a")
    await rt.dispatcher.defer(probe(world_id, "old"), at(0), command_id="old")
    await die_mid_tick(rt, world_id)
    rt = make_runtime("runner-a")
    await rt.dispatcher.defer(probe(world_id, "new"), at(0), command_id="new")
    seam = AuthoritySeam(authority)
    rt.scheduler.authority = seam
    await step(rt, world_id)
    guarded = [arguments["sequence"] for method, arguments in seam.calls if method == "guard"]
    old = (await authority.command(world_id, "old"))["sequence"]
    assert guarded == [old, None]
    info = await authority.world_info(world_id)
    assert (info["guard_sequence"], info["guard_session"]) == (None, None)
