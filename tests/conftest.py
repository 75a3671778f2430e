from __future__ import annotations

from collections.abc import Iterator

import pytest

from archetype.commands.port import ManualClock
from archetype.runtime import Runtime
from local_catalog import open_local_authority
from tests.audit.seaweed import WeedMini
from tests.component_modules import flaky
from tests.support.shared_loopback import stop_shared_loopback
from tests.support.workerd.engine import stop_shared_server
from tests.support.workerd.python_worker import PythonWorker, shared_python_worker, stop_shared_python_worker


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(scope="session", autouse=True)
def _stop_workerd():
    """The real Durable Object SQL engine and the Worker in the real runtime start on first use
    (tests/support/workerd), as does the conformance suite's uvicorn (tests/support/shared_loopback.py),
    and stop here."""
    yield
    stop_shared_loopback()
    stop_shared_server()
    stop_shared_python_worker()


@pytest.fixture(scope="session")
def workerd_python() -> PythonWorker:
    """Our Worker in the real Workers runtime, one per session (tests/support/workerd/python_worker.py):
    skipped where workerd's offline Pyodide bundle is missing, failed under CI=true."""
    return shared_python_worker()


@pytest.fixture(scope="module")
def weed(tmp_path_factory) -> Iterator[WeedMini]:
    """An Iceberg REST catalog + S3 store on loopback (`weed mini`, tests/audit/seaweed.py), one per
    test module; skipped where the `weed` binary is missing."""
    server = WeedMini(tmp_path_factory.mktemp("weed"))
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _reset_probe_failures():
    flaky.FAILURES.clear()
    flaky.INFLATE.clear()
    yield
    flaky.FAILURES.clear()
    flaky.INFLATE.clear()


@pytest.fixture
async def runtime(tmp_path, clock):
    rt = Runtime(open_local_authority(tmp_path / "data", clock=clock), owner="runner-a", lease_ms=1_000)
    yield rt
    await rt.close()
