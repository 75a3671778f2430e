"""Retention (docs/ledger.md, "Retention"): `prune` removes old manifests, settled commands past the
idempotency window whose events are acknowledged, and lapsed reservations, and keeps every
guarantee: the tick head's manifest (commit-token dedup), open commands, dead letters, and every
command whose trail has not reached the audit table."""

from typing import Any

import pytest

from archetype import Permanent
from archetype.commands import InvalidCommandError, RedriveConflictError
from archetype.commands.ledger_rows import StateWrite
from archetype.world import Despawn, Spawn
from tests.component_modules.alpha import Health
from tests.conformance.authorities import LEDGERS
from tests.conformance.helpers import acknowledge_all, at, fail_next, manifests, outbox, probe, statuses, step

AUTHORITIES = LEDGERS  # its reason: docs/testing.md, "Which authorities"

WINDOW_MS = 60_000


async def test_the_tick_head_manifest_stays_and_a_lost_publish_answer_is_still_recognised(rt, world_id, authority):
    for tick in range(5):
        await rt.dispatcher.defer(Spawn(world_id=world_id, components=[Health(hp=tick)]), at(tick), command_id=f"s{tick}")
        await step(rt, world_id)
    pruned = await authority.prune(world_id=world_id, keep_ticks=2, idempotency_window_ms=WINDOW_MS)
    assert (pruned["ticks"], pruned["done"]) == (3, True)
    kept = await manifests(authority, world_id)
    assert [m["tick"] for m in kept] == [3, 4]
    await authority.prune(world_id=world_id, keep_ticks=1)
    (head,) = await manifests(authority, world_id)
    # the runner whose answer was lost republishes the very same manifest: recognised, not replayed
    nothing: StateWrite = {"snapshot": False, "chunks": []}
    again = await authority.publish(world_id=world_id, owner="anyone", session="any", manifest=head, writes=nothing)
    assert again == {"tick": 4, "published": False}
    assert await step(rt, world_id) == 0  # and the world goes on from its head
    assert [m["tick"] for m in await manifests(authority, world_id)] == [4, 5]


async def test_a_command_id_replays_within_the_window_and_names_a_new_command_after_it(rt, world_id, authority, clock):
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=7), at(0), command_id="k")
    await step(rt, world_id)
    await acknowledge_all(authority, world_id)
    clock.advance(WINDOW_MS - 1)
    assert (await authority.prune(world_id=world_id, idempotency_window_ms=WINDOW_MS))["commands"] == 0
    replay = await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=7), at(0), command_id="k")
    assert replay.replayed and await statuses(rt, world_id) == {"k": "REJECTED"}

    clock.advance(1)
    assert (await authority.prune(world_id=world_id, idempotency_window_ms=WINDOW_MS))["commands"] == 1
    assert await authority.command(world_id=world_id, command_id="k") is None
    assert await statuses(rt, world_id) == {}
    # past the window the id is free: other content is a new command, not a conflict
    fresh = await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=8), at(1), command_id="k")
    assert not fresh.replayed and fresh.sequence > replay.sequence


async def test_a_command_whose_events_are_not_acknowledged_stays(rt, world_id, authority, clock):
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0), command_id="first")
    await step(rt, world_id)
    first_events = len(await outbox(authority, world_id))
    clock.advance(1)  # events of the same millisecond as a pending one are held back with it
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=2), at(1), command_id="second")
    await step(rt, world_id)
    await authority.acknowledge_outbox(world_id=world_id, up_to_seq=first_events - 1)  # not `first`'s last event
    clock.advance(WINDOW_MS)
    assert (await authority.prune(world_id=world_id, idempotency_window_ms=WINDOW_MS))["commands"] == 0
    await authority.acknowledge_outbox(world_id=world_id, up_to_seq=first_events)
    assert (await authority.prune(world_id=world_id, idempotency_window_ms=WINDOW_MS))["commands"] == 1
    assert await statuses(rt, world_id) == {"second": "REJECTED"}
    await acknowledge_all(authority, world_id)
    assert (await authority.prune(world_id=world_id, idempotency_window_ms=WINDOW_MS))["commands"] == 1


async def test_open_commands_and_dead_letters_are_never_pruned(rt, world_id, authority, clock):
    fail_next("dead", ConnectionError("down"))
    await rt.dispatcher.defer(probe(world_id, "dead"), at(0, max_attempts=1), command_id="dead")
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(50), command_id="later")
    await step(rt, world_id)
    await acknowledge_all(authority, world_id)
    clock.advance(10 * WINDOW_MS)
    assert (await authority.prune(world_id=world_id, idempotency_window_ms=0))["commands"] == 0
    assert await statuses(rt, world_id) == {"dead": "DEAD_LETTER", "later": "PENDING"}


async def test_a_spawn_reservation_goes_with_its_command(rt, world_id, authority, clock):
    spawn = Spawn(world_id=world_id, components=[Health(hp=1)])
    first = await rt.dispatcher.defer_spawn(spawn, at(0), command_id="sp")
    await step(rt, world_id)
    await acknowledge_all(authority, world_id)
    clock.advance(WINDOW_MS)
    pruned = await authority.prune(world_id=world_id, idempotency_window_ms=WINDOW_MS)
    assert (pruned["commands"], pruned["reservations"]) == (1, 1)
    # the id is free again, reservation and all: the same request is a new spawn of a new entity
    second = await rt.dispatcher.defer_spawn(spawn, at(1), command_id="sp")
    assert not second.command.replayed and second.entity_id != first.entity_id


async def test_prune_works_in_bounded_batches(rt, world_id, authority, clock):
    for i in range(5):
        await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=i + 1), at(0), command_id=f"c{i}")
    await step(rt, world_id)
    await acknowledge_all(authority, world_id)
    rounds = []
    while not (pruned := await authority.prune(world_id=world_id, idempotency_window_ms=0, limit=2))["done"]:
        rounds.append(pruned["commands"])
    rounds.append(pruned["commands"])
    assert rounds == [2, 2, 1] and await statuses(rt, world_id) == {}


async def test_prune_takes_the_oldest_settlement_first_not_the_oldest_admission(rt, world_id, authority, clock):
    """Oldest first is by settlement ("Retention"): a command admitted first and settled last goes last."""
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(1), command_id="admitted-first")
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=2), at(0), command_id="settled-first")
    await step(rt, world_id)
    clock.advance(1)
    await step(rt, world_id)
    await acknowledge_all(authority, world_id)
    clock.advance(WINDOW_MS)
    assert (await authority.prune(world_id=world_id, idempotency_window_ms=WINDOW_MS, limit=1))["commands"] == 1
    assert await statuses(rt, world_id) == {"admitted-first": "REJECTED"}
    # one settled within the window stays, and so does every command admitted after the horizon
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=3), at(2), command_id="recent")
    await step(rt, world_id)
    await acknowledge_all(authority, world_id)
    clock.advance(WINDOW_MS - 1)
    assert (await authority.prune(world_id=world_id, idempotency_window_ms=WINDOW_MS))["commands"] == 1
    assert await statuses(rt, world_id) == {"recent": "REJECTED"}


@pytest.mark.parametrize("arguments", [{"keep_ticks": 0}, {"idempotency_window_ms": -1}, {"limit": 0}])
async def test_bad_settings_are_refused_and_change_nothing(rt, world_id, authority, arguments):
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0), command_id="c")
    await step(rt, world_id)
    await step(rt, world_id)
    await acknowledge_all(authority, world_id)
    with pytest.raises(InvalidCommandError):
        await authority.prune(world_id=world_id, **{"keep_ticks": 1, "idempotency_window_ms": 0, **arguments})
    assert len(await manifests(authority, world_id)) == 2 and await statuses(rt, world_id) == {"c": "REJECTED"}


async def test_a_busy_world_reaches_a_steady_state(rt, world_id, authority, clock):
    """Commands flow every tick, the projector acknowledges, prune runs now and then: the rows
    the ledger holds stop growing once the window is full."""
    sizes = []
    for tick in range(120):
        await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(tick), command_id=f"c{tick}")
        await step(rt, world_id)
        clock.advance(100)  # a tick every 100 ms: the 2 s window holds 20 ticks of commands
        await acknowledge_all(authority, world_id)
        if tick % 10 == 9:
            await authority.prune(world_id=world_id, keep_ticks=10, idempotency_window_ms=2_000)
            rows = len(await rt.scheduler.history(world_id, limit=10_000)) + len(await manifests(authority, world_id))
            sizes.append(rows)
    assert max(sizes[3:]) == min(sizes[3:]) <= 20 + 10 + 1, sizes  # steady from the window's fill on
    assert sizes[0] < sizes[3]


# -- no fact the ledger acts on lives only in a row retention prunes ----------------------------
# Each case makes a fact, then retention prunes everything it may (every event acknowledged, a zero
# window, one manifest kept), then the fact must still hold. A new prunable kind, or a new fact
# derived from a prunable row, gets a row here.
async def redriven_once(rt, world_id, authority) -> Any:
    fail_next("dead", Permanent("poisoned"))
    await rt.dispatcher.defer(probe(world_id, "dead"), at(0), command_id="dead")
    await step(rt, world_id)
    await authority.redrive(world_id, "dead")
    await step(rt, world_id)  # the redrive applies, and may be pruned

    async def check() -> None:
        with pytest.raises(RedriveConflictError):
            await authority.redrive(world_id, "dead")

    return check


async def sequences_never_reused(rt, world_id, authority) -> Any:
    last = await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0), command_id="last")
    await step(rt, world_id)

    async def check() -> None:
        again = await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0), command_id="last")
        assert not again.replayed and again.sequence > last.sequence

    return check


async def event_numbers_never_reused(rt, world_id, authority) -> Any:
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0), command_id="c")
    await step(rt, world_id)
    last = (await authority.watermark(world_id))["committed_seq"]

    async def check() -> None:
        await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0), command_id="d")
        assert [e["event_seq"] for e in await outbox(authority, world_id)] == [last + 1]

    return check


async def entity_ids_never_reused(rt, world_id, authority) -> Any:
    spawn = Spawn(world_id=world_id, components=[Health(hp=1)])
    first = await rt.dispatcher.defer_spawn(spawn, at(0), command_id="sp")
    await step(rt, world_id)

    async def check() -> None:
        assert (await rt.dispatcher.defer_spawn(spawn, at(0), command_id="sp")).entity_id > first.entity_id

    return check


async def quota_of_the_ticks_to_run(rt, world_id, authority) -> Any:
    from archetype.commands import ActorCtx, QuotaExceededError, Role

    player = ActorCtx(principal="p1", roles=frozenset({Role.player}))
    rt.scheduler.quota = 1
    for _ in range(3):
        await step(rt, world_id)
    # runs at tick 3: its count is tick 3's, which no prune takes while tick 3 is still to run
    await rt.dispatcher.defer_as(player, Despawn(world_id=world_id, entity_id=1), at(0), command_id="past")

    async def check() -> None:
        with pytest.raises(QuotaExceededError):
            await rt.dispatcher.defer_as(player, Despawn(world_id=world_id, entity_id=1), at(0), command_id="more")

    return check


@pytest.mark.parametrize("fact", [redriven_once, sequences_never_reused, event_numbers_never_reused,
                                  entity_ids_never_reused, quota_of_the_ticks_to_run], ids=lambda fact: fact.__name__)  # fmt: skip
async def test_no_fact_rests_on_a_row_retention_prunes(rt, world_id, authority, clock, fact):
    check = await fact(rt, world_id, authority)
    await acknowledge_all(authority, world_id)
    clock.advance(1)
    while not (await authority.prune(world_id=world_id, keep_ticks=1, idempotency_window_ms=0))["done"]:
        pass
    await check()
