"""Forks (docs/ledger.md, "Forks") on every authority that has them: a fork of a world at tick T,
then the same commands as the source, publishes the same manifests, outbox events and state as
the source from T on (the same bytes, but for what names the world: its id, in error texts too, the
commit token that digests it, its writer epoch, and the events' numbers, which in the fork follow
its copies' admissions); the source is untouched; a `world_forked` event on both names the
other. On the Durable Object authorities the fork is a new object copied page by page from the
source's (docs/ledger.md, "Forks on the Durable Object"): the same results."""

import json

import pytest

from archetype.commands import TickNotRetainedError
from archetype.commands.errors import WorldExistsError
from archetype.world import Despawn, ForkWorld, Spawn, Update
from tests.component_modules.alpha import Health, Position
from tests.component_modules.evolved import Vitality
from tests.conformance.helpers import at, outbox


def commands(world_id: str, first_tick: int, ids: list[int]) -> list[tuple]:
    """The same round for any world: spawns, updates, a despawn and a rejection, over four ticks."""
    return [
        (Spawn(world_id=world_id, components=[Health(hp=70), Position(x=0.5, y=-0.0)]), at(first_tick), "s1"),
        (Update(world_id=world_id, entity_id=ids[0], components=[Health(hp=-1)]), at(first_tick + 1), "u1"),
        (Despawn(world_id=world_id, entity_id=ids[1]), at(first_tick + 1, priority=-1), "d1"),
        (Despawn(world_id=world_id, entity_id=10**9), at(first_tick + 2), "missing"),
        (Spawn(world_id=world_id, components=[Health(hp=71)]), at(first_tick + 3), "s2"),
    ]


async def source_world(rt, world_id):
    world = await rt.worlds.get(world_id)
    await world.ensure_entity_ids(8)
    async with world.lock:
        ids = world.atomically(lambda: [world.spawn([Health(hp=i), Position(x=float(i), y=1.0)]) for i in range(6)])
    for tick in range(3):
        await rt.dispatcher.defer(Update(world_id=world_id, entity_id=ids[tick], components=[Health(hp=100 + tick)]),
                                  at(tick), command_id=f"before-{tick}")  # fmt: skip
        await world.step()
    # scheduled after the fork's tick, open at it: copied by a fork with its open commands
    await rt.dispatcher.defer(Update(world_id=world_id, entity_id=ids[5], components=[Health(hp=55)]), at(4), command_id="later")
    return world, ids


def comparable_manifest(manifest):
    """A manifest as text, the world's id (in error texts too) written `<world>`; without the commit
    token (which digests the world's id) and the writer epoch (the runners that wrote each)."""
    kept = {k: v for k, v in manifest.items() if k not in ("commit_token", "writer_epoch")}
    return json.dumps(kept, sort_keys=True).replace(manifest["world_id"], "<world>")


def comparable_event(event):
    """An event as text, the world's id written `<world>`, without its number (a fork's events
    number after its copies' admissions)."""
    kept = {k: v for k, v in event.items() if k not in ("event_seq", "event_id")}
    return json.dumps(kept, sort_keys=True).replace(event["world_id"], "<world>")


async def read_at(authority, world_id, tick):
    page = await authority.read_state(world_id=world_id, tick=tick, limit=10_000)
    assert page["next_after"] is None
    return page["sections"]


async def test_a_fork_then_the_same_commands_publishes_what_the_source_does(rt, make_runtime, world_id, authority):
    world, ids = await source_world(rt, world_id)
    fork_at = world.tick
    fork = ForkWorld(world_id=world_id, at_tick=fork_at, fork_world_id="w-fork", name="fork", with_open_commands=True)
    before = await authority.world_info(world_id=world_id), await outbox(authority, world_id)
    assert await rt.dispatcher.apply(fork) == "w-fork"
    assert await rt.dispatcher.apply(fork) == "w-fork"  # the same fork again
    info = await authority.world_info(world_id="w-fork")
    assert (info["tick_head"], info["tick_mode"], info["writer_epoch"]) == (fork_at, "lockstep", 0)
    assert info["next_sequence"] == before[0]["next_sequence"] and info["next_entity_id"] == before[0]["next_entity_id"]
    # the source is untouched but for its world_forked event
    events = await outbox(authority, world_id)
    assert events[:-1] == before[1] and await authority.world_info(world_id=world_id) == {
        **before[0], "next_event_seq": before[0]["next_event_seq"] + 1}
    forked, = [e for e in await outbox(authority, "w-fork") if e["event_type"] == "world_forked"]
    assert forked["command_id"] == events[-1]["command_id"] == "world-fork/w-fork"
    assert {k: v for k, v in forked.items() if k not in ("world_id", "event_id")} == {
        k: v for k, v in events[-1].items() if k not in ("world_id", "event_id")}
    assert await read_at(authority, "w-fork", fork_at) == await read_at(authority, world_id, fork_at)
    copy = await authority.command(world_id="w-fork", command_id="later")
    original = await authority.command(world_id=world_id, command_id="later")
    assert (copy["sequence"], copy["status"]) == (original["sequence"], "PENDING")
    assert copy["payload"] == original["payload"].replace(f'"world_id":"{world_id}"', '"world_id":"w-fork"')
    assert copy["digest"] != original["digest"]  # its identity is the fork's
    assert await authority.command(world_id="w-fork", command_id="before-2") is None  # settled by the fork's tick

    # both worlds, each loaded afresh, run the same commands
    fresh = make_runtime("runner-b")
    for each in (world_id, "w-fork"):
        for op, options, command_id in commands(each, fork_at + 1, ids):
            await fresh.dispatcher.defer(op, options, command_id=command_id)
        runner = await fresh.worlds.get(each)
        for _ in range(5):
            await runner.step()
    head = (await authority.world_info(world_id=world_id))["tick_head"]
    assert head == fork_at + 5 == (await authority.world_info(world_id="w-fork"))["tick_head"]
    source_manifests = [m for m in await authority.manifests(world_id=world_id, limit=100) if m["tick"] > fork_at]
    fork_manifests = await authority.manifests(world_id="w-fork", limit=100)
    assert [comparable_manifest(m) for m in fork_manifests] == [comparable_manifest(m) for m in source_manifests]
    assert sum(len(m["settlements"]) for m in fork_manifests) == 6  # the copied command and the round
    after_fork = [comparable_event(e) for e in await outbox(authority, world_id) if e["event_seq"] > forked["event_seq"]]
    fork_events = [comparable_event(e) for e in await outbox(authority, "w-fork") if e["event_seq"] > forked["event_seq"]]
    assert fork_events[:1] and '"command_id": "later"' in fork_events[0]  # the copy's admission
    assert fork_events[1:] == after_fork
    for tick in range(fork_at, head + 1):
        assert await read_at(authority, "w-fork", tick) == await read_at(authority, world_id, tick), tick
    assert (await authority.load_state(world_id="w-fork"))["entities"] == (await authority.load_state(world_id=world_id))["entities"]


async def test_a_fork_at_a_past_tick_holds_the_state_of_that_tick(rt, world_id, authority):
    world, _ = await source_world(rt, world_id)
    past = world.tick - 1
    await rt.dispatcher.apply(ForkWorld(world_id=world_id, at_tick=past, fork_world_id="w-past", name="past"))
    assert await read_at(authority, "w-past", past) == await read_at(authority, world_id, past)
    assert await read_at(authority, "w-past", past) != await read_at(authority, world_id, world.tick)
    with pytest.raises(TickNotRetainedError):  # the fork's own history starts at its tick
        await authority.read_state(world_id="w-past", tick=past - 1)
    assert [c["name"] for c in (await authority.components(world_id="w-past"))["components"]] == [
        c["name"] for c in (await authority.components(world_id=world_id))["components"]]
    assert await authority.history(world_id="w-past") == []  # without its open commands: none
    with pytest.raises(WorldExistsError):  # another fork under that id
        await rt.dispatcher.apply(ForkWorld(world_id=world_id, at_tick=past - 1, fork_world_id="w-past", name="past"))
    with pytest.raises(TickNotRetainedError):
        await rt.dispatcher.apply(ForkWorld(world_id=world_id, at_tick=world.tick + 1, fork_world_id="w-late", name="late"))


async def test_a_fork_copies_what_the_source_holds_checked_against_its_own_migrations(rt, make_runtime, world_id,
                                                                                      authority, clock):  # fmt: skip
    """A copy is admitted as the source holds it now (a migrated payload copied migrated, its identity
    computed from it: no migrated_digest), and its component check is the fork's: the source's schemas
    superseded only by the migrations of ticks up to the fork's, so a fork before a migration copies
    a command that still names the type it superseded (found by the reference model, 2026-12-02)."""
    world, _ = await source_world(rt, world_id)  # tick head 2; "later" (an update of Health) open for tick 4
    await rt.dispatcher.defer(Spawn(world_id=world_id, components=[Health(hp=9)]), at(3), command_id="settles")
    clock.advance(1)  # admitted before tick 3 published, so open at tick 2
    await world.step()  # tick 3 applies "settles": settled, it keeps its Health payload
    migrator = make_runtime("migrator")
    migrator.worlds.migrations.declare("Health", Health.component_fingerprint(), Vitality, lambda data: {"hp": data["hp"]})
    await migrator.worlds.get(world_id)  # migrates Health at its load, at tick 3: "later" now names Vitality
    names = {c: json.loads((await authority.command(world_id=world_id, command_id=c))["payload"])["components"][0]["name"]
             for c in ("later", "settles")}  # fmt: skip
    assert names == {"later": "Vitality", "settles": "Health"}

    for fork_id, at_tick, copied in (("w-before", 2, {"later", "settles"}), ("w-after", 3, {"later"})):
        fork = ForkWorld(world_id=world_id, at_tick=at_tick, fork_world_id=fork_id, name=fork_id, with_open_commands=True)
        assert await rt.dispatcher.apply(fork) == fork_id
        copies = {c["command_id"]: c for c in await authority.history(world_id=fork_id)}
        assert set(copies) == copied, fork_id
        for command_id, copy in copies.items():
            original = await authority.command(world_id=world_id, command_id=command_id)
            assert copy["payload"] == original["payload"].replace(f'"world_id":"{world_id}"', f'"world_id":"{fork_id}"')
            assert copy["migrated_digest"] is None and copy["status"] == "PENDING", (fork_id, copy)
            assert rt.scheduler.record(copy).problem is None  # its identity is computed from the payload it holds
        migrations = (await authority.components(world_id=fork_id))["migrations"]
        assert len(migrations) == (at_tick >= 3), fork_id  # the fork's own: those of ticks up to its tick
