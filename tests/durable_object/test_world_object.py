"""The real WorldObject, hosted by the Durable Object stand-in: RPC, typed errors, audit delivery."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from archetype.api.errors import InvalidRequestError
from archetype.canonical import canonical_json
from archetype.commands import (
    CommandConflictError,
    CommandStatus,
    DurableOptions,
    InvalidCommandError,
    StaleWriterError,
    UnregisteredOperationError,
    WorldExistsError,
    WorldNotFoundError,
    ledger_sql,
)
from archetype.commands.ledger import LEDGER_METHODS
from archetype.commands.port import ManualClock
from archetype.commands.scheduler import schema_row
from archetype.runtime import Runtime
from archetype.world import CreateWorld, QueryComponents, Spawn, Step
from durable_world import DurableObjectAuthority, delivery
from durable_world.delivery import MAX_BATCH_BYTES, MAX_BATCH_MESSAGES, RETRY_DELAY_MS, queue_batches
from durable_world.directory import DIRECTORY
from durable_world.world_object import DELIVERY_DELAY_MS
from local_catalog import open_local_authority
from tests.component_modules.alpha import Health, Position
from tests.server import game
from tests.support.durable_object_standin import FakeQueue, world_namespace
from tests.support.worker_http import worker_over_http
from tests.support.workerd.engine import workerd_sql_engines

pytestmark = pytest.mark.timeout(60)

WORLD = "w-do"


def value(cls, **data) -> dict:
    return {"name": cls.__name__, "fingerprint": cls.component_fingerprint(), "data": data}


def command(command_id, *, tick=0, operation="spawn", reserved=None, max_attempts=3, payload='{"n":1}', request=None):
    return {
        "command_id": command_id, "schema_version": 1, "scheduled_tick": tick, "priority": 0,
        "operation": operation, "payload": payload, "principal": "alice", "origin": "gateway",
        "max_attempts": max_attempts, "reserved_entity_id": reserved, "request_digest": request,
    }  # fmt: skip


async def ledger_script(authority, clock):
    """Call every routable ledger method once or more (successes and typed errors); return the
    transcript of (method, result-or-error-code)."""
    transcript = []

    async def call(method, **args):
        try:
            result = await authority.rpc(method, args)
        except InvalidRequestError:  # the HTTP edge refused a number out of its bounds before the ledger did
            result = {"raised": InvalidCommandError.__name__, "code": InvalidCommandError.code}
        except Exception as exc:
            result = {"raised": type(exc).__name__, "code": getattr(exc, "code", None)}
        transcript.append((method, result))
        clock.advance(7)
        return result

    await call("create_world", world_id=WORLD, name="durable")
    await call("create_world", world_id=WORLD, name="durable")  # identical retry
    await call("create_world", world_id=WORLD, name="other")  # world_exists
    await call("world_info", world_id=WORLD)
    await call("world_info", world_id="w-missing")  # world_not_found
    host = (await call("claim_world", world_id=WORLD, owner="host", lease_ms=1_000))["writer_epoch"]
    await call("claim_world", world_id=WORLD, owner="other-host", lease_ms=1_000)  # world_lease_held
    await call("renew_world", world_id=WORLD, owner="host", writer_epoch=host, lease_ms=1_000)
    await call("release_world", world_id=WORLD, owner="other-host", writer_epoch=host)  # stale_writer: not the host
    await call("release_world", world_id=WORLD, owner="host", writer_epoch=host)
    await call("hosted_worlds", owner="host")
    await call("register_runner", runner_id="r-1", instance="host-a", lease_ms=1_000)
    await call("register_runner", runner_id="r-1", instance="host-b", lease_ms=1_000)  # runner_id_held
    await call("register_runner", runner_id="r-1", instance="host-a", lease_ms=1_000)  # its heartbeat
    await call("live_runners")
    await call("leave_runner", runner_id="r-1", instance="host-a")
    await call("live_runners")
    epoch = (await call("acquire_writer", world_id=WORLD))["writer_epoch"]
    await call("reserve_entity_ids", world_id=WORLD, count=3)
    reserve = {"world_id": WORLD, "command_id": "c-spawn", "principal": "alice", "scheduled_tick": 0}
    reserved = await call("reserve_spawn", **reserve, request_digest="d1")
    await call("reserve_spawn", **reserve, request_digest="d2")  # conflict
    spawn = command("c-spawn", operation="spawn_reserved", reserved=reserved, request="d1")
    batch = [spawn, command("c-2"), command("c-3", max_attempts=1)]
    await call("admit", world_id=WORLD, commands=batch, quota=10)
    await call("admit", world_id=WORLD, commands=batch[:1], quota=10)  # replay
    await call("reserve_spawn", **{**reserve, "command_id": "c-spawn-2"}, request_digest="d3", quota=3)  # quota_exceeded
    await call("pending_worlds")
    await call("admit", world_id=WORLD, commands=[command("c-2", payload='{"n":2}')])  # conflict
    await call("admit", world_id=WORLD, commands=[command("c-4"), command("c-5")], quota=4)  # quota_exceeded
    forged = command("c-forged", operation="spawn_reserved", reserved=reserved, request="d1")
    await call("admit", world_id=WORLD, commands=[forged])  # reservation_not_owned
    lease = {"world_id": WORLD, "owner": "runner", "writer_epoch": epoch, "tick": 0, "limit": 10, "lease_ms": 1_000}
    await call("lease", **lease, session="s1")
    await call("lease", **lease, session="s2")  # the runner restarted: its leases come back, suspect
    await call("guard", world_id=WORLD, owner="runner", session="s2", writer_epoch=epoch, sequence=1)
    await call("guard", world_id=WORLD, owner="intruder", session="s9", writer_epoch=epoch, sequence=2)  # lease_lost
    settlements = [
        {"sequence": 1, "command_id": "c-spawn", "outcome": "applied", "error": None},
        {"sequence": 2, "command_id": "c-2", "outcome": "rejected", "error": "ValueError: bad"},
        {"sequence": 3, "command_id": "c-3", "outcome": "failed", "error": "ConnectionError"},
    ]  # fmt: skip
    manifest = {"world_id": WORLD, "tick": 0, "writer_epoch": epoch, "settlements": settlements,
                "written_runs": [[reserved, reserved]], "commit_token": "t0"}  # fmt: skip
    writes = {"snapshot": False, "chunks": [f'[[{reserved},[{{"name":"Position","value":{{"x":1.5,"y":2}}}}]]]']}
    stale = {**manifest, "writer_epoch": epoch - 1}
    swapped = {**manifest, "settlements": settlements[::-1]}
    failure = {"world_id": WORLD, "owner": "runner", "session": "s2", "tick": 0, "error": "RuntimeError: hook"}
    await call("record_tick_failure", **failure, writer_epoch=epoch - 1)  # stale_writer
    await call("record_tick_failure", **failure, writer_epoch=epoch, release=False)  # STALLED, leases kept
    await call("record_tick_failure", **failure, writer_epoch=epoch, release=False)  # counted, no second event
    await call("retry_world", world_id=WORLD)  # attempts back to 0, world_retry_requested
    await call("retry_world", world_id=WORLD)  # asked twice: nothing more
    await call("retry_world", world_id="nowhere")  # world_not_found
    await call("publish", world_id=WORLD, owner="runner", session="s2", manifest=stale, writes=writes)  # stale_writer
    await call("publish", world_id=WORLD, owner="runner", session="s1", manifest=manifest, writes=writes)  # lease_lost
    await call("publish", world_id=WORLD, owner="runner", session="s2", manifest=swapped, writes=writes)  # out of order
    await call("publish", world_id=WORLD, owner="runner", session="s2", manifest=manifest, writes=writes)
    await call("publish", world_id=WORLD, owner="runner", session="s2", manifest=manifest, writes=writes)  # replay
    redrive = {"world_id": WORLD, "command_id": "c-3", "scope": "alice"}
    await call("redrive", **redrive)  # c-3 dead-lettered: a new command
    await call("redrive", **redrive)  # replay
    await call("redrive", **redrive, new_command_id="c-3-other")  # already_redriven
    await call("redrive", world_id=WORLD, command_id="c-2", scope="alice")  # not_dead_lettered
    await call("redrive", world_id=WORLD, command_id="c-3")  # command_not_found (the trusted scope)
    await call("lease", **{**lease, "tick": 1}, session="s2")
    await call("release", world_id=WORLD, owner="runner", session="s2", writer_epoch=epoch)
    await call("release", world_id=WORLD, owner="runner", session="s2", writer_epoch=epoch - 1)  # stale_writer
    await call("load_state", world_id=WORLD)
    await call("load_state", world_id=WORLD, after_entity_id=reserved)
    await call("command", world_id=WORLD, command_id="c-spawn", scope="alice")
    await call("command", world_id=WORLD, command_id="c-spawn")  # the trusted scope has no such command
    await call("command", world_id=WORLD, command_id="c-spawn", scope=None)  # alice's: the one of any scope
    await call("command", world_id=WORLD, command_id="c-none", scope=None)  # no scope has one
    await call("commands_by_id", world_id=WORLD, command_ids=["c-3", "c-spawn", "c-none"], scope="alice")
    await call("commands_by_id", world_id=WORLD, command_ids=[])  # invalid_command
    await call("history", world_id=WORLD)
    await call("history", world_id=WORLD, status="REJECTED", limit=5)
    await call("history", world_id=WORLD, scope="bob")
    await call("manifests", world_id=WORLD)
    await call("read_outbox", world_id=WORLD, limit=3)
    await call("read_outbox_columns", world_id=WORLD, limit=3)
    await call("acknowledge_outbox", world_id=WORLD, up_to_seq=2)
    await call("acknowledge_outbox", world_id=WORLD, up_to_seq=999)  # invalid_command
    await call("watermark", world_id=WORLD)
    await call("next_due_tick", world_id=WORLD)
    await call("prune", world_id=WORLD, keep_ticks=0)  # invalid_command
    await call("prune", world_id=WORLD, keep_ticks=1, idempotency_window_ms=0)
    await call("read_outbox", world_id=WORLD)
    await call("record_components", world_id=WORLD, components=[schema_row(Position), schema_row(Health)])
    await call("record_components", world_id=WORLD, components=[{**schema_row(Health), "fingerprint": "0" * 64}])  # unsupported
    health = canonical_json({"components": [value(Health, hp=1)], "operation": "spawn", "world_id": WORLD})
    await call("admit", world_id=WORLD, commands=[command("c-h", tick=5, payload=health)])
    await call("admit", world_id=WORLD, commands=[command("c-bad", payload=health.replace('"hp":1', '"hp":"x"'))])  # invalid
    await call("admit", world_id=WORLD, commands=[command("c-unknown", payload=health.replace(Health.component_fingerprint(), "0" * 64))])
    migration = {"name": "Position", "from_fingerprint": Health.component_fingerprint(),
                 "to_fingerprint": Position.component_fingerprint()}  # fmt: skip
    healthy = reserved + 1  # a published entity naming the old type, in a delta over the first tick's
    delta = {"snapshot": False, "chunks": [f"[[{healthy},{canonical_json([value(Health, hp=1)])}]]"]}
    tick1 = {"world_id": WORLD, "tick": 1, "writer_epoch": epoch, "settlements": [], "written_runs": [[healthy, healthy]],
             "commit_token": "t1"}  # fmt: skip
    await call("publish", world_id=WORLD, owner="runner", session="s2", manifest=tick1, writes=delta)
    await call("migrate_components", world_id=WORLD, writer_epoch=epoch, migration=migration, entities=[], commands=[])  # conflict
    moved = canonical_json({"components": [value(Position, x=1, y=0)], "operation": "spawn", "world_id": WORLD})
    sequence = (await call("command", world_id=WORLD, command_id="c-h", scope="alice"))["sequence"]
    rewrite = [{"sequence": sequence, "payload": moved}]
    entities = [{"entity_id": healthy, "components": canonical_json([value(Position, x=1, y=0)])}]
    await call("migrate_components", world_id=WORLD, writer_epoch=epoch, migration=migration, entities=entities, commands=rewrite)
    await call("migrate_components", world_id=WORLD, writer_epoch=epoch, migration=migration, entities=entities, commands=rewrite)  # replay
    await call("load_state", world_id=WORLD)  # the migrated entity, overlaid as a delta
    await call("read_state", world_id=WORLD, component_types=["Position"], limit=1)
    await call("read_state", world_id=WORLD, entity_ids=[healthy], component_types=[f"Position:{'0' * 64}"])  # unknown_component
    await call("read_state", world_id=WORLD, limit=0)  # invalid_command
    await call("components", world_id=WORLD)
    await call("create_world", world_id="w-other", name="other")
    await call("list_worlds")
    await call("destroy", world_id=WORLD)
    await call("admit", world_id=WORLD, commands=[command("c-late")])  # world_closing
    await call("world_info", world_id=WORLD)
    await call("list_worlds")
    return transcript


@pytest.fixture
def queue():
    return FakeQueue()


@pytest.fixture
def namespace(tmp_path, clock, queue):
    ns = world_namespace(tmp_path / "objects", clock, queue=queue)
    yield ns
    ns.close()


@pytest.fixture
def authority(namespace):
    return DurableObjectAuthority(namespace)


async def local_transcript(directory):
    local_clock = ManualClock()
    local = open_local_authority(directory, clock=local_clock)
    try:
        return await ledger_script(local, local_clock)
    finally:
        await local.close()


async def test_every_ledger_method_answers_like_the_local_authority(tmp_path, authority, clock):
    expected = await local_transcript(tmp_path / "local")
    remote = await ledger_script(authority, clock)

    assert remote == expected
    called = {method for method, _ in remote}
    assert called == set(LEDGER_METHODS)
    codes = {r["code"] for _, r in remote if isinstance(r, dict) and "raised" in r}
    assert codes == {"world_exists", "world_not_found", "command_conflict", "quota_exceeded", "stale_writer",
                     "lease_lost", "invalid_command", "world_closing", "reservation_not_owned", "command_not_found",
                     "not_dead_lettered", "already_redriven", "unsupported_schema", "invalid_component_data",
                     "unknown_component", "migration_conflict", "world_lease_held", "runner_id_held"}  # fmt: skip


async def test_the_worker_over_http_answers_like_the_local_authority(tmp_path):
    expected = await local_transcript(tmp_path / "local")
    clock = ManualClock()
    async with worker_over_http(tmp_path / "objects", clock) as authority:
        assert await ledger_script(authority, clock) == expected


async def test_worlds_are_listed_through_the_directory_from_their_own_objects(namespace, authority, clock):
    for world_id in ("w-b", "w-a", "w-c"):
        await authority.create_world(world_id, world_id.upper())
    await authority.destroy("w-c")
    clock.advance(5)
    await Runtime(authority, owner="r").dispatcher.apply(Step(world_id="w-a"))
    listed = await authority.list_worlds()
    assert [(w["world_id"], w["status"], w["tick_head"]) for w in listed] == [
        ("w-a", "ACTIVE", 0), ("w-b", "ACTIVE", -1), ("w-c", "DESTROYED", -1)
    ]  # fmt: skip
    assert listed == [await authority.world_info(w["world_id"]) for w in listed]  # each row is its object's own
    with pytest.raises(UnregisteredOperationError):
        await authority.rpc("drop_tables", {"world_id": WORLD})


async def test_a_world_whose_creation_failed_is_registered_but_never_listed(namespace, authority):
    await authority.create_world("w-1", "first")
    with pytest.raises(WorldExistsError):
        await authority.create_world("w-1", "another name")
    stub = namespace.getByName(DIRECTORY)
    assert (await stub.directory_register({"world_id": "w-ghost"}))["ok"]  # as if its creation then failed
    assert [w["world_id"] for w in await authority.list_worlds()] == ["w-1"]
    assert (await stub.directory_world_ids({"after": ""}))["result"] == ["w-1", "w-ghost"]
    assert (await stub.directory_register({"world": 1}))["error"]["code"] == "invalid_command"


async def test_the_directory_pages_past_its_limit(namespace, authority, monkeypatch):
    from durable_world import directory

    monkeypatch.setattr(directory, "LIST_LIMIT", 2)
    for index in range(5):
        await authority.create_world(f"w-{index}", "paged")
    assert [w["world_id"] for w in await authority.list_worlds()] == [f"w-{i}" for i in range(5)]


async def test_domain_errors_come_back_as_coded_results(namespace):
    stub = namespace.getByName(WORLD)
    assert await stub.world_info({"world_id": WORLD}) == {
        "ok": False,
        "error": {"code": "world_not_found", "message": f"world {WORLD!r} does not exist"},
    }
    bad = await stub.create_world({"world_id": WORLD, "colour": "red"})
    assert bad["ok"] is False and bad["error"]["code"] == "invalid_command"
    assert (await stub.watermark("not an object"))["error"]["code"] == "invalid_command"


async def test_typed_errors_are_raised_again_by_the_authority(authority):
    with pytest.raises(WorldNotFoundError):
        await authority.world_info(world_id=WORLD)
    await authority.create_world(world_id=WORLD, name="durable")
    await authority.acquire_writer(world_id=WORLD)
    with pytest.raises(StaleWriterError):
        await authority.lease(WORLD, "r", "s", 0, 0, 1, 1)
    await authority.admit(world_id=WORLD, commands=[command("c-1")])
    with pytest.raises(CommandConflictError):
        await authority.admit(world_id=WORLD, commands=[command("c-1", tick=5)])


async def test_a_runtime_steps_a_world_through_the_durable_object(authority):
    rt = Runtime(authority, owner="runner-do", lease_ms=1_000, origin="gateway")
    world_id = await rt.dispatcher.apply(CreateWorld(name="remote", world_id=WORLD))
    spawn = Spawn.from_components(world_id=world_id, components=[Position(x=1, y=2)])
    spawned = await rt.dispatcher.defer_spawn(spawn, DurableOptions(tick=0), command_id="s-1")
    assert await rt.dispatcher.apply(Step(world_id=world_id)) == 1
    found = await rt.dispatcher.apply(QueryComponents(world_id=world_id, component_types=[Position]))
    assert [(entity, components[0].x) for entity, components in found] == [(spawned.entity_id, 1.0)]
    (record,) = await rt.scheduler.history(world_id)
    assert (record.command_id, record.status, record.applied_tick) == ("s-1", CommandStatus.APPLIED, 0)

    resumed = Runtime(authority, owner="runner-2", lease_ms=1_000)  # another runner resumes from the object
    found = await resumed.dispatcher.apply(QueryComponents(world_id=world_id, component_types=[Position]))
    assert [entity for entity, _ in found] == [spawned.entity_id]


async def test_state_survives_eviction_of_the_object(namespace, authority):
    await authority.create_world(world_id=WORLD, name="durable")
    await authority.admit(world_id=WORLD, commands=[command("c-1")])
    namespace.evict(WORLD)
    assert [r["command_id"] for r in await authority.history(world_id=WORLD)] == ["c-1"]


# -- audit delivery --


async def test_event_writes_arm_the_alarm_and_reads_do_not(namespace, authority, clock):
    await authority.create_world(world_id=WORLD, name="durable")
    await authority.world_info(world_id=WORLD)
    assert namespace.alarm_time(WORLD) is None
    await authority.admit(world_id=WORLD, commands=[command("c-1")])
    assert namespace.alarm_time(WORLD) == clock.now_ms() + DELIVERY_DELAY_MS


async def test_alarm_sends_the_outbox_in_order_and_acknowledges_it(namespace, authority, queue):
    await authority.create_world(world_id=WORLD, name="durable")
    await authority.admit(world_id=WORLD, commands=[command(f"c-{i:03}") for i in range(250)])
    expected = await authority.read_outbox(world_id=WORLD, limit=1_000)

    assert await namespace.run_alarm(WORLD)
    assert [len(batch) for batch in queue.batches] == [100, 100, 50]
    assert queue.messages == expected
    assert (await authority.watermark(world_id=WORLD))["pending"] == 0
    assert await authority.read_outbox(world_id=WORLD) == []
    assert namespace.alarm_time(WORLD) is None


async def test_a_failed_send_is_retried_after_the_retry_delay_with_backoff_and_logged_once(
        namespace, authority, queue, clock, caplog):  # fmt: skip
    caplog.set_level(logging.INFO, logger="durable_world")
    await authority.create_world(world_id=WORLD, name="durable")
    await authority.admit(world_id=WORLD, commands=[command(f"c-{i:03}") for i in range(150)])
    real_send, attempts = queue.sendBatch, []

    async def counted(messages, options=None):
        attempts.append(clock.now_ms())
        await real_send(messages, options)

    queue.sendBatch = counted
    queue.fail_next(2)
    assert await namespace.run_alarm(WORLD)
    assert (queue.messages, len(attempts)) == ([], 1)
    assert (await authority.watermark(world_id=WORLD))["pending"] == 150
    assert namespace.alarm_time(WORLD) == clock.now_ms() + RETRY_DELAY_MS

    clock.advance(RETRY_DELAY_MS - 1)  # an alarm before the retry time (a tick's, say) sends nothing
    await namespace.instance(WORLD).alarm()
    assert len(attempts) == 1 and namespace.alarm_time(WORLD) == clock.now_ms() + 1
    clock.advance(1)
    assert await namespace.run_alarm(WORLD)
    assert len(attempts) == 2  # failed again: the next pause is twice as long
    assert namespace.alarm_time(WORLD) == clock.now_ms() + 2 * RETRY_DELAY_MS

    clock.advance(2 * RETRY_DELAY_MS)
    assert await namespace.run_alarm(WORLD)
    assert [m["command_id"] for m in queue.messages] == [f"c-{i:03}" for i in range(150)]
    assert (await authority.watermark(world_id=WORLD))["pending"] == 0
    streak = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "durable_world.world_object"]
    assert [level for level, _ in streak] == ["ERROR", "WARNING"], streak  # one line for the failures, one when it works
    assert "QueueError" in streak[0][1] and "after 2 failed" in streak[1][1]


async def test_a_send_that_never_answers_times_out_and_the_next_tick_runs(tmp_path, clock, monkeypatch):
    """A queue that takes the request and never answers held the alarm, and so an edge-hosted
    world's ticks, forever (seen on workerd: tick 0 for good); the send is bounded."""
    monkeypatch.setattr(delivery, "SEND_TIMEOUT_MS", 50)
    queue = FakeQueue()
    namespace = world_namespace(tmp_path / "objects", clock, queue=queue, modules=(game,))
    try:
        authority = DurableObjectAuthority(namespace)
        await authority.create_world(world_id="edge-hang", name="edge", tick_interval_ms=1_000)
        await authority.admit(world_id="edge-hang", commands=[command("c-1")])

        async def never_answers(messages, options=None):
            await asyncio.Event().wait()

        queue.sendBatch = never_answers
        clock.advance(1_000)
        await asyncio.wait_for(namespace.run_alarm("edge-hang"), timeout=30)
        assert (await authority.world_info(world_id="edge-hang"))["tick_head"] == 0
        assert (await authority.watermark(world_id="edge-hang"))["pending"] > 0  # kept for the retry
        assert namespace.alarm_time("edge-hang") == clock.now_ms() + 1_000  # the next tick, before the retry
    finally:
        namespace.close()


async def test_a_send_failing_midway_keeps_what_was_sent_acknowledged(namespace, authority, queue, clock):
    await authority.create_world(world_id=WORLD, name="durable")
    await authority.admit(world_id=WORLD, commands=[command(f"c-{i:03}") for i in range(150)])
    real_send = queue.sendBatch
    sends = 0

    async def second_send_fails(messages, options=None):
        nonlocal sends
        sends += 1
        if sends == 2:
            raise ConnectionError("queue unreachable")
        await real_send(messages, options)

    queue.sendBatch = second_send_fails
    await namespace.run_alarm(WORLD)
    assert len(queue.messages) == 100
    assert (await authority.watermark(world_id=WORLD))["pending"] == 50
    clock.advance(RETRY_DELAY_MS)
    await namespace.run_alarm(WORLD)
    assert [m["event_seq"] for m in queue.messages] == list(range(1, 151))  # nothing lost, nothing twice


async def test_events_written_while_a_send_is_in_flight_are_delivered_once(namespace, authority, queue):
    await authority.create_world(world_id=WORLD, name="durable")
    await authority.admit(world_id=WORLD, commands=[command("c-1")])
    world_object = namespace.instance(WORLD)
    real_send = queue.sendBatch

    async def send_while_an_admission_lands(messages, options=None):
        await real_send(messages, options)
        if len(queue.batches) == 1:
            # workerd opens the input gate while the send is in flight: another call runs meanwhile
            reply = await world_object.admit({"world_id": WORLD, "commands": [command("c-2")]})
            assert reply["ok"]

    queue.sendBatch = send_while_an_admission_lands
    while await namespace.run_alarm(WORLD):
        pass
    assert [(m["command_id"], m["event_seq"]) for m in queue.messages] == [("c-1", 1), ("c-2", 2)]
    assert (await authority.watermark(world_id=WORLD))["pending"] == 0


def test_batches_respect_the_byte_limit_too():
    events = [{"event_seq": i, "payload": "x" * 60_000} for i in range(10)]
    batches = queue_batches(events)
    assert [e["event_seq"] for b in batches for e in b] == list(range(10))
    assert all(sum(len(str(e)) for e in b) <= MAX_BATCH_BYTES and len(b) <= MAX_BATCH_MESSAGES for b in batches)
    assert [len(b) for b in batches] == [4, 4, 2]
    with pytest.raises(ValueError, match="queue message holds"):
        queue_batches([{"event_seq": 1, "payload": "x" * 130_000}])


# -- billing units --


async def test_admission_costs_the_same_statements_whatever_the_batch_size(namespace, authority):
    await authority.create_world(world_id=WORLD, name="durable")
    sql = namespace.storage(WORLD).sql

    async def admit(count, prefix):
        before = (sql.statements, sql.rows_written)
        await authority.admit(world_id=WORLD, commands=[command(f"{prefix}-{i}") for i in range(count)])
        return sql.statements - before[0], sql.rows_written - before[1]

    await admit(1, "first")  # arms the alarm (one watermark read); later admissions find it armed
    one_statements, one_rows = await admit(1, "one")
    many_statements, many_rows = await admit(90, "many")
    # bulk work goes through json_each(?): statements do not grow with the batch, rows do (a
    # command row per command; the batch's events are one outbox row, as one command's are)
    assert many_statements == one_statements
    assert many_rows - one_rows == 89



async def test_a_lease_writes_one_row_whatever_it_leases(namespace, authority):
    """Schema 17 (docs/storage.md, "Rows per command"): a lease is an entry of the world row's lease
    map, not a write of each leased command's row, so leasing 60 commands writes what leasing one does."""
    await authority.create_world(world_id=WORLD, name="durable")
    epoch = (await authority.acquire_writer(world_id=WORLD))["writer_epoch"]
    sql = namespace.storage(WORLD).sql

    async def lease(count, prefix, tick):
        await authority.admit(world_id=WORLD, commands=[command(f"{prefix}-{i}", tick=tick) for i in range(count)])
        before = sql.rows_written
        leased = await authority.lease(world_id=WORLD, owner="o", session="s", writer_epoch=epoch, tick=tick,
                                       limit=1_000, lease_ms=30_000)  # fmt: skip
        assert len(leased) == count + (tick == 1)  # the second lease renews the first's command
        return sql.rows_written - before

    assert await lease(1, "one", 0) == 1
    assert await lease(60, "many", 1) == 1

async def test_one_command_per_tick_writes_no_outbox_row(namespace, authority, queue, clock):
    """Schema 22 (docs/storage.md, "Schema version 22"): at one command per tick the settlement's
    event is written on the world row's outbox tail by the publication's write of that row, and the
    delivery's watermark write clears it: no outbox row is ever written, the delivery writes the
    watermark alone, and every event is delivered once, in order. (The `admitted` event is the
    command row: schema 21.)"""
    rt = Runtime(authority, owner="runner-do", lease_ms=30_000, origin="gateway")
    await rt.dispatcher.apply(CreateWorld(name="durable", world_id=WORLD))
    sql = namespace.storage(WORLD).sql
    port = namespace.instance(WORLD).ledger._port
    delivered: list[int] = []
    for tick in range(4):  # (tick 0's alarm also prunes, once)
        await rt.dispatcher.defer(Spawn(world_id=WORLD, components=[Position(x=0, y=tick)]), DurableOptions(tick=tick),
                                  command_id=f"c-{tick}")  # fmt: skip
        await rt.dispatcher.apply(Step(world_id=WORLD))
        ((first, events),) = port.execute("SELECT tail_first_seq, tail_events FROM worlds WHERE world_id = ?", (WORLD,))
        assert (first, [e[:2] for e in json.loads(events)]) == (2 * tick + 2, [[f"c-{tick}", "applied"]])
        before = sql.rows_written
        while await namespace.run_alarm(WORLD):
            pass
        if tick > 0:
            assert sql.rows_written - before == 1  # the watermark, the tail cleared with it
        assert [tuple(r) for r in port.execute("SELECT tail_events FROM worlds WHERE world_id = ?", (WORLD,))] == [(None,)]
        delivered = [m["event_seq"] for m in queue.messages]
        assert delivered == list(range(1, 2 * tick + 3))
        clock.advance(1_000)
    assert port.execute("SELECT 1 FROM outbox WHERE world_id = ?", (WORLD,)) == []
    assert [m["event_type"] for m in queue.messages] == ["admitted", "applied"] * 4
    assert [m["event_id"] for m in queue.messages] == [f"{WORLD}/{n}" for n in delivered]
    await rt.close()


# Rows each statement of a tick writes per run on the real engine, at one command per tick (docs/storage.md,
# "Schema version 19" to "Schema version 22": the command due at once is its row and its id's entry,
# settled its row again; a single command's admission is INSERT_UNATTRIBUTED_COMMAND: no principal, no
# reservation). An admission appends nothing (schema version 21), and the publication's event goes with
# its world-row write (PUBLISH_HEAD), so APPEND_SPILLED_EVENTS writes nothing (schema version 22).
PER_TICK_ROWS = {"INSERT_UNATTRIBUTED_COMMAND": 2, "APPEND_SPILLED_EVENTS": 0, "SET_LEASES": 1, "INSERT_TICK": 1,
                 "INSERT_STATE_DELTA": 1, "INSERT_STATE_CHUNK": 1, "SETTLE": 1, "PUBLISH_HEAD": 1,
                 "SET_PROJECTED_SEQ": 1, "DELETE_OUTBOX_UPTO": 0, "APPEND_EVENTS": 0}  # fmt: skip


async def test_a_tick_writes_one_row_per_state_chunk_and_outbox_append_on_the_real_engine(tmp_path, clock, queue):
    """The state tables are clustered on their keys (a chunk is one row, not a row and its key's
    entry) and the publication's event rides on its world-row write: counted by the real Durable
    Object engine, which bills index entries, statement by statement, 8 rows per command."""
    names = {text: name for name, text in vars(ledger_sql).items() if name in PER_TICK_ROWS}
    ns = world_namespace(tmp_path / "objects", clock, queue=queue, sql_engine=workerd_sql_engines())
    try:
        rt = Runtime(DurableObjectAuthority(ns), owner="runner-do", lease_ms=30_000, origin="gateway")
        await rt.dispatcher.apply(CreateWorld(name="durable", world_id=WORLD))
        sql = ns.storage(WORLD).sql
        exec_ = sql.exec
        written: dict[str, list[int]] = {}

        def metered(query, *bindings):
            cursor = exec_(query, *bindings)
            if query in names:
                written.setdefault(names[query], []).append(int(cursor.rowsWritten))
            return cursor

        sql.exec = metered
        for tick in range(4):
            await rt.dispatcher.defer(Spawn(world_id=WORLD, components=[Position(x=tick, y=tick)]),
                                      DurableOptions(tick=tick), command_id=f"c-{tick}")  # fmt: skip
            await rt.dispatcher.apply(Step(world_id=WORLD))
            while await ns.run_alarm(WORLD):
                pass
            clock.advance(1_000)
        await rt.close()
    finally:
        ns.close()
    assert {"INSERT_UNATTRIBUTED_COMMAND", "APPEND_SPILLED_EVENTS", "INSERT_TICK", "INSERT_STATE_DELTA", "SETTLE", "PUBLISH_HEAD",
            "SET_PROJECTED_SEQ", "DELETE_OUTBOX_UPTO"} <= set(written)
    assert {name: set(rows) for name, rows in written.items()} == {name: {PER_TICK_ROWS[name]} for name in written}
    assert len(written["APPEND_SPILLED_EVENTS"]) == 4  # each publication's; the admissions' events are their rows
    assert sum(sum(rows) for rows in written.values()) == 4 * 8  # rows written per command lifecycle


# -- destroy survives the object dying between its transactions --


async def test_destroy_arms_the_alarm_before_it_starts_even_without_a_queue(tmp_path, clock):
    namespace = world_namespace(tmp_path / "objects", clock)  # no AUDIT_QUEUE binding
    try:
        authority = DurableObjectAuthority(namespace)
        await authority.create_world(WORLD, "durable")
        await authority.destroy(WORLD)
        assert namespace.alarm_time(WORLD) == clock.now_ms() + DELIVERY_DELAY_MS
    finally:
        namespace.close()


async def test_the_alarm_finishes_a_destroy_the_object_died_in(namespace, authority, queue):
    await authority.create_world(world_id=WORLD, name="durable")
    await authority.admit(world_id=WORLD, commands=[command(f"c-{i}") for i in range(3)])
    ledger = namespace.instance(WORLD).ledger
    # the object dies after destroy's first transaction (its alarm armed before it started):
    # admission is closed, nothing is cancelled yet
    ledger._port.transaction(lambda: ledger._port.execute("UPDATE worlds SET status = 'CLOSING' WHERE world_id = ?", (WORLD,)))
    namespace.evict(WORLD)
    assert namespace.alarm_time(WORLD) is not None
    assert await namespace.run_alarm(WORLD)
    assert (await authority.world_info(world_id=WORLD))["status"] == "DESTROYED"
    history = await authority.history(WORLD, scope="alice")
    assert {r["status"] for r in history} == {"CANCELLED"}
    cancelled = [m["command_id"] for m in queue.messages if m["event_type"] == "cancelled"]
    assert sorted(cancelled) == ["c-0", "c-1", "c-2"]
