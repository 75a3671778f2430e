"""The conformance parity scenario with the Worker and its Durable Objects on the real
interpreter: byte-identical records, manifests, outbox and state to the local authority."""

from __future__ import annotations

import pytest

from archetype.commands.port import ManualClock
from tests.conformance.authorities import AUTHORITY_FACTORIES
from tests.conformance.scenario import run_scenario, snapshot
from tests.pyodide.authority import pyodide_worker_over_http

pytestmark = pytest.mark.timeout(300)

async def scenario_snapshot(factory, directory) -> str:
    clock = ManualClock()
    async with factory(directory, clock) as authority:
        await run_scenario(authority, clock)
        return await snapshot(authority)


async def test_the_worker_on_pyodide_matches_the_local_authority_byte_for_byte(pyodide, tmp_path):
    reference = await scenario_snapshot(AUTHORITY_FACTORIES["local"], tmp_path / "local")
    assert await scenario_snapshot(pyodide_worker_over_http, tmp_path / "pyodide") == reference
