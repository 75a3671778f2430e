"""A fork copied between two real Durable Objects (workerd running our Python), interrupted between
two pages and workerd restarted, completes on the same call again as an uninterrupted fork does
(docs/ledger.md, "Forks on the Durable Object"); meanwhile the fork refuses every call, typed."""

from __future__ import annotations

import pytest

from archetype.commands.errors import WorldForkingError
from archetype.commands.port import ManualClock
from archetype.runtime import Runtime
from archetype.world import CreateWorld
from tests.conformance.test_forks import source_world
from tests.durable_object.test_fork_copy import SOURCE, the_fork
from tests.workerd.harness_entry import OBJECTS_ROUTE
from tests.workerd.test_edge_alarms import Deployment

pytestmark = pytest.mark.timeout(300)


async def test_a_fork_interrupted_between_pages_and_restarted_completes_on_retry(workerd_python):
    deployment = Deployment(workerd_python, ManualClock())
    try:
        rt = Runtime(deployment.authority, owner="runner-a", lease_ms=60_000)
        await rt.dispatcher.apply(CreateWorld(name="source", world_id=SOURCE))
        world, _ = await source_world(rt, SOURCE)
        args = {"source_world_id": SOURCE, "at_tick": world.tick, "name": "fork", "with_open_commands": True}
        fault = await deployment.routes.post(f"{OBJECTS_ROUTE}w-fork/fault", params={"fork_writes": 1})
        assert fault.json() == {"fork_writes": 1}, fault.text
        with pytest.raises(Exception, match="internal"):  # the Worker's call failed after the first page
            await deployment.authority.fork_world(world_id="w-fork", **args)
        with pytest.raises(WorldForkingError):
            await deployment.authority.world_info(world_id="w-fork")
        workerd_python.restart()
        resumed = await deployment.authority.fork_world(world_id="w-fork", **args)
        await deployment.authority.fork_world(world_id="w-whole", **args)
        assert resumed == await deployment.authority.world_info(world_id="w-fork")
        assert await the_fork(deployment.authority, "w-fork") == await the_fork(deployment.authority, "w-whole")
        logged = workerd_python.log(20_000)
        assert "injected failure between two pages" in logged
    finally:
        await deployment.close()  # its two HTTP clients, whose pooled connections would leak
