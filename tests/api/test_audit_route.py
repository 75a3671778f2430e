"""GetAuditHistory over HTTP: the audit projection, filtered, for viewers; 503 where there is none."""

import httpx
import pytest

from archetype.api import create_app
from archetype.audit import AuditLog
from tests.api.conftest import ADMIN, ANALYST, NOBODY, OPERATOR, PLAYER, TOKENS, VIEWER


@pytest.fixture
async def audited(authority, tmp_path):
    audit = AuditLog.open_local(tmp_path / "data", authority)
    app = create_app(authority, tokens=TOKENS, audit=audit)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as client:
        yield client, audit
    await audit.close()


def despawn(entity_id: int, tick: int) -> dict:
    return {"type": "despawn", "entity_id": entity_id, "tick": tick}


async def test_the_audit_route_reads_the_projection_with_its_filters(audited):
    client, audit = audited
    assert (await client.post("/worlds", json={"name": "a", "world_id": "w1"}, headers=ADMIN)).status_code == 201
    for i, tick in enumerate((1, 2, 3)):
        response = await client.post("/worlds/w1/commands", json=despawn(i + 1, tick), headers={**PLAYER, "Idempotency-Key": f"c{i}"})
        assert response.status_code == 202, response.text
    before = await client.get("/worlds/w1/audit", headers=PLAYER)
    assert before.status_code == 200 and before.json()["events"] == []  # projection lags until projected
    await audit.project_once()
    assert (await client.get("/worlds/w1/audit", headers=VIEWER)).json()["events"] == []  # pat's events are pat's
    denied = await client.get("/worlds/w1/audit", params={"principal": "pat"}, headers=VIEWER)
    assert (denied.status_code, denied.json()["code"]) == (403, "permission_denied")
    page = (await client.get("/worlds/w1/audit", headers=PLAYER)).json()
    assert page == (await client.get("/worlds/w1/audit", params={"principal": "pat"}, headers=OPERATOR)).json()
    assert page == (await client.get("/worlds/w1/audit", headers=ANALYST)).json()  # every principal's: pat's
    assert [(e["command_id"], e["event_type"], e["principal"]) for e in page["events"]] == [
        ("c0", "admitted", "pat"), ("c1", "admitted", "pat"), ("c2", "admitted", "pat"),
    ]  # fmt: skip
    ticks = (await client.get("/worlds/w1/audit", params={"tick_from": 2, "tick_to": 2}, headers=PLAYER)).json()
    assert [e["command_id"] for e in ticks["events"]] == ["c1"]
    one = (await client.get("/worlds/w1/audit", params={"command_id": "c2"}, headers=PLAYER)).json()
    assert [e["event_seq"] for e in one["events"]] == [3]
    paged = (await client.get("/worlds/w1/audit", params={"limit": 2}, headers=PLAYER)).json()
    assert paged["next_after"] == 2
    rest = (await client.get("/worlds/w1/audit", params={"after": 2}, headers=PLAYER)).json()
    assert [e["command_id"] for e in rest["events"]] == ["c2"] and rest["next_after"] is None


async def test_bad_filters_and_missing_roles_are_refused(audited):
    client, _ = audited
    bad = await client.get("/worlds/w1/audit", params={"tick_from": 5, "tick_to": 1}, headers=VIEWER)
    assert (bad.status_code, bad.json()["code"]) == (422, "invalid_request")
    denied = await client.get("/worlds/w1/audit", headers=NOBODY)
    assert (denied.status_code, denied.json()["code"]) == (403, "permission_denied")


async def test_without_an_audit_projection_the_route_answers_audit_unavailable(client):
    response = await client.get("/worlds/w1/audit", headers=VIEWER)
    assert (response.status_code, response.json()["code"]) == (503, "audit_unavailable")
