"""Whatever one command does, its outcome is recorded and the tick publishes (docs/ledger.md,
"Materialization and settlement"): hostile exceptions and messages, and commands growing state
past what the authority stores, settle their command and leave the world stepping."""

import os

from archetype.commands import CommandStatus
from archetype.world import AddComponents, Spawn
from tests.component_modules.bulky import Appendix, Margin, Note
from tests.conformance.helpers import at, fail_next, probe, records, step


class Unprintable(RuntimeError):
    def __str__(self) -> str:
        raise RuntimeError("str() of this exception raises")


async def test_an_exception_whose_str_raises_settles_its_command(rt, world_id, authority):
    fail_next("a", Unprintable())
    await rt.dispatcher.defer(probe(world_id, "a"), at(0), command_id="a")
    await rt.dispatcher.defer(probe(world_id, "b"), at(0), command_id="b")
    await step(rt, world_id)
    a = (await records(rt, world_id))["a"]
    assert (a.status, a.attempts) == (CommandStatus.RETRYABLE, 1)
    assert a.last_error.startswith("Unprintable")
    await step(rt, world_id)
    assert {r.status for r in (await records(rt, world_id)).values()} == {CommandStatus.APPLIED}
    assert (await authority.world_info(world_id))["health"] == "ACTIVE"


async def test_a_failure_message_with_a_lone_surrogate_settles_canonically(rt, world_id, authority):
    path = os.fsdecode(b"/saves/caf\xe9.dat")  # a file name that is not UTF-8: a lone surrogate
    fail_next("a", RuntimeError(f"cannot open {path}"))
    await rt.dispatcher.defer(probe(world_id, "a"), at(0, max_attempts=1), command_id="a")
    await rt.dispatcher.defer(probe(world_id, "b"), at(0), command_id="b")
    await step(rt, world_id)
    result = await records(rt, world_id)
    assert (result["a"].status, result["b"].status) == (CommandStatus.DEAD_LETTER, CommandStatus.APPLIED)
    assert result["a"].last_error == "RuntimeError: cannot open /saves/caf\\udce9.dat"


async def test_commands_growing_an_entity_past_the_state_limits_are_rejected_and_the_others_apply(rt, world_id, authority):
    """Three ordinary commands, each well under the HTTP body limit, grow one entity: the one that
    would take it past the limits is REJECTED with a typed error, the others apply, the tick publishes."""
    size = 700_000
    spawned = await rt.dispatcher.defer_spawn(Spawn(world_id=world_id, components=[Note(text="n" * size)]), at(0))
    entity = spawned.entity_id
    for number, cls in enumerate((Margin, Appendix)):
        op = AddComponents(world_id=world_id, entity_id=entity, components=[cls(text="m" * size)])
        await rt.dispatcher.defer(op, at(0), command_id=f"grow-{number}")
    await rt.dispatcher.defer(probe(world_id, "after"), at(0), command_id="after")
    await step(rt, world_id)
    result = await records(rt, world_id)
    assert result["after"].status == CommandStatus.APPLIED
    rejected = [r for r in result.values() if r.status == CommandStatus.REJECTED]
    assert rejected and all(r.last_error.startswith("StateTooLargeError: ") for r in rejected), result
    assert (await authority.world_info(world_id))["tick_head"] == 0
    await rt.dispatcher.defer(probe(world_id, "later"), at(1), command_id="later")
    await step(rt, world_id)
    assert (await records(rt, world_id))["later"].status == CommandStatus.APPLIED
