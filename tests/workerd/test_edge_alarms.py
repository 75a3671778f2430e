"""Edge-hosted worlds on workerd's real alarms (the session's deployment,
tests/support/workerd/python_worker.py): the edge-hosting parity scripts byte for byte against a
`serve`-hosted world, across a workerd restart on the same disk; the arming table over every
ledger method; alarm times within what workerd accepts; an alarm whose work raises still re-arms.

On a test clock the objects hold their alarms until the test fires them (tests/workerd/
harness_entry.py): workerd runs the handler, the test decides when, as the stand-in's `run_alarm`
does. On the system clock, workerd fires them by itself."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import httpx
import pytest

from archetype.commands import DurableOptions
from archetype.commands.port import ManualClock
from archetype.remote import HttpAuthority
from archetype.runtime import Runtime
from archetype.world import CreateWorld, Despawn
from durable_world.edge import TICK_INTERVAL_MS
from durable_world.world_object import MAX_ALARM_MS, RETRY_DELAY_MS
from tests.durable_object.arming import ROWS, Host, run_row
from tests.durable_object.edge_scenario import hosted_snapshot, later, scripted, serve_hosted_snapshot
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

    async def clear_alarm(self, world_id: str) -> None:
        await self._route("DELETE", world_id, "alarm")

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
        return Host(self.authority, self.clock, TICK_INTERVAL_MS, self.alarm_at, self.clear_alarm, self.fire_cleanly)

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
    queue binding delivered (tests/support/workerd/queue_recorder.py), then what is left unsent."""
    world_id = edge_world("parity")
    served = await serve_hosted_snapshot(tmp_path / "serve", world_id)
    assert deployment.clock is not None
    edge = Runtime(deployment.authority, owner="gateway")
    await scripted(edge, world_id, lambda: deployment.fire_cleanly(world_id), deployment.clock)
    assert (await deployment.authority.world_info(world_id))["tick_head"] == 3
    delivered = deployment.worker.queue.bodies(world_id)
    assert delivered  # the alarms delivered the audit stream
    assert await hosted_snapshot(deployment.authority, world_id, delivered) == served


@pytest.mark.parametrize("module", [game], ids=["processors"])
async def test_commands_due_ticks_later_match_serve_across_a_workerd_restart(deployment, tmp_path, module):
    """Ticks 0..9 with commands due 3 and 6 ticks on, workerd restarted on the same disk between
    (every isolate and object instance new; the held alarm and the ledger kept): no tick repeated,
    none lost, byte for byte what `serve` did across its own restart."""
    world_id = edge_world("later")
    served = await serve_hosted_snapshot(tmp_path / "serve", world_id, later, module)
    assert deployment.clock is not None
    edge = Runtime(deployment.authority, owner="gateway")
    await later(edge, world_id, lambda restart=False: deployment.fire_cleanly(world_id, restart), deployment.clock)
    assert [m["tick"] for m in await deployment.authority.manifests(world_id)] == list(range(10))
    delivered = deployment.worker.queue.bodies(world_id)
    assert await hosted_snapshot(deployment.authority, world_id, delivered) == served


@pytest.mark.parametrize("method", sorted(ROWS))
async def test_a_ledger_method_arms_what_it_needs(deployment, method):
    """The arming table (tests/durable_object/arming.py) with workerd's storage and alarms."""
    await run_row(deployment.host(), method, f"{method}-{uuid.uuid4().hex[:8]}")


async def test_a_command_due_past_the_alarm_range_is_admitted_and_its_alarm_is_the_latest_time(system_clock):
    """Tick 2**53-1 of an idle world is due far past the latest alarm time workerd accepts: the
    admission answers, the delivery alarm sends its event, and the alarm is left at that latest
    time (a step due later is as good as never), on workerd's own alarm (the system clock)."""
    world_id = f"{game.IDLE_PREFIX}far-{uuid.uuid4().hex[:12]}"
    authority = system_clock.authority
    await authority.create_world(world_id, "far")
    far = DurableOptions(tick=2**53 - 1)
    await Runtime(authority, owner="gateway").dispatcher.defer(Despawn(world_id=world_id, entity_id=5), far,
                                                               command_id="at-the-bound")  # fmt: skip
    deadline = time.monotonic() + SETTLE_S
    while (await authority.watermark(world_id))["pending"] and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert (await authority.watermark(world_id))["pending"] == 0, system_clock.worker.log()
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
        assert await deployment.alarm_at(world_id) == before + RETRY_DELAY_MS  # the fallback it armed first
        assert (await deployment.authority.world_info(world_id))["tick_head"] == -1
        await deployment.fault(world_id, 0)
    deployment.clock.advance(RETRY_DELAY_MS)
    assert await deployment.fire_cleanly(world_id)
    assert (await deployment.authority.world_info(world_id))["tick_head"] >= 0
    assert await deployment.alarm_at(world_id) == deployment.clock.now_ms() + TICK_INTERVAL_MS
