from __future__ import annotations

import pytest

from archetype.commands.port import ManualClock
from archetype.runtime import Runtime
from local_catalog import open_local_authority
from tests.component_modules import flaky


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(autouse=True)
def _reset_probe_failures():
    flaky.FAILURES.clear()
    yield
    flaky.FAILURES.clear()


@pytest.fixture
async def runtime(tmp_path, clock):
    rt = Runtime(open_local_authority(tmp_path / "data", clock=clock), owner="runner-a", lease_ms=1_000)
    yield rt
    await rt.close()
