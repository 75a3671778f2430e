"""The arming table (tests/durable_object/arming.py) on the stand-in runtime: every ledger method
leaves the alarm armed for what it did, and the alarm does it."""

from __future__ import annotations

import pytest

from archetype.commands.ledger import CATALOG_METHODS, LEDGER_METHODS
from archetype.commands.port import ManualClock
from durable_world import DurableObjectAuthority
from durable_world.edge import TICK_INTERVAL_MS
from tests.durable_object.arming import ROWS, Host, run_row
from tests.server import game
from tests.support.durable_object_standin import FakeQueue, world_namespace

pytestmark = pytest.mark.timeout(60)


def test_every_ledger_method_has_a_row():
    assert sorted(ROWS) == sorted(LEDGER_METHODS + CATALOG_METHODS)


@pytest.fixture(params=["queue", "no-queue"])
def host(tmp_path, request):
    clock = ManualClock()
    namespace = world_namespace(tmp_path / "objects", clock, queue=FakeQueue(), modules=(game,))
    if request.param == "no-queue":
        del namespace.env.AUDIT_QUEUE

    async def alarm_at(world_id: str) -> int | None:
        return namespace.alarm_time(world_id)

    async def set_alarm(world_id: str, at: int) -> None:
        await namespace.storage(world_id).setAlarm(at)

    yield Host(DurableObjectAuthority(namespace), clock, TICK_INTERVAL_MS, alarm_at, set_alarm, namespace.run_alarm,
               queue=request.param == "queue")  # fmt: skip
    namespace.close()


@pytest.mark.parametrize("method", sorted(ROWS))
async def test_a_ledger_method_arms_what_it_needs(host, method):
    await run_row(host, method, f"arming-{method}")
