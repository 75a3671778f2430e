"""An edge-hosted world on the real interpreter: the Worker admits over HTTP, and the real
`WorldObject` steps the world from its alarm (the runner's WorldHost and CommandScheduler under
Pyodide, the user's processor from the module hook), re-arming through the JS `ctx.storage`."""

from __future__ import annotations

import httpx
import pytest

from tests.component_modules.alpha import Position, Velocity

pytestmark = pytest.mark.timeout(120)

CONTROL = "tests.pyodide.harness"
ADMIN = {"Authorization": "Bearer t-admin"}
START_MS = 1_700_000_000_000  # the harness clock of a new deployment
TICK_MS = 1_000


def component(cls, **data):
    return {"name": cls.__name__, "fingerprint": cls.component_fingerprint(), "data": data}


def test_an_edge_hosted_world_steps_itself_through_several_alarms(pyodide):
    tokens = {"t-admin": {"principal": "ops", "roles": ["admin", "player", "viewer", "operator"]}}
    pyodide.call(f"{CONTROL}:deploy", tokens=tokens, modules=["tests.server.game"])
    with httpx.Client(base_url=pyodide.url, timeout=60) as worker:
        created = worker.post("/worlds", json={"name": "edge", "world_id": "edge-py", "tick_interval_ms": TICK_MS}, headers=ADMIN)
        assert created.status_code == 201, created.text
        assert pyodide.call(f"{CONTROL}:alarm_time", world_id="edge-py") == START_MS + TICK_MS  # its processor's tick
        spawn = {"type": "spawn", "tick": 0, "priority": 0,
                 "components": [component(Position, x=0, y=0), component(Velocity, dx=1, dy=2)]}  # fmt: skip
        admitted = worker.post("/worlds/edge-py/commands", json=spawn, headers={**ADMIN, "Idempotency-Key": "s-1"})
        assert admitted.status_code == 202, admitted.text
        for tick in range(3):  # the alarm at each tick's time on the world's clock (created at START_MS)
            assert pyodide.call(f"{CONTROL}:run_alarm", world_id="edge-py", now_ms=START_MS + (tick + 1) * TICK_MS)
        assert pyodide.call(f"{CONTROL}:alarm_time", world_id="edge-py") == START_MS + 4 * TICK_MS  # re-armed each time
        assert worker.get("/worlds/edge-py", headers=ADMIN).json()["tick_head"] == 2
        assert worker.get("/worlds/edge-py/commands/s-1", headers=ADMIN).json()["status"] == "APPLIED"
        (entity,) = worker.get("/worlds/edge-py/state", headers=ADMIN).json()["entities"]
        position = next(c for c in entity["components"] if c["name"] == "Position")
        assert position["data"] == {"x": 3.0, "y": 6.0}  # moved on ticks 0, 1 and 2
        events = [(m["command_id"], m["event_type"]) for m in pyodide.call(f"{CONTROL}:queue_messages")]
        assert events == [("s-1", "admitted"), ("s-1", "applied")]  # audit delivery shared the alarms
        assert all("principal" in m for m in pyodide.call(f"{CONTROL}:queue_messages"))  # null fields kept
        # evicted, the object reloads the world from its ledger and goes on with the next tick
        pyodide.call(f"{CONTROL}:evict", world_id="edge-py")
        assert pyodide.call(f"{CONTROL}:run_alarm", world_id="edge-py", now_ms=START_MS + 4 * TICK_MS) is True
        (entity,) = worker.get("/worlds/edge-py/state", headers=ADMIN).json()["entities"]
        assert next(c for c in entity["components"] if c["name"] == "Position")["data"] == {"x": 4.0, "y": 8.0}
        assert [m["tick"] for m in worker.post("/worlds/edge-py/ledger/manifests", json={}, headers=ADMIN).json()] == [
            0, 1, 2, 3]  # fmt: skip
        # a remote runner is refused the writer of the world its object steps
        refused = worker.post("/worlds/edge-py/ledger/acquire_writer", json={}, headers=ADMIN)
        assert (refused.status_code, refused.json()["code"]) == (409, "world_edge_hosted")
