"""A fork on the Durable Object is a new object copied page by page from the source's
(docs/ledger.md, "Forks on the Durable Object"): a copy interrupted after any page, the objects
evicted meanwhile, completes on the same call again with the fork an uninterrupted copy makes;
until then the fork's object refuses every call, typed; retention keeps the state a fork being
copied reads. On the stand-in runtime, with pages of one row so that a fork has many."""

from __future__ import annotations

import pytest

from archetype.commands import ledger_forks
from archetype.commands.errors import TickNotRetainedError, WorldForkingError
from archetype.commands.port import ManualClock
from archetype.runtime import Runtime
from archetype.world import CreateWorld, Spawn
from durable_world import DurableObjectAuthority, WorldObject
from durable_world.edge import TICK_INTERVAL_MS
from durable_world.world_object import DELIVERY_DELAY_MS
from tests.component_modules.alpha import Health
from tests.conformance.helpers import at, outbox
from tests.conformance.test_forks import comparable_event, read_at, source_world
from tests.server import game
from tests.server.game import IDLE_PREFIX
from tests.support.durable_object_standin import world_namespace

pytestmark = pytest.mark.timeout(120)
SOURCE = "w-conf"


class CopyFault(RuntimeError):
    pass


@pytest.fixture
async def edge(tmp_path, monkeypatch):
    monkeypatch.setattr(ledger_forks, "FORK_PAGE_ROWS", 1)
    namespace = world_namespace(tmp_path / "objects", ManualClock())
    authority = DurableObjectAuthority(namespace)
    rt = Runtime(authority, owner="runner-a", lease_ms=60_000)
    await rt.dispatcher.apply(CreateWorld(name="source", world_id=SOURCE))
    world, _ = await source_world(rt, SOURCE)
    yield namespace, authority, world, rt
    namespace.close()


def fail_writes_after(monkeypatch, pages: int) -> list[int]:
    """Make the fork's object throw at its page write after `pages` written; answers the count."""
    written = [0]
    write = WorldObject.fork_write

    async def faulty(self, args=None):
        if written[0] == pages:
            raise CopyFault("the object died between two pages")
        written[0] += 1
        return await write(self, args)

    monkeypatch.setattr(WorldObject, "fork_write", faulty)
    return written


async def the_fork(authority, world_id):
    """What a fork is, but for its own id and its event numbers (a later fork's follow the earlier
    fork's world_forked event on the source): its row, state, schemas, commands and events."""
    info = await authority.world_info(world_id=world_id)
    tick = info["tick_head"]
    commands = await authority.history(world_id=world_id)
    return ({k: info[k] for k in ("tick_head", "next_sequence", "next_entity_id", "tick_mode", "status")},
            await read_at(authority, world_id, tick), await authority.components(world_id=world_id),
            [(c["sequence"], c["command_id"], c["status"], c["scheduled_tick"]) for c in commands],
            [comparable_event(e) for e in await outbox(authority, world_id)])  # fmt: skip


@pytest.mark.parametrize("pages", [0, 1, 4])
async def test_an_interrupted_fork_completes_on_retry_as_an_uninterrupted_one(edge, monkeypatch, pages):
    namespace, authority, world, rt = edge
    args = {"source_world_id": SOURCE, "at_tick": world.tick, "name": "fork", "with_open_commands": True}
    written = fail_writes_after(monkeypatch, pages)
    with pytest.raises(Exception, match="between two pages"):
        await authority.fork_world(world_id="w-fork", **args)
    assert written[0] == pages
    # the copy in progress is no world: every call on it is refused, typed, and none makes one
    for call in (authority.world_info(world_id="w-fork"), authority.create_world(world_id="w-fork", name="other"),
                 authority.acquire_writer(world_id="w-fork"), authority.read_state(world_id="w-fork"),
                 rt.dispatcher.defer(Spawn(world_id="w-fork", components=[Health(hp=1)]), at(9), command_id="in")):  # fmt: skip
        with pytest.raises(WorldForkingError):
            await call
    assert "w-fork" not in [w["world_id"] for w in await authority.list_worlds()]
    namespace.evict("w-fork")
    namespace.evict(SOURCE)
    monkeypatch.undo()
    monkeypatch.setattr(ledger_forks, "FORK_PAGE_ROWS", 1)
    written = fail_writes_after(monkeypatch, 10**6)  # counts only
    resumed = await authority.fork_world(world_id="w-fork", **args)
    rest, written[0] = written[0], 0
    whole = await authority.fork_world(world_id="w-whole", **args)
    assert pages + rest == written[0] > 4  # pages of one row each; the retry wrote only those not written
    assert resumed["world_id"] == "w-fork" and whole["world_id"] == "w-whole"
    assert await the_fork(authority, "w-fork") == await the_fork(authority, "w-whole")
    numbers = [(await authority.world_info(world_id=w))["next_event_seq"] for w in ("w-fork", "w-whole")]
    assert numbers[1] == numbers[0] + 1
    assert [w["world_id"] for w in await authority.list_worlds()] == [SOURCE, "w-fork", "w-whole"]
    forked = [e["command_id"] for e in await outbox(authority, SOURCE) if e["event_type"] == "world_forked"]
    assert forked == ["world-fork/w-fork", "world-fork/w-whole"]  # one each: the retry fixed no second plan
    assert await authority.fork_world(world_id="w-fork", **args) == await authority.world_info(world_id="w-fork")


async def test_retention_keeps_the_state_a_fork_being_copied_reads(edge, monkeypatch):
    namespace, authority, world, rt = edge
    args = {"source_world_id": SOURCE, "at_tick": world.tick - 2, "name": "old"}
    fail_writes_after(monkeypatch, 1)
    with pytest.raises(Exception, match="between two pages"):
        await authority.fork_world(world_id="w-old", **args)
    for _ in range(3):
        await world.step()
    await authority.prune(world_id=SOURCE, keep_ticks=1, idempotency_window_ms=0)
    expected = await read_at(authority, SOURCE, world.tick - 5)  # still retained: the fork pins it
    monkeypatch.undo()
    await authority.fork_world(world_id="w-old", **args)
    assert await read_at(authority, "w-old", world.tick - 5) == expected
    await authority.prune(world_id=SOURCE, keep_ticks=1, idempotency_window_ms=0)  # released: the floor moves
    with pytest.raises(TickNotRetainedError):
        await authority.read_state(world_id=SOURCE, tick=world.tick - 5)


async def test_the_fork_arms_its_own_alarm_for_its_events_and_its_copied_commands(tmp_path):
    """Activation appends the fork's events and opens its copies: the fork's object arms its alarm
    (delivery; an edge-hosted fork's step), and the alarm applies the copied command."""
    clock = ManualClock()
    namespace = world_namespace(tmp_path / "objects", clock, modules=(game,))
    authority = DurableObjectAuthority(namespace)
    source, fork = f"{IDLE_PREFIX}source", f"{IDLE_PREFIX}fork"
    rt = Runtime(authority, owner="runner-a", lease_ms=60_000)
    await rt.dispatcher.apply(CreateWorld(name="source", world_id=source))
    await rt.dispatcher.defer(Spawn(world_id=source, components=[Health(hp=1)]), at(1), command_id="later")
    await authority.fork_world(source, -1, fork, "fork", with_open_commands=True)
    assert namespace.alarm_time(fork) is not None and namespace.alarm_time(fork) <= clock.now_ms() + DELIVERY_DELAY_MS
    for _ in range(8):
        clock.advance(TICK_INTERVAL_MS)
        await namespace.run_alarm(fork)
    settled = await authority.command(world_id=fork, command_id="later")
    assert settled["status"] == "APPLIED", settled["last_error"]
    namespace.close()
