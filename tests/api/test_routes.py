"""The HTTP routes over a real local catalog: worlds, commands, status, history, batches, health."""

from __future__ import annotations

import json

import pytest

from archetype.runtime import Runtime
from archetype.world import ComponentTypeRef, ComponentValue, Step
from tests.api.conftest import ADMIN, OPERATOR, PLAYER, VIEWER, auth
from tests.component_modules.alpha import Health, Position


def value(component) -> dict:
    return ComponentValue.from_component(component).model_dump(mode="json")


def ref(component_type) -> dict:
    return ComponentTypeRef.from_type(component_type).model_dump(mode="json")


async def test_world_lifecycle(client, authority):
    created = await client.post("/worlds", json={"name": "arena", "world_id": "w1"}, headers=ADMIN)
    assert created.status_code == 201
    assert created.json()["status"] == "ACTIVE" and created.json()["tick_head"] == -1

    again = await client.post("/worlds", json={"name": "arena", "world_id": "w1"}, headers=ADMIN)
    assert again.status_code == 201 and again.json() == created.json()  # an identical retry
    clash = await client.post("/worlds", json={"name": "other", "world_id": "w1"}, headers=ADMIN)
    assert (clash.status_code, clash.json()["code"]) == (409, "world_exists")

    generated = await client.post("/worlds", json={"name": "anonymous"}, headers=ADMIN)
    assert generated.status_code == 201 and generated.json()["world_id"] != "w1"

    seen = await client.get("/worlds/w1", headers=VIEWER)
    assert seen.json() == created.json()

    await client.post("/worlds/w1/commands", json={"type": "despawn", "tick": 9, "entity_id": 1}, headers=PLAYER)
    destroyed = await client.delete("/worlds/w1", headers=ADMIN)
    assert destroyed.json() == {"world_id": "w1", "cancelled": 1}
    (cancelled,) = [e for e in await authority.read_outbox("w1", limit=100) if e["event_type"] == "cancelled"]
    assert json.loads(cancelled["payload"])["actor"] == "root"  # the admin token's principal (docs/ledger.md, "Who asked")
    assert (await client.get("/worlds/w1", headers=VIEWER)).json()["status"] == "DESTROYED"
    closed = await client.post("/worlds/w1/commands", json={"type": "despawn", "tick": 9, "entity_id": 1}, headers=PLAYER)
    assert (closed.status_code, closed.json()["code"]) == (409, "world_closing")

    missing = await client.get("/worlds/nowhere", headers=VIEWER)
    assert (missing.status_code, missing.json()["code"]) == (404, "world_not_found")


async def test_a_world_s_tick_mode_is_set_at_creation_and_shown(client):
    """Lockstep at 100 ms unless the body says otherwise; `GET /worlds/{id}` and the list show it,
    and a lockstep world's health its lag (null for a realtime one)."""
    made = {}
    for world_id, settings in (("sim", {}), ("game", {"tick_mode": "realtime", "tick_interval_ms": 50}),
                               ("batch", {"tick_interval_ms": 0})):  # fmt: skip
        response = await client.post("/worlds", json={"name": world_id, "world_id": world_id, **settings}, headers=ADMIN)
        assert response.status_code == 201, response.text
        made[world_id] = response.json()
    shown = {w: (v["tick_mode"], v["tick_interval_ms"], v["health"]["lag_ms"]) for w, v in made.items()}
    assert shown == {"sim": ("lockstep", 100, 0), "game": ("realtime", 50, None), "batch": ("lockstep", 0, 0)}
    for world_id, view in made.items():
        assert (await client.get(f"/worlds/{world_id}", headers=VIEWER)).json() == view
    listed = (await client.get("/worlds", headers=VIEWER)).json()["worlds"]
    assert {w["world_id"]: w for w in listed} == made
    same = await client.post("/worlds", json={"name": "game", "world_id": "game", "tick_mode": "realtime",
                                              "tick_interval_ms": 50}, headers=ADMIN)  # fmt: skip
    assert same.status_code == 201  # an identical retry
    other = await client.post("/worlds", json={"name": "game", "world_id": "game", "tick_mode": "realtime"}, headers=ADMIN)
    assert (other.status_code, other.json()["code"]) == (409, "world_exists")  # 100 ms is another world


async def test_every_mutation_spelling_is_admitted_and_applied(client, world, authority):
    spawn = await client.post(
        f"/worlds/{world}/commands",
        json={"type": "spawn", "tick": 0, "components": [value(Position(x=1, y=2))]},
        headers=auth("t-player", **{"Idempotency-Key": "spawn-1"}),
    )
    assert spawn.status_code == 202
    entity = spawn.json()["entity_id"]
    assert spawn.json()["command_id"] == "spawn-1" and entity >= 1

    later = [
        {"type": "add_components", "tick": 1, "entity_id": entity, "components": [value(Health(hp=3))]},
        {"type": "update", "tick": 2, "entity_id": entity, "components": [value(Position(x=5, y=5))]},
        {"type": "remove_components", "tick": 3, "entity_id": entity, "component_types": [ref(Health)]},
        {"type": "despawn", "tick": 4, "entity_id": entity, "priority": 1, "max_attempts": 1},
    ]
    for index, body in enumerate(later):
        answer = await client.post(f"/worlds/{world}/commands", json={**body, "command_id": f"c{index}"}, headers=PLAYER)
        assert answer.status_code == 202, answer.text

    runner = Runtime(authority, owner="runner")
    for _ in range(5):
        assert await runner.dispatcher.apply(Step(world_id=world)) == 1

    page = (await client.get(f"/worlds/{world}/commands", headers=PLAYER)).json()
    assert [(c["command_id"], c["operation"], c["status"], c["applied_tick"]) for c in page["commands"]] == [
        ("spawn-1", "spawn_reserved", "APPLIED", 0),
        ("c0", "add_components", "APPLIED", 1),
        ("c1", "update", "APPLIED", 2),
        ("c2", "remove_components", "APPLIED", 3),
        ("c3", "despawn", "APPLIED", 4),
    ]
    assert {c["principal"] for c in page["commands"]} == {"pat"}
    assert {c["origin"] for c in page["commands"]} == {"gateway"}
    assert page["commands"][4]["priority"] == 1 and page["commands"][4]["max_attempts"] == 1
    assert page["commands"][0]["reserved_entity_id"] == entity


async def test_command_status_and_history_paging(client, world):
    for index in range(5):
        body = {"type": "despawn", "tick": index, "entity_id": 100 + index}
        await client.post(f"/worlds/{world}/commands", json=body, headers=auth("t-player", **{"Idempotency-Key": f"d{index}"}))

    status = await client.get(f"/worlds/{world}/commands/d3", headers=PLAYER)
    assert status.status_code == 200
    assert status.json()["payload"] == {"operation": "despawn", "world_id": world, "entity_id": 103}
    assert status.json()["status"] == "PENDING" and status.json()["scheduled_tick"] == 3
    unknown = await client.get(f"/worlds/{world}/commands/nope", headers=PLAYER)
    assert (unknown.status_code, unknown.json()["code"]) == (404, "command_not_found")

    first = (await client.get(f"/worlds/{world}/commands", params={"limit": 2}, headers=PLAYER)).json()
    assert [c["command_id"] for c in first["commands"]] == ["d0", "d1"] and first["next_after"] == 2
    rest = (await client.get(f"/worlds/{world}/commands", params={"after": 2, "limit": 10}, headers=PLAYER)).json()
    assert [c["command_id"] for c in rest["commands"]] == ["d2", "d3", "d4"] and rest["next_after"] is None
    pending = (await client.get(f"/worlds/{world}/commands", params={"status": "PENDING"}, headers=PLAYER)).json()
    assert len(pending["commands"]) == 5
    applied = (await client.get(f"/worlds/{world}/commands", params={"status": "APPLIED"}, headers=PLAYER)).json()
    assert applied["commands"] == []


@pytest.mark.parametrize("reader", ["t-player2", "t-viewer"])
async def test_a_principals_commands_are_invisible_below_the_operator_role(client, world, reader):
    body = {"type": "despawn", "tick": 0, "entity_id": 1}
    await client.post(f"/worlds/{world}/commands", json=body, headers=auth("t-player", **{"Idempotency-Key": "mine"}))
    other = await client.get(f"/worlds/{world}/commands/mine", headers=auth(reader))
    assert (other.status_code, other.json()["code"]) == (404, "command_not_found")  # as if it did not exist
    assert (await client.get(f"/worlds/{world}/commands", headers=auth(reader))).json()["commands"] == []
    outcomes = await client.post(f"/worlds/{world}/commands:outcomes", json={"command_ids": ["mine"]}, headers=auth(reader))
    assert outcomes.json() == {"commands": [], "missing": ["mine"]}  # as if it did not exist
    reads = [("GET", f"/worlds/{world}/commands", None), ("GET", f"/worlds/{world}/commands/mine", None),
             ("POST", f"/worlds/{world}/commands:outcomes", {"command_ids": ["mine"]})]  # fmt: skip
    for method, path, body in reads:
        for params in ({"principal": "pat"}, {"trusted": True}):
            named = await client.request(method, path, params=params, json=body, headers=auth(reader))
            assert (named.status_code, named.json()["code"]) == (403, "permission_denied")


async def test_operators_read_every_principals_commands(client, world):
    body = {"type": "despawn", "tick": 0, "entity_id": 1}
    for token in ("t-player", "t-player2"):
        await client.post(f"/worlds/{world}/commands", json=body, headers=auth(token, **{"Idempotency-Key": "same"}))
    everyone = (await client.get(f"/worlds/{world}/commands", headers=OPERATOR)).json()["commands"]
    assert [(c["command_id"], c["principal"]) for c in everyone] == [("same", "pat"), ("same", "quinn")]
    quinns = (await client.get(f"/worlds/{world}/commands", params={"principal": "quinn"}, headers=OPERATOR)).json()
    assert [c["principal"] for c in quinns["commands"]] == ["quinn"]
    one = await client.get(f"/worlds/{world}/commands/same", params={"principal": "quinn"}, headers=OPERATOR)
    assert one.json()["principal"] == "quinn"
    many = await client.post(f"/worlds/{world}/commands:outcomes", params={"principal": "quinn"},
                             json={"command_ids": ["same", "other"]}, headers=OPERATOR)  # fmt: skip
    assert [c["principal"] for c in many.json()["commands"]] == ["quinn"] and many.json()["missing"] == ["other"]


async def test_batch_is_all_or_nothing(client, world, snapshot):
    good = {"type": "despawn", "tick": 0, "entity_id": 7}
    batch = await client.post(
        f"/worlds/{world}/commands:batch",
        json={"commands": [good, {**good, "entity_id": 8, "command_id": "own-id"}]},
        headers=auth("t-player", **{"Idempotency-Key": "b1"}),
    )
    assert batch.status_code == 202
    assert [c["command_id"] for c in batch.json()["commands"]] == ["b1.0", "own-id"]
    assert [c["sequence"] for c in batch.json()["commands"]] == [1, 2]

    before = snapshot()
    conflicting = await client.post(
        f"/worlds/{world}/commands:batch",
        json={"commands": [{**good, "command_id": "fresh"}, {**good, "entity_id": 99, "command_id": "own-id"}]},
        headers=PLAYER,
    )
    assert (conflicting.status_code, conflicting.json()["code"]) == (409, "command_conflict")
    assert snapshot() == before  # the fresh command of the failed batch was not admitted either

    replay = await client.post(
        f"/worlds/{world}/commands:batch",
        json={"commands": [good, {**good, "entity_id": 8, "command_id": "own-id"}]},
        headers=auth("t-player", **{"Idempotency-Key": "b1"}),
    )
    assert [c["replayed"] for c in replay.json()["commands"]] == [True, True]
    assert snapshot() == before


async def test_health_and_openapi(client, app):
    assert (await client.get("/health")).json() == {"status": "ok"}
    schema = (await client.get("/openapi.json")).json()
    assert {"/worlds", "/worlds/{world_id}", "/worlds/{world_id}/commands", "/worlds/{world_id}/commands:batch",
            "/worlds/{world_id}/commands/{command_id}", "/worlds/{world_id}/ledger/{method}"} <= set(schema["paths"])  # fmt: skip

    app.state.admission.close()
    closed = await client.post("/worlds", json={"name": "late"}, headers=ADMIN)
    assert (closed.status_code, closed.json()["code"]) == (503, "shutting_down")
    assert (await client.get("/health")).status_code == 503
    assert (await client.get("/worlds/w1", headers=VIEWER)).status_code == 404  # reads keep working
