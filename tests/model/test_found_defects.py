"""Divergences the reference model turned up: each is a minimal reproduction of a sentence of
docs/ledger.md the code did not keep. Such a test fails until the code (or the page) is fixed and
is never marked xfail; test_stateful.py's KNOWN_DEFECTS keeps the state machine going meanwhile.
The three here were fixed in b37e754 (a fourth, a poison command's crash count, in 48218bc, and is
held by tests/conformance/test_attempts.py): they stay as regression tests. The last one is a
sentence the state machine itself did not keep (the ledger did).
"""

from __future__ import annotations

import asyncio

import pytest

from archetype.commands import CommandConflictError, DeferredItem, DurableOptions, InvalidCommandError
from archetype.commands.port import ManualClock
from archetype.runtime import Runtime
from archetype.world import CreateWorld, Spawn, SpawnReserved, Step
from archetype.world.commit import TickOutcomeUnknownError
from local_catalog import open_local_authority
from tests.component_modules.alpha import Health
from tests.conformance.authorities import AUTHORITY_FACTORIES
from tests.conformance.helpers import fail_next, probe
from tests.model import test_stateful
from tests.model.ledger_model import Mutation, Options, Submission
from tests.support.faults import AuthoritySeam


@pytest.fixture
async def authority(tmp_path):
    authority = open_local_authority(tmp_path / "data", clock=ManualClock())
    yield authority
    await authority.close()


async def step(rt: Runtime, world_id: str) -> int | str:
    """A step, or the name of the process-fatal exception it let through."""
    try:
        return await rt.dispatcher.apply(Step(world_id=world_id))
    except (SystemExit, TickOutcomeUnknownError):
        return "crashed"


async def test_a_crash_in_an_unguarded_command_does_not_charge_the_suspect_before_it(authority):
    """docs/ledger.md, Attempts and crashes: "a runner killed mid-tick ... charges no command that
    was not being materialized at that moment under the guard, and the innocent commands of its
    ticks never dead-letter".

    Before b37e754 the guard named a suspect before it ran and was cleared only after the drain,
    so when a later, non-suspect command of the same drain killed the runner, the guard still
    named the suspect that ran fine and the next lease charged it: here an innocent command with a
    budget of one attempt dead-lettered, while the command that killed the runner applied later.
    """
    down = {"publish": 1}

    def fail_publish_once(method, arguments):
        if down.get(method):
            down[method] -= 1
            raise ConnectionResetError("connection lost before publish")

    seam = AuthoritySeam(authority, before=fail_publish_once)
    rt = Runtime(seam, owner="runner", lease_ms=1_000)
    w = await rt.dispatcher.apply(CreateWorld(name="w", world_id="w"))
    await rt.dispatcher.defer(probe(w, "innocent"), DurableOptions(tick=0, priority=0, max_attempts=1), command_id="innocent")
    assert await step(rt, w) == "crashed"  # its tick never published: the runner dies holding the lease
    rt = Runtime(seam, owner="runner", lease_ms=1_000)  # restarted: "innocent" is now a suspect
    fail_next("killer", SystemExit("this command kills its runner"))
    await rt.dispatcher.defer(probe(w, "killer"), DurableOptions(tick=0, priority=1), command_id="killer")
    assert await step(rt, w) == "crashed"  # innocent ran fine under the guard, then killer (not suspect) killed it
    await step(rt, w)
    rows = {r["command_id"]: r for r in await authority.history(w)}
    assert rows["innocent"]["status"] == "APPLIED", rows["innocent"]  # before b37e754: DEAD_LETTER, charged for killer's crash


async def test_a_batch_naming_one_id_twice_is_refused_before_any_ledger_call(authority):
    """docs/ledger.md, Admission: "CommandScheduler.admit validates everything first (... no id
    twice in a batch), then makes one ledger call". Before b37e754 the scheduler left that check to the ledger:
    the refusal costs a ledger call, and with the connection down the caller gets a connection
    error instead of InvalidCommandError."""
    seam = AuthoritySeam(authority)
    rt = Runtime(seam, owner="runner")
    w = await rt.dispatcher.apply(CreateWorld(name="w", world_id="w"))
    item = DeferredItem(op=Spawn(world_id=w, components=[Health(hp=1)]), options=DurableOptions(tick=0), command_id="k")
    with pytest.raises(InvalidCommandError):
        await rt.dispatcher.defer_batch([item, item])
    assert [method for method, _ in seam.calls] == ["create_world"]  # before b37e754 the code also called "admit"


async def test_a_spawn_reserved_that_does_not_fulfil_its_reservation_is_a_conflict(authority):
    """docs/ledger.md, Admission: the ledger "raises CommandConflictError for an id with other
    content or an id bound to a spawn reservation that this row does not fulfil". Before b37e754
    the code raised ReservationNotOwnedError, which is not a CommandConflictError (the page now
    keeps ReservationNotOwnedError for a command id that holds no reservation at all)."""
    down = {"admit": 1}

    def lose_admission(method, arguments):
        if down.get(method):
            down[method] -= 1
            raise ConnectionResetError("connection lost before admit")

    rt = Runtime(AuthoritySeam(authority, before=lose_admission), owner="runner")
    w = await rt.dispatcher.apply(CreateWorld(name="w", world_id="w"))
    reserved = (await authority.world_info(w))["next_entity_id"]  # the id the reservation takes
    with pytest.raises(ConnectionResetError):  # the reservation is made, its admission never arrives
        await rt.dispatcher.defer_spawn(Spawn(world_id=w, components=[Health(hp=1)]), DurableOptions(tick=0), command_id="k")
    other = SpawnReserved(world_id=w, entity_id=reserved, components=[Health(hp=2)])  # another request
    with pytest.raises(CommandConflictError):
        await rt.dispatcher.defer(other, DurableOptions(tick=0), command_id="k")


def test_a_pruned_command_id_names_a_new_command_with_a_digest_of_its_own(tmp_path):
    """docs/ledger.md, Retention: "After the window its row may be pruned, and then the id names
    nothing: a later admission under it is a new command". The state machine kept each command's
    digest per (world, principal, command id), so it held the new command to the pruned one's
    digest and reported a divergence the ledger did not have (worker_http, a full `./dev test`
    run); it keeps them per sequence now, which is never handed out twice."""

    def program(machine) -> None:
        world_id, world = machine.worlds[0], machine.model.worlds[machine.worlds[0]]
        rejected = Submission("k0", Mutation("despawn", test_stateful.MISSING_ENTITY), Options(0), "p2")  # when it runs
        machine.admit_batch(world_id, [rejected])
        machine.step_world("runner-a", world_id)
        machine.model.acknowledge_outbox(world_id, world.next_event_seq - 1)
        machine.ctx.loop.run_until_complete(machine.ctx.authority.acknowledge_outbox(world_id, world.next_event_seq - 1))
        machine.both(lambda: machine.model.prune(world_id, 1, 0, 100), machine.seam.prune(world_id, 1, 0, 100))
        assert world.command("p2", "k0") is None  # pruned: the id names nothing
        machine.spawn_reserve(world_id, "p2", "k0", (("Health", (("hp", 1),)),), Options(5))  # a new command under it
        machine.matches_the_model()  # before: "digest changed", the pruned command's digest against the new one's

    run_machine(tmp_path, "local", program)

def run_machine(tmp_path, authority_name: str, program) -> None:
    """`program(machine)` on a fresh state machine against `authority_name`, closed afterwards."""
    loop, clock = asyncio.new_event_loop(), ManualClock()
    factory = AUTHORITY_FACTORIES[authority_name](tmp_path / "authority", clock)
    authority = loop.run_until_complete(factory.__aenter__())
    try:
        ctx = test_stateful.Context(loop, authority, clock, authority_name)
        machine = type(f"LedgerMachine_{authority_name}", (test_stateful.LedgerMachine,), {"ctx": ctx})()
        machine.create_worlds("realtime")
        program(machine)
    finally:
        loop.run_until_complete(factory.__aexit__(None, None, None))
        loop.close()


def health_spawn(command_id: str, tick: int) -> Submission:
    return Submission(command_id, Mutation("spawn", components=(("Health", (("hp", 1),)),)), Options(tick), None)


def fork_at_the_head_after_a_migration(machine) -> None:
    """Open work of Health is migrated, then the world is forked at its head with its open commands:
    the model gave each copy the original's migrated mark, the ledger none."""
    world_id = machine.worlds[0]
    machine.admit_batch(world_id, [health_spawn("h1", 5)])
    machine.migrate_world(world_id)
    machine.fork(index=0, back=0, with_open=True, again=False)


def fork_before_a_migration(machine) -> None:
    """A command open at tick T (scheduled after it) applies with its Health payload, Health is
    migrated, then the world is forked at T with its open commands: the ledger checked the copy
    against the source's migrations (`unknown_component`), the model against the fork's."""
    world_id = machine.worlds[0]
    head = machine.model.worlds[world_id].tick_head
    machine.admit_batch(world_id, [health_spawn("h1", head + 1)])
    machine.advance_clock(1)  # admitted before the next tick publishes: open at the head
    machine.step_world("runner-a", world_id)
    machine.migrate_world(world_id)
    machine.fork(index=0, back=1, with_open=True, again=False)


@pytest.mark.parametrize("program", [fork_at_the_head_after_a_migration, fork_before_a_migration])
@pytest.mark.parametrize("authority_name", ["local", "durable_object"])
def test_a_fork_of_a_migrated_world_copies_what_the_source_holds_against_its_own_migrations(tmp_path, authority_name,
                                                                                            program):  # fmt: skip
    """docs/ledger.md, Forks: a copy is admitted as the source holds it now (no migrated_digest),
    checked against the fork's migrations, those of ticks up to at_tick (found by a 300 s soak,
    2026-12-02, after the model gained its `fork` rule; the page decided, the model and the ledger
    each followed it)."""

    def program_then_compare(machine) -> None:
        program(machine)
        assert len(machine.forks) == 1 and machine.model.worlds[machine.forks[0]].commands  # forked, copies made
        machine.matches_the_model()

    run_machine(tmp_path, authority_name, program_then_compare)
