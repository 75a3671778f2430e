from __future__ import annotations

from collections.abc import Iterator

import pytest

from archetype import Client
from tests.server.game import edge_hosted
from tests.support.workerd.python_worker import ADMIN_TOKEN, PythonWorker


@pytest.fixture
def admin(workerd_python: PythonWorker) -> Iterator[Client]:
    """A Client of the session's deployment with an admin token."""
    with Client(workerd_python.url, token=ADMIN_TOKEN) as client:
        yield client


@pytest.fixture(autouse=True)
def _no_edge_world_left_ticking(request: pytest.FixtureRequest) -> Iterator[None]:
    """Destroy the edge-hosted worlds a test created on the system clock. Such a world ticks on
    workerd's own alarm (every 100 ms while it has work) for the rest of the session, in the one
    isolate every later test shares: four of them made each later request several times slower
    (the arming table: 4.7 s for four rows, 19.7 s beside four ticking worlds, docs/testing.md)."""
    if "workerd_python" not in request.fixturenames:
        yield
        return
    worker: PythonWorker = request.getfixturevalue("workerd_python")
    with Client(worker.url, token=ADMIN_TOKEN) as client:
        before = {world.world_id for world in client.worlds()}
    yield
    if worker.pid is None:  # the test left the deployment stopped: nothing ticks
        return
    with Client(worker.url, token=ADMIN_TOKEN) as client:  # a new connection: the test may have restarted workerd
        for world in client.worlds():
            if world.world_id not in before and edge_hosted(world.world_id) and world.status != "DESTROYED":
                client.destroy_world(world.world_id)
