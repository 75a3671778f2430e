"""The conformance parity scenario with the Worker and its Durable Objects on the real
interpreter: byte-identical records, manifests, outbox and state to the local authority."""

from __future__ import annotations

import pytest

from archetype.commands.port import ManualClock
from tests.conformance.authorities import AUTHORITY_FACTORIES
from tests.conformance.scenario import run_scenario, snapshot
from tests.pyodide.authority import pyodide_worker_over_http

pytestmark = pytest.mark.timeout(300)

# workerd binds every JS number as a double; ledger_sql's outbox insert builds the event id as
# `world_id || '/' || (? + j.key)`, which a REAL sequence turns into 'parity-main/1.0'. The CPython
# stand-in binds integers as INTEGER and cannot see it. Fix: CAST the sequence AS INTEGER there.
EVENT_ID_BUG = "edge outbox event ids read '<world>/<seq>.0' under workerd's double binding (ledger_sql outbox insert)"


async def scenario_snapshot(factory, directory, **options) -> str:
    clock = ManualClock()
    async with factory(directory, clock, **options) as authority:
        await run_scenario(authority, clock)
        return await snapshot(authority)


@pytest.mark.parametrize("numbers", [
    "stand-in",
    pytest.param("double", marks=pytest.mark.xfail(strict=True, reason=EVENT_ID_BUG)),
])  # fmt: skip
async def test_the_worker_on_pyodide_matches_the_local_authority_byte_for_byte(pyodide, tmp_path, numbers):
    reference = await scenario_snapshot(AUTHORITY_FACTORIES["local"], tmp_path / "local")
    assert await scenario_snapshot(pyodide_worker_over_http, tmp_path / "pyodide", numbers=numbers) == reference
