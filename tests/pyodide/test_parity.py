"""The conformance parity scenario with the Worker and its Durable Objects on the real
interpreter: byte-identical records, manifests, outbox and state to the local authority."""

from __future__ import annotations

import pytest

from archetype.commands.port import ManualClock
from tests.conformance.authorities import AUTHORITY_FACTORIES
from tests.conformance.scenario import run_scenario, snapshot
from tests.durable_object.edge_scenario import PARITY_WORLD, hosted_snapshot, scripted, serve_hosted_snapshot
from tests.pyodide.authority import TOKEN, pyodide_worker_over_http
from tests.support.clock_header import ClockHeader
from tests.support.roles import EVERY_METHOD

pytestmark = pytest.mark.timeout(300)

async def scenario_snapshot(factory, directory) -> str:
    clock = ManualClock()
    async with factory(directory, clock) as authority:
        await run_scenario(authority, clock)
        return await snapshot(authority)


async def test_the_worker_on_pyodide_matches_the_local_authority_byte_for_byte(pyodide, tmp_path):
    reference = await scenario_snapshot(AUTHORITY_FACTORIES["local"], tmp_path / "local")
    assert await scenario_snapshot(pyodide_worker_over_http, tmp_path / "pyodide") == reference


async def test_an_edge_hosted_world_on_pyodide_matches_a_serve_hosted_one_byte_for_byte(pyodide, tmp_path):
    """The world stepped by its object's alarm on the real interpreter (the user's processor from
    the module hook), against the same script stepped by `serve`'s runner loop."""
    from archetype.remote import HttpAuthority
    from archetype.runtime import Runtime

    served = await serve_hosted_snapshot(tmp_path / "serve")
    clock = ManualClock()
    pyodide.call("tests.pyodide.harness:deploy", tokens={TOKEN: {"principal": "root", "roles": EVERY_METHOD}},
                 modules=["tests.server.game"])  # fmt: skip
    authority = HttpAuthority(pyodide.url, token=TOKEN, transport=ClockHeader(clock))
    try:

        async def alarm() -> None:
            assert pyodide.call("tests.pyodide.harness:run_alarm", world_id=PARITY_WORLD, now_ms=clock.now_ms())

        await scripted(Runtime(authority, owner="gateway"), PARITY_WORLD, alarm, clock)
        delivered = pyodide.call("tests.pyodide.harness:queue_messages")
        assert (await authority.world_info(PARITY_WORLD))["tick_head"] == 3 and delivered
        assert await hosted_snapshot(authority, PARITY_WORLD, delivered) == served
    finally:
        await authority.close()
