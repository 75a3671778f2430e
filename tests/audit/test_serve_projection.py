"""`archetype serve` runs the audit projector continuously: what it applies shows up in the
audit table while it serves, with no separate `archetype audit project`."""

from __future__ import annotations

import signal

import httpx
import pytest

from archetype.audit import AuditLog
from archetype.commands import GetAuditHistory
from archetype.world import ComponentValue
from tests.component_modules.alpha import Position
from tests.support.serve import WAIT_S, serving, wait_for

pytestmark = pytest.mark.timeout(90)


async def test_serve_projects_the_outbox_while_serving(tmp_path):
    with serving(tmp_path) as (process, url):
        audit = AuditLog.open_local(tmp_path / "data")  # a reader only, as a notebook would open it
        try:
            with httpx.Client(base_url=url, timeout=10) as http:
                created = http.post("/worlds", json={"name": "served", "world_id": "s1"}, headers={"Authorization": "Bearer t-admin"})
                assert created.status_code == 201
                spawn = {"type": "spawn", "tick": 0, "components": [ComponentValue.from_component(Position(x=1, y=2)).model_dump()]}
                headers = {"Authorization": "Bearer t-player", "Idempotency-Key": "ship"}
                assert http.post("/worlds/s1/commands", json=spawn, headers=headers).status_code == 202

            def projected():
                events = audit.table.history(GetAuditHistory(world_id="s1"))
                return events if [e.event_type for e in events] == ["admitted", "applied"] else None

            events = wait_for(projected, "serve to project the spawn's events")
            assert {(e.command_id, e.principal, e.origin) for e in events} == {("ship", "pat", "gateway")}
            process.send_signal(signal.SIGTERM)
            assert process.wait(WAIT_S) == 0, process.stderr.read()
        finally:
            await audit.close()
