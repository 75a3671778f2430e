"""Our Worker and Durable Objects in the real Workers runtime (workerd running our Python on
Pyodide, real RPC, real alarms, SQLite storage on disk): the paths a user takes, over HTTP, on the
session's deployment (tests/support/workerd/python_worker.py). Each test uses worlds of its own."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import pytest

from archetype import Client
from archetype.commands import WorldEdgeHostedError
from archetype.commands.port import ManualClock
from archetype.remote import HttpAuthority
from archetype.world import ComponentValue
from tests.component_modules.alpha import Position, Velocity
from tests.crash.harness import RemoteRunner
from tests.support.clock_header import ClockHeader
from tests.support.workerd.python_worker import ADMIN_TOKEN, OPERATOR_TOKEN, PLAYER_TOKEN
from tests.workerd.harness_entry import NAMESPACE_HEADER, NOW_HEADER

pytestmark = pytest.mark.timeout(300)

SETTLE_S = 60.0  # generous: a busy 2-core machine, and an object's first call imports its Python


def world(prefix: str) -> str:
    """A fresh world id; `edge-` ones are stepped by their object's alarm (tests.server.game)."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def mover(x: float = 0.0) -> dict:
    components = [Position(x=x, y=0), Velocity(dx=1, dy=2)]
    return {"type": "spawn", "tick": 0, "components": [ComponentValue.from_component(c).model_dump() for c in components]}


def wait_for(condition, what: str, timeout: float = SETTLE_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (value := condition()) is not None:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def positions(client: Client, world_id: str) -> dict[int, dict]:
    return {e.entity_id: {c.name: c.data for c in e.components} for e in client.state(world_id).entities}


def test_the_worker_answers_health_and_holds_the_token_secret(workerd_python):
    assert httpx.get(f"{workerd_python.url}/health").json() == {"status": "ok"}
    assert httpx.get(f"{workerd_python.url}/worlds").status_code == 401  # no token
    wrong = httpx.get(f"{workerd_python.url}/worlds", headers={"authorization": "Bearer nobody"})
    assert wrong.status_code == 401
    mine = httpx.get(f"{workerd_python.url}/worlds", headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
    assert mine.status_code == 200, mine.text


def test_an_edge_hosted_world_applies_a_spawn_by_its_alarm_and_answers_every_read(workerd_python, admin):
    world_id = world("edge")
    created = admin.create_world("edge smoke", world_id=world_id)
    assert (created.world_id, created.status, created.tick_head) == (world_id, "ACTIVE", -1)
    with Client(workerd_python.url, token=PLAYER_TOKEN) as player:
        accepted = player.submit(world_id, mover(), idempotency_key="spawn-1")
        assert player.submit(world_id, mover(), idempotency_key="spawn-1").replayed
        settled = player.wait(world_id, "spawn-1", timeout=SETTLE_S)
    assert (settled.status, settled.principal) == ("APPLIED", "pat")  # at the tick the world's clock reached
    # the game's processor moves it every tick, on the object's alarm: the position keeps changing
    first = positions(admin, world_id)[accepted.entity_id]["Position"]
    wait_for(lambda: positions(admin, world_id)[accepted.entity_id]["Position"] != first or None,
             "the edge-hosted world to tick again")  # fmt: skip
    assert [c.command_id for c in admin.history(world_id)] == ["spawn-1"]
    assert world_id in {w.world_id for w in admin.worlds()}
    # the audit events went to the queue binding (the deployment's queue service accepts them)
    wait_for(lambda: admin.world(world_id).outbox_pending == 0 or None, "the outbox to be sent to the audit queue")


def test_a_created_edge_hosted_world_ticks_by_its_alarm_alone(admin):
    """The game's processor gives the world work every tick: creating it arms the object's alarm,
    and each alarm arms the next one; nothing else ever calls the object."""
    world_id = world("edge")
    admin.create_world("alone", world_id=world_id)
    wait_for(lambda: admin.world(world_id).tick_head >= 2 or None, "the edge-hosted world to tick by itself")


def test_a_remote_runner_cannot_take_an_edge_hosted_world(workerd_python, admin):
    world_id = world("edge")
    admin.create_world("edge", world_id=world_id)

    async def acquire():
        authority = HttpAuthority(workerd_python.url, token=OPERATOR_TOKEN)
        try:
            await authority.acquire_writer(world_id)
        finally:
            await authority.close()

    with pytest.raises(WorldEdgeHostedError):
        asyncio.run(acquire())


def test_archetype_runner_steps_a_runner_hosted_world_through_the_real_objects(workerd_python, admin, tmp_path):
    world_id = world("runner")
    admin.create_world("runner smoke", world_id=world_id)
    accepted = admin.submit(world_id, mover(x=10.0), idempotency_key="spawn-r")
    assert admin.command(world_id, "spawn-r").status == "PENDING"  # nobody steps a runner-hosted world yet
    runner = RemoteRunner(tmp_path, workerd_python.url, OPERATOR_TOKEN, "--runner-id", f"r-{uuid.uuid4().hex[:8]}",
                          "--module", "tests.server.game")  # fmt: skip
    try:
        assert "running" in runner.wait_running(timeout=SETTLE_S)
        settled = admin.wait(world_id, "spawn-r", timeout=SETTLE_S)
        assert settled.status == "APPLIED"  # at the tick the world's clock reached (empty ticks are coalesced)
        # the runner runs the game's processor: the spawned mover moves
        wait_for(lambda: positions(admin, world_id)[accepted.entity_id]["Position"]["x"] > 10.0 or None,
                 "the runner to step the world past its first tick")  # fmt: skip
    finally:
        assert runner.stop() == 0, runner.stderr()[-4000:]


async def test_a_request_s_clock_header_sets_the_objects_clock(workerd_python):
    """The test-only clock (tests/workerd/harness_entry.py): how the conformance suite's ManualClock
    reaches the objects; a request without the header runs on the system clock."""
    clock = ManualClock(1_700_000_000_000)
    manual = HttpAuthority(workerd_python.url, token=ADMIN_TOKEN, transport=ClockHeader(clock, NOW_HEADER))
    system = HttpAuthority(workerd_python.url, token=ADMIN_TOKEN)
    try:
        on_manual = await manual.create_world(world("clock"), "manual clock")
        clock.advance(1_234)
        assert (await manual.world_info(on_manual["world_id"]))["created_at"] == 1_700_000_000_000
        before = int(time.time() * 1000)
        on_system = await system.create_world(world("clock"), "system clock")
        assert before - 5_000 <= on_system["created_at"] <= int(time.time() * 1000) + 5_000
    finally:
        await manual.close()
        await system.close()


async def test_a_request_s_namespace_header_gives_it_durable_objects_of_its_own(workerd_python):
    """The test-only namespaces (tests/workerd/harness_entry.py): suites that expect a fresh
    authority per test (the same world ids in every test) share the one deployment."""
    clock = ManualClock()
    spaces = [uuid.uuid4().hex for _ in range(2)]
    authorities = [HttpAuthority(workerd_python.url, token=ADMIN_TOKEN,
                                 transport=ClockHeader(clock, NOW_HEADER, {NAMESPACE_HEADER: space}))
                   for space in spaces]  # fmt: skip
    try:
        for n, authority in enumerate(authorities):
            assert (await authority.create_world("w1", f"in {n}"))["name"] == f"in {n}"  # the same id in each
        for n, authority in enumerate(authorities):
            assert [(w["world_id"], w["name"]) for w in await authority.list_worlds()] == [("w1", f"in {n}")]
    finally:
        for authority in authorities:
            await authority.close()
