"""Edge-hosted worlds on workerd's real alarms (the session's deployment,
tests/support/workerd/python_worker.py): the edge-hosting parity scripts byte for byte against a
`serve`-hosted world, across a workerd restart on the same disk (which every other world
survives too); the arming table over every
ledger method; alarm times within what workerd accepts; an alarm whose work raises still re-arms.

On a test clock the objects hold their alarms until the test fires them (tests/workerd/
harness_entry.py): workerd runs the handler, the test decides when, as the stand-in's `run_alarm`
does. On the system clock, workerd fires them by itself."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from archetype.commands import DurableOptions
from archetype.commands.port import ManualClock
from archetype.remote import HttpAuthority
from archetype.runtime import Runtime
from archetype.world import CreateWorld, Despawn
from durable_world.edge import TICK_INTERVAL_MS
from durable_world.world_object import FALLBACK_DELAY_MS, MAX_ALARM_MS
from tests.durable_object.arming import ROWS, Host, run_row
from tests.durable_object.edge_scenario import hosted_snapshot, later, scripted, serve_hosted_snapshot, spawn_mover
from tests.server import game
from tests.support.clock_header import ClockHeader
from tests.support.workerd.python_worker import ADMIN_TOKEN, PythonWorker
from tests.workerd.harness_entry import NAMESPACE_HEADER, NOW_HEADER, OBJECTS_ROUTE

pytestmark = pytest.mark.timeout(300)

SETTLE_S = 60.0


class Deployment:
    """The session's deployment as one test sees it: its namespace on its clock (or the system
    clock and the objects' own names: `clock=None`), an authority, and the objects' test routes."""

    def __init__(self, worker: PythonWorker, clock: ManualClock | None) -> None:
        self.worker = worker
        self.clock = clock
        if clock is None:
            transport: httpx.AsyncBaseTransport | None = None
            self.routes = httpx.AsyncClient(base_url=worker.url, timeout=SETTLE_S * 2)
        else:
            namespace = {NAMESPACE_HEADER: uuid.uuid4().hex}
            transport = ClockHeader(clock, NOW_HEADER, namespace)
            self.routes = httpx.AsyncClient(base_url=worker.url, timeout=SETTLE_S * 2,
                                            transport=ClockHeader(clock, NOW_HEADER, namespace))  # fmt: skip
        self.authority = HttpAuthority(worker.url, token=ADMIN_TOKEN, transport=transport)

    async def _route(self, method: str, world_id: str, action: str, **params: Any) -> dict[str, Any]:
        answer = await self.routes.request(method, f"{OBJECTS_ROUTE}{world_id}/{action}", params=params)
        assert answer.status_code == 200, answer.text
        return answer.json()

    async def alarm_at(self, world_id: str) -> int | None:
        return (await self._route("GET", world_id, "alarm"))["at"]

    async def set_alarm(self, world_id: str, at: int) -> None:
        await self._route("PUT", world_id, "alarm", at=at)

    async def fire(self, world_id: str) -> dict[str, Any]:
        """Hand the object's held alarm to workerd and wait for its handler: {"fired", "raised"}."""
        return await self._route("POST", world_id, "alarm")

    async def fire_cleanly(self, world_id: str, restart: bool = False) -> bool:
        if restart:
            self.worker.restart()
        fired = await self.fire(world_id)
        assert fired.get("raised") is None, f"the alarm handler raised {fired['raised']}: {self.worker.log()}"
        return fired["fired"]

    async def fault(self, world_id: str, statements: int) -> None:
        await self._route("POST", world_id, "fault", statements=statements)

    def host(self) -> Host:
        assert self.clock is not None
        return Host(self.authority, self.clock, TICK_INTERVAL_MS, self.alarm_at, self.set_alarm, self.fire_cleanly)

    async def close(self) -> None:
        await self.authority.close()
        await self.routes.aclose()


@pytest.fixture
async def deployment(workerd_python):
    on_test_clock = Deployment(workerd_python, ManualClock())
    yield on_test_clock
    await on_test_clock.close()


@pytest.fixture
async def system_clock(workerd_python):
    on_system_clock = Deployment(workerd_python, None)
    yield on_system_clock
    await on_system_clock.close()


def edge_world(name: str) -> str:
    return f"edge-{name}-{uuid.uuid4().hex[:12]}"


async def test_an_edge_hosted_world_matches_a_serve_hosted_one_byte_for_byte(deployment, tmp_path):
    """The parity script stepped by the object's alarm in workerd; the audit stream is what the
    queue binding delivered (the session's LoopbackQueue, tests/audit/queue_server.py), then what is left unsent."""
    world_id = edge_world("parity")
    served = await serve_hosted_snapshot(tmp_path / "serve", world_id)
    assert deployment.clock is not None
    edge = Runtime(deployment.authority, owner="gateway")
    await scripted(edge, world_id, lambda: deployment.fire_cleanly(world_id), deployment.clock)
    assert (await deployment.authority.world_info(world_id))["tick_head"] == 3
    delivered = deployment.worker.queue.bodies(world_id)
    assert delivered  # the alarms delivered the audit stream
    assert await hosted_snapshot(deployment.authority, world_id, delivered) == served


async def test_a_workerd_restart_on_the_same_disk_resumes_every_world(deployment, system_clock, tmp_path):
    """One restart (a cold start costs 10-25 s) for three worlds. An edge-hosted world on the test
    clock runs ticks 0..9 with commands due 3 and 6 ticks on, workerd restarted between (every
    isolate and object instance new; the ledger and the held alarm kept): no tick repeated, none
    lost, byte for byte what `serve` did across its own restart. A runner-hosted world with a
    pending command answers the same, byte for byte. An edge-hosted world on workerd's own alarm
    goes on ticking from where it was."""
    later_world, pending, ticking = edge_world("later"), f"restart-{uuid.uuid4().hex[:12]}", edge_world("ticking")
    served = await serve_hosted_snapshot(tmp_path / "serve", later_world, later, game)
    admin, gateway = system_clock.authority, Runtime(system_clock.authority, owner="gateway")
    for world_id, command_id in ((pending, "kept"), (ticking, "moving")):
        await admin.create_world(world_id, world_id)
        await spawn_mover(gateway, world_id, command_id)
    await until(lambda: _status(admin, ticking, "moving"), "APPLIED", "the edge-hosted world to apply its spawn")
    # the admission's audit event leaves on the object's delivery alarm: let it, so nothing moves meanwhile
    await until(lambda: _pending_events(admin, pending), 0, "the audit outbox to be sent")
    resumed: list[int] = []

    async def restart_between(restart: bool = False) -> bool:
        if restart:
            before = await _answers(admin, pending)
            resumed.append((await admin.world_info(ticking))["tick_head"])
            url, pid = deployment.worker.url, deployment.worker.pid
            deployment.worker.restart()
            assert (deployment.worker.url, deployment.worker.pid != pid) == (url, True)
            assert await _answers(admin, pending) == before
        return await deployment.fire_cleanly(later_world)

    assert deployment.clock is not None
    await later(Runtime(deployment.authority, owner="gateway"), later_world, restart_between, deployment.clock)
    assert [m["tick"] for m in await deployment.authority.manifests(later_world)] == list(range(10))
    delivered = deployment.worker.queue.bodies(later_world)
    assert await hosted_snapshot(deployment.authority, later_world, delivered) == served
    assert {pending, ticking} <= {w["world_id"] for w in await admin.list_worlds()}
    # the system-clock world's alarm survived the restart: it goes on ticking from where it was
    await until(lambda: _ticked_past(admin, ticking, resumed[0]), True, "the edge-hosted world to tick after the restart")


async def until(read: Callable[[], Awaitable[Any]], expected: Any, what: str) -> None:
    deadline = time.monotonic() + SETTLE_S
    while (found := await read()) != expected:
        assert time.monotonic() < deadline, f"timed out after {SETTLE_S} s waiting for {what} (last: {found!r})"
        await asyncio.sleep(0.2)


async def _status(authority: HttpAuthority, world_id: str, command_id: str) -> str | None:
    row = await authority.command(world_id, command_id)
    return None if row is None else row["status"]


async def _pending_events(authority: HttpAuthority, world_id: str) -> int:
    return (await authority.watermark(world_id))["pending"]


async def _ticked_past(authority: HttpAuthority, world_id: str, tick: int) -> bool:
    return (await authority.world_info(world_id))["tick_head"] > tick


async def _answers(authority: HttpAuthority, world_id: str) -> list[Any]:
    return [await authority.history(world_id), await authority.load_state(world_id), await authority.world_info(world_id)]


@pytest.mark.parametrize("method", sorted(ROWS))
async def test_a_ledger_method_arms_what_it_needs(deployment, method):
    """The arming table (tests/durable_object/arming.py) with workerd's storage and alarms."""
    await run_row(deployment.host(), method, f"{method}-{uuid.uuid4().hex[:8]}")


async def test_a_command_due_past_the_alarm_range_is_admitted_and_its_alarm_is_the_latest_time(system_clock):
    """Tick 2**53-1 of an idle realtime world (it steps only when a command is due) is due far past
    the latest alarm time workerd accepts: the admission answers, the delivery alarm sends its
    event, and the alarm is left at that latest time (a step due later is as good as never), on
    workerd's own alarm (the system clock)."""
    world_id = f"{game.IDLE_PREFIX}far-{uuid.uuid4().hex[:12]}"
    authority = system_clock.authority
    await authority.create_world(world_id, "far", tick_mode="realtime")
    far = DurableOptions(tick=2**53 - 1)
    await Runtime(authority, owner="gateway").dispatcher.defer(Despawn(world_id=world_id, entity_id=5), far,
                                                               command_id="at-the-bound")  # fmt: skip
    await until(lambda: _pending_events(authority, world_id), 0, "its event to be sent")
    assert system_clock.worker.queue.bodies(world_id)[0]["command_id"] == "at-the-bound"
    assert await system_clock.alarm_at(world_id) == MAX_ALARM_MS


async def test_an_alarm_whose_work_raises_re_arms_and_the_world_goes_on(deployment):
    """The storage fails under an alarm's work: the handler lets nothing out (workerd would retry
    it a few times, then drop it) and the alarm it armed first fires again; the world then ticks."""
    world_id = edge_world("faulty")
    assert deployment.clock is not None
    edge = Runtime(deployment.authority, owner="gateway")
    await edge.dispatcher.apply(CreateWorld(name="faulty", world_id=world_id))
    for failing in (1, 50):  # the first statement of the work; every statement of it
        await deployment.fault(world_id, failing)
        deployment.clock.advance(TICK_INTERVAL_MS)
        before = deployment.clock.now_ms()
        assert await deployment.fire_cleanly(world_id)
        assert await deployment.alarm_at(world_id) == before + FALLBACK_DELAY_MS  # the fallback it armed first
        assert (await deployment.authority.world_info(world_id))["tick_head"] == -1
        await deployment.fault(world_id, 0)
    deployment.clock.advance(FALLBACK_DELAY_MS)
    assert await deployment.fire_cleanly(world_id)
    info = await deployment.authority.world_info(world_id)
    assert info["tick_head"] >= 0
    assert await deployment.alarm_at(world_id) == deployment.clock.now_ms() + info["tick_interval_ms"]
