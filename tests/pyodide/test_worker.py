"""The Worker on the real interpreter, over HTTP: a JS Request into the `Default` entry, the SDK's
ASGI bridge, the shared FastAPI app, `DurableObjectAuthority`, a JS namespace stub, the real
`WorldObject` and its ledger behind a JS `ctx.storage`; every route family, the error envelopes
and the auth rules, and the audit path from an admission to the JS Queue through the alarm."""

from __future__ import annotations

import httpx
import pytest

from archetype.commands.scheduler import schema_row
from archetype.world import Component
from tests.component_modules.alpha import Position

pytestmark = pytest.mark.timeout(120)

TOKENS = {
    "t-admin": {"principal": "ops", "roles": ["admin", "player", "viewer"]},
    "t-player": {"principal": "pat", "roles": ["player"]},
    "t-viewer": {"principal": "eve", "roles": ["viewer"]},
    "t-operator": {"principal": "runner", "roles": ["operator"]},
}
START_MS = 1_700_000_000_000  # the harness clock of a new deployment


def auth(token: str, **headers: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **headers}


def despawn(entity_id: int = 7, tick: int = 3) -> dict:
    return {"type": "despawn", "tick": tick, "priority": 0, "entity_id": entity_id}


@pytest.fixture
def worker(pyodide):
    pyodide.call("tests.pyodide.harness:deploy", tokens=TOKENS)
    with httpx.Client(base_url=pyodide.url, timeout=60) as client:
        yield client


@pytest.fixture
def world(worker) -> str:
    created = worker.post("/worlds", json={"name": "edge", "world_id": "w-edge"}, headers=auth("t-admin"))
    assert created.status_code == 201, created.text
    return "w-edge"


def test_health_and_the_world_lifecycle(worker):
    assert worker.get("/health").json() == {"status": "ok"}
    created = worker.post("/worlds", json={"name": "edge", "world_id": "w-life"}, headers=auth("t-admin"))
    assert created.status_code == 201 and created.json()["status"] == "ACTIVE"
    assert created.json()["created_at"] == START_MS  # stamped by the object's clock, through the JS storage
    again = worker.post("/worlds", json={"name": "edge", "world_id": "w-life"}, headers=auth("t-admin"))
    assert again.status_code == 201 and again.json() == created.json()
    clash = worker.post("/worlds", json={"name": "other", "world_id": "w-life"}, headers=auth("t-admin"))
    assert (clash.status_code, clash.json()["code"]) == (409, "world_exists")
    assert worker.get("/worlds/w-life", headers=auth("t-viewer")).json()["name"] == "edge"

    keyed = auth("t-player", **{"Idempotency-Key": "d-1"})
    assert worker.post("/worlds/w-life/commands", json=despawn(), headers=keyed).status_code == 202
    destroyed = worker.delete("/worlds/w-life", headers=auth("t-admin"))
    assert destroyed.status_code == 200 and destroyed.json() == {"world_id": "w-life", "cancelled": 1}
    late = worker.post("/worlds/w-life/commands", json=despawn(), headers=auth("t-player", **{"Idempotency-Key": "d-2"}))
    assert (late.status_code, late.json()["code"]) == (409, "world_closing")


def test_commands_are_admitted_replayed_refused_and_listed(worker, world):
    keyed = auth("t-player", **{"Idempotency-Key": "d-7"})
    first = worker.post(f"/worlds/{world}/commands", json=despawn(), headers=keyed)
    assert first.status_code == 202 and first.json()["replayed"] is False
    replay = worker.post(f"/worlds/{world}/commands", json=despawn(), headers=keyed)
    assert replay.status_code == 202 and replay.json() == {**first.json(), "replayed": True}
    conflict = worker.post(f"/worlds/{world}/commands", json=despawn(entity_id=8), headers=keyed)
    assert (conflict.status_code, conflict.json()["code"]) == (409, "command_conflict")

    record(worker, world)
    spawn = {"type": "spawn", "tick": 1, "priority": 0, "components": [
        {"name": "Position", "fingerprint": Position.component_fingerprint(), "data": {"x": 1, "y": 2}}]}  # fmt: skip
    spawned = worker.post(f"/worlds/{world}/commands", json=spawn, headers=auth("t-player", **{"Idempotency-Key": "s-1"}))
    assert spawned.status_code == 202 and spawned.json()["entity_id"] == 1  # reserved in the object's ledger

    batch = {"commands": [despawn(entity_id=20 + i) for i in range(3)]}
    admitted = worker.post(f"/worlds/{world}/commands:batch", json=batch, headers=auth("t-player", **{"Idempotency-Key": "b"}))
    assert admitted.status_code == 202
    assert [c["command_id"] for c in admitted.json()["commands"]] == ["b.0", "b.1", "b.2"]
    # all or nothing: a batch whose second item conflicts admits none of them
    clashing = {"commands": [{**despawn(entity_id=30), "command_id": "fresh"}, {**despawn(entity_id=99), "command_id": "b.1"}]}
    refused = worker.post(f"/worlds/{world}/commands:batch", json=clashing, headers=auth("t-player"))
    assert (refused.status_code, refused.json()["code"]) == (409, "command_conflict")
    assert worker.get(f"/worlds/{world}/commands/fresh", headers=auth("t-player")).status_code == 404

    status = worker.get(f"/worlds/{world}/commands/d-7", headers=auth("t-player")).json()
    assert (status["status"], status["principal"], status["payload"]["entity_id"]) == ("PENDING", "pat", 7)
    assert worker.get(f"/worlds/{world}/commands/d-7", headers=auth("t-viewer")).status_code == 404  # pat's own
    page = worker.get(f"/worlds/{world}/commands", params={"limit": 2}, headers=auth("t-player")).json()
    assert [c["command_id"] for c in page["commands"]] == ["d-7", "s-1"] and page["next_after"] == 2
    rest = worker.get(f"/worlds/{world}/commands", params={"after": 2}, headers=auth("t-player")).json()
    assert [c["command_id"] for c in rest["commands"]] == ["b.0", "b.1", "b.2"] and rest["next_after"] is None


class Waypoint(Component):
    """A type only this test knows: no module the harness loads registers it, so the edge sees it
    solely through the schema recorded for the world (a staged module's class is recorded by itself)."""

    x: float
    y: float


def record(worker, world: str, component: type[Component] = Position) -> None:
    """What a runner does before clients submit a type: record its schema (the edge has no classes)."""
    recorded = worker.post(f"/worlds/{world}/ledger/record_components", json={"components": [schema_row(component)]},
                           headers=auth("t-operator"))  # fmt: skip
    assert recorded.status_code == 200, recorded.text


def test_the_edge_validates_component_data_against_recorded_schemas(worker):
    world = "w-schemas"  # its own world: the deployment's objects outlive a test, and w-edge has Position recorded
    assert worker.post("/worlds", json={"name": "schemas", "world_id": world}, headers=auth("t-admin")).status_code == 201
    def spawn(key: str, fingerprint: str, **data) -> httpx.Response:
        body = {
            "type": "spawn",
            "tick": 1,
            "components": [{"name": "Waypoint", "fingerprint": fingerprint, "data": data}],
        }
        return worker.post(f"/worlds/{world}/commands", json=body, headers=auth("t-player", **{"Idempotency-Key": key}))

    unknown = spawn("u", Waypoint.component_fingerprint(), x=1, y=2)  # nothing recorded yet
    assert (unknown.status_code, unknown.json()["code"]) == (422, "unknown_component")
    assert unknown.json()["message"].startswith("$.components[0]: ")
    record(worker, world, Waypoint)
    listed = worker.get(f"/worlds/{world}/components", headers=auth("t-viewer")).json()
    assert [(c["name"], c["fingerprint"]) for c in listed["components"]] == [
        ("Waypoint", Waypoint.component_fingerprint())
    ]
    assert listed["components"][0]["schema"] == schema_row(Waypoint)["schema"]
    wrong = spawn("w", Waypoint.component_fingerprint(), x="abc", y=2)
    assert (wrong.status_code, wrong.json()["code"]) == (422, "invalid_component_data")
    assert wrong.json()["message"].startswith("$.components[0].data.x: expected number, got string")
    made_up = spawn("m", "0" * 64, x=1, y=2)
    assert (made_up.status_code, made_up.json()["code"]) == (422, "unknown_component")
    # nothing persisted: no command, and no entity id reserved by the refused spawns
    assert worker.get(f"/worlds/{world}/commands", headers=auth("t-admin")).json()["commands"] == []
    fits = spawn("ok", Waypoint.component_fingerprint(), x=1, y=2)
    assert fits.status_code == 202 and fits.json()["entity_id"] == 1


def test_the_runner_protocol_and_the_routes_the_edge_cannot_answer(worker, world):
    info = worker.post(f"/worlds/{world}/ledger/world_info", json={}, headers=auth("t-operator"))
    assert info.status_code == 200 and info.json()["world_id"] == world
    listing = worker.post("/ledger/list_worlds", json={}, headers=auth("t-operator"))
    assert listing.status_code == 200 and world in [w["world_id"] for w in listing.json()]  # through the directory
    unknown = worker.post(f"/worlds/{world}/ledger/drop_tables", json={}, headers=auth("t-operator"))
    assert unknown.json()["code"] == "unregistered_operation"
    audit = worker.get(f"/worlds/{world}/audit", headers=auth("t-viewer"))
    assert (audit.status_code, audit.json()["code"]) == (503, "audit_unavailable")


def test_errors_keep_their_envelope_and_roles_are_checked_before_worlds(worker, world):
    assert worker.get(f"/worlds/{world}").status_code == 401
    wrong = worker.get(f"/worlds/{world}", headers=auth("t-nobody"))
    assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
    # a viewer cannot submit, and cannot tell whether the world exists
    for target in (world, "w-nowhere"):
        denied = worker.post(f"/worlds/{target}/commands", json=despawn(), headers=auth("t-viewer"))
        assert (denied.status_code, denied.json()["code"]) == (403, "permission_denied")
    missing = worker.get("/worlds/w-nowhere", headers=auth("t-viewer"))
    assert (missing.status_code, missing.json()) == (404, {"code": "world_not_found", "message": "world 'w-nowhere' does not exist"})
    unknown_field = worker.post(f"/worlds/{world}/commands", json={**despawn(), "colour": "red"}, headers=auth("t-player"))
    assert (unknown_field.status_code, unknown_field.json()["code"]) == (422, "invalid_request")
    huge = worker.post(f"/worlds/{world}/commands", content=b"{" + b" " * 2_000_000 + b"}",
                       headers=auth("t-player", **{"Content-Type": "application/json"}))  # fmt: skip
    assert (huge.status_code, huge.json()["code"]) == (413, "payload_too_large")
    assert worker.get("/nope", headers=auth("t-viewer")).json()["code"] == "not_found"


def test_an_admission_reaches_the_js_queue_through_the_alarm(pyodide, worker, world):
    control = "tests.pyodide.harness"
    assert pyodide.call(f"{control}:alarm_time", world_id=world) is None  # creating a world appends no event
    keyed = auth("t-player", **{"Idempotency-Key": "d-7"})
    assert worker.post(f"/worlds/{world}/commands", json=despawn(), headers=keyed).status_code == 202
    assert pyodide.call(f"{control}:alarm_time", world_id=world) == START_MS + 1_000  # armed, 1 s later

    pyodide.call(f"{control}:fail_queue", count=1)
    assert pyodide.call(f"{control}:run_alarm", world_id=world) is True
    assert pyodide.call(f"{control}:queue_messages") == []
    assert pyodide.call(f"{control}:alarm_time", world_id=world) == START_MS + 10_000  # re-armed after the failure

    assert pyodide.call(f"{control}:run_alarm", world_id=world) is True  # before the retry time: nothing sent
    assert pyodide.call(f"{control}:queue_messages") == []
    assert pyodide.call(f"{control}:run_alarm", world_id=world, now_ms=START_MS + 10_000) is True
    sent = pyodide.call(f"{control}:queue_messages")
    assert [(m["command_id"], m["event_type"], m["event_seq"]) for m in sent] == [("d-7", "admitted", 1)]
    assert pyodide.call(f"{control}:alarm_time", world_id=world) is None  # nothing left: no alarm
