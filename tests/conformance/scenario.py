"""A scripted scenario touching every ledger path, for the parity suite: run it against any two
authorities with the same clock and it must produce byte-identical records, manifests and outbox."""

from __future__ import annotations

import os

from archetype.canonical import canonical_json
from archetype.commands import (
    ActorCtx,
    CommandConflictError,
    DeferredItem,
    ReservationNotOwnedError,
    Role,
    WorldClosingError,
    WorldLeaseHeldError,
)
from archetype.commands.port import ManualClock
from archetype.runtime import Runtime
from archetype.world import (
    AddComponents,
    ComponentValue,
    CreateWorld,
    Despawn,
    DestroyWorld,
    RemoveComponents,
    Spawn,
    SpawnReserved,
    Update,
)
from archetype.world.world import PreTick
from tests.component_modules.alpha import Health, Position
from tests.component_modules.bulky import Appendix, Margin, Note
from tests.conformance.helpers import at, fail_next, probe

PLAYER = ActorCtx(principal="pat", roles={Role.player})
QUINN = ActorCtx(principal="quinn", roles={Role.player})
SAFE = 2**53 - 1
WORLDS = ("parity-main", "parity-doomed")


class Unreadable(RuntimeError):
    def __str__(self) -> str:
        raise RuntimeError("str() of this exception raises")


async def expect(error, call) -> None:
    try:
        await call
    except error:
        return
    raise AssertionError(f"expected {error.__name__}")


def _raise(exc: BaseException) -> None:
    raise exc


async def run_scenario(authority, clock: ManualClock) -> None:
    a = Runtime(authority, owner="runner-a", lease_ms=1_000)
    b = Runtime(authority, owner="runner-b", lease_ms=1_000)
    w = await a.dispatcher.apply(CreateWorld(name="main", world_id=WORLDS[0]))
    doomed = await a.dispatcher.apply(CreateWorld(name="doomed", world_id=WORLDS[1]))

    # replays, conflicts, batches
    hero = await a.dispatcher.defer_spawn_as(PLAYER, Spawn(world_id=w, components=[Position(x=0, y=0), Health(hp=10)]),
                                             at(0), command_id="spawn-hero")  # fmt: skip
    await b.dispatcher.defer_spawn_as(PLAYER, Spawn(world_id=w, components=[Position(x=0, y=0), Health(hp=10)]),
                                      at(0), command_id="spawn-hero")  # fmt: skip
    await expect(CommandConflictError, a.dispatcher.defer_spawn_as(
        PLAYER, Spawn(world_id=w, components=[Health(hp=1)]), at(0), command_id="spawn-hero"))  # fmt: skip
    await expect(ReservationNotOwnedError, a.dispatcher.defer(
        SpawnReserved(world_id=w, entity_id=999, components=[Health(hp=1)]), at(0), command_id="forged"))  # fmt: skip
    clock.advance(5)
    batch = [
        DeferredItem(op=Update(world_id=w, entity_id=hero.entity_id, components=[Health(hp=9)]), options=at(1), command_id="hurt"),
        DeferredItem(op=Despawn(world_id=w, entity_id=12345), options=at(1), command_id="ghost"),
        DeferredItem(op=RemoveComponents(world_id=w, entity_id=hero.entity_id, component_types=[Position]),
                     options=at(2, priority=-1), command_id="unplace"),
    ]  # fmt: skip
    await a.dispatcher.defer_batch_as(PLAYER, batch)
    await b.dispatcher.defer_batch_as(PLAYER, batch)
    await expect(CommandConflictError, a.dispatcher.defer_batch_as(PLAYER, [
        DeferredItem(op=Despawn(world_id=w, entity_id=1), options=at(1), command_id="fresh"),
        DeferredItem(op=Despawn(world_id=w, entity_id=2), options=at(1), command_id="ghost"),
    ]))  # fmt: skip

    # each failure class
    fail_next("flaky", ConnectionError("down once"))
    fail_next("doomed", ConnectionError("down"), ConnectionError("still down"))
    fail_next("invalid", ValueError("bad"))
    for label, options in (("flaky", at(1)), ("doomed", at(1, max_attempts=2)), ("invalid", at(1)), ("fine", at(2))):
        await a.dispatcher.defer(probe(w, label), options, command_id=f"probe-{label}")

    for _ in range(4):
        clock.advance(10)
        await a.worlds.step(w)

    # floats keep their identity (-0.0, integral floats) and integers reach the safe bound, in state and payloads
    edge = await a.dispatcher.defer_spawn(Spawn(world_id=w, components=[Position(x=-0.0, y=2.0), Health(hp=SAFE)]),
                                          at(2), command_id="edge-values")  # fmt: skip
    await a.dispatcher.defer(Spawn(world_id=w, components=[Position(x=1e-300, y=-2.5e300), Health(hp=-SAFE)]),
                             at(3, priority=-(2**31)), command_id="edge-floats")  # fmt: skip
    await a.dispatcher.defer(Despawn(world_id=w, entity_id=edge.entity_id), at(SAFE), command_id="at-the-bound")
    await a.dispatcher.defer(Despawn(world_id=w, entity_id=SAFE), at(3, priority=2**31), command_id="last-entity-id")
    # two principals, one key: two commands
    await a.dispatcher.defer_as(PLAYER, Despawn(world_id=w, entity_id=777), at(3), command_id="shared-key")
    await a.dispatcher.defer_as(QUINN, Despawn(world_id=w, entity_id=778), at(3), command_id="shared-key")
    # a tick that fails before it is prepared is discarded and run again, in order
    hook_fails = [RuntimeError("hook down once")]
    (await a.worlds.get(w)).add_hook(PreTick, lambda world, event: hook_fails and _raise(hook_fails.pop()))
    clock.advance(10)
    await expect(RuntimeError, a.worlds.step(w))
    await a.worlds.step(w)

    # a poison command that kills its runner: not charged for the first crash, then charged once per
    # guarded crash until its budget is spent
    fail_next("poison", SystemExit("poison"), SystemExit("poison"))
    await a.dispatcher.defer(probe(w, "poison"), at(4, max_attempts=1), command_id="probe-poison")
    await a.dispatcher.defer(probe(w, "innocent"), at(4), command_id="probe-innocent")
    for _ in range(2):
        clock.advance(10)
        await expect(SystemExit, a.worlds.step(w))
    clock.advance(10)
    await a.worlds.step(w)

    # a runner dies holding leases; another takes over after expiry
    await a.dispatcher.defer(Update(world_id=w, entity_id=hero.entity_id, components=[Health(hp=5)]), at(4), command_id="heal")
    world = await a.worlds.get(w)
    await a.scheduler.materialize(world, world.tick + 1)
    clock.advance(1_000)
    await b.worlds.step(w)

    # world leases: a leased runner claims the world (taking it from the forced writers above), dies
    # holding command leases, and another takes the world over once its world lease expired
    c = Runtime(authority, owner="runner-c", lease_ms=60_000, world_lease_ms=1_000)
    d = Runtime(authority, owner="runner-d", lease_ms=60_000, world_lease_ms=1_000)
    await a.dispatcher.defer(Update(world_id=w, entity_id=hero.entity_id, components=[Health(hp=4)]), at(4),
                             command_id="leased-heal")  # fmt: skip
    held = await c.worlds.get(w)
    assert await c.worlds.renew() == []
    await c.scheduler.materialize(held, held.tick + 1)
    await expect(WorldLeaseHeldError, d.worlds.get(w))
    clock.advance(1_000)
    await d.worlds.step(w)
    await d.worlds.close()  # gives the world lease back

    # whatever a command does, its outcome is recorded and the tick publishes: a command growing an
    # entity past the state limits is rejected (the others apply), and failure texts that cannot
    # be read or hold a lone surrogate are recorded safe (docs/ledger.md, "State limits")
    e = Runtime(authority, owner="runner-e", lease_ms=1_000)
    note = await e.dispatcher.defer_spawn(Spawn(world_id=w, components=[Note(text="n" * 700_000)]), at(5), command_id="note")
    for command_id, cls in (("margin", Margin), ("appendix", Appendix)):
        grow = AddComponents(world_id=w, entity_id=note.entity_id, components=[cls(text=command_id[0] * 700_000)])
        await e.dispatcher.defer(grow, at(5), command_id=command_id)
    fail_next("unreadable", Unreadable())
    fail_next("surrogate", RuntimeError(f"cannot open {os.fsdecode(b'/saves/caf' + bytes([0xE9]))}"))
    for label in ("unreadable", "surrogate"):
        await e.dispatcher.defer(probe(w, label), at(5, max_attempts=1), command_id=f"probe-{label}")
    clock.advance(10)
    await e.worlds.step(w)
    await e.worlds.close()

    # destroy: open commands cancelled, later admissions refused
    await a.dispatcher.defer(Despawn(world_id=doomed, entity_id=1), at(3), command_id="never")
    await a.dispatcher.apply(DestroyWorld(world_id=doomed))
    await expect(WorldClosingError, a.dispatcher.defer(Despawn(world_id=doomed, entity_id=1), at(3), command_id="late"))

    # retention: the main world's events up to its first tick's settlements projected, then a
    # prune keeping three ticks and no idempotency window removes what that allows (and no more)
    events = await authority.read_outbox(world_id=w, limit=1000)
    first_tick = next(e["occurred_at"] for e in events if e["event_type"] == "applied")
    projected = max(e["event_seq"] for e in events if e["occurred_at"] <= first_tick)
    await authority.acknowledge_outbox(world_id=w, up_to_seq=projected)
    clock.advance(10)
    pruned = await authority.prune(world_id=w, keep_ticks=3, idempotency_window_ms=0)
    assert pruned["ticks"] > 0 and pruned["commands"] > 0, pruned


async def snapshot(authority) -> str:
    """Everything the parity suite compares, as one canonical text."""
    state: dict = {"listed": await authority.list_worlds()}
    for world_id in WORLDS:
        state[world_id] = {
            "info": await authority.world_info(world_id=world_id),
            "records": await authority.history(world_id=world_id, limit=1000),
            "manifests": await authority.manifests(world_id=world_id, limit=1000),
            "outbox": await authority.read_outbox(world_id=world_id, limit=1000),
            "state": await authority.load_state(world_id=world_id),
        }
    # the state a runner loads: live components, re-encoded (floats such as -0.0 and 2.0 must survive the trip)
    inspector = Runtime(authority, owner="inspector")
    world = await inspector.worlds.get(WORLDS[0])
    state[WORLDS[0]]["loaded"] = [
        [entity_id, [ComponentValue.from_component(c).model_dump(mode="json") for c in components.values()]]
        for entity_id, components in sorted(world.state.items())
    ]
    return canonical_json(state)

