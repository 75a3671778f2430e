"""Bad input is a 4xx with a stable code, never a 5xx, and it persists nothing."""

from __future__ import annotations

import pytest

from tests.api.conftest import ADMIN, MAX_BODY, OPERATOR, PLAYER
from tests.api.test_routes import value
from tests.component_modules.alpha import Position

DESPAWN = {"type": "despawn", "tick": 0, "entity_id": 1}
FINGERPRINT = "0" * 64

BAD_COMMANDS = [
    ({"type": "message", "tick": 0}, "unsupported_command_type"),
    ({"type": "custom", "tick": 0, "entity_id": 1}, "unsupported_command_type"),
    ({"type": "query_world", "tick": 0}, "unsupported_command_type"),
    ({"type": "spawn_reserved", "tick": 0, "entity_id": 1}, "unsupported_command_type"),
    ({"type": "Spawn", "tick": 0}, "unsupported_command_type"),
    ({**DESPAWN, "colour": "red"}, "invalid_request"),
    ({**DESPAWN, "world_id": "elsewhere"}, "invalid_request"),
    ({**DESPAWN, "operation": "despawn"}, "invalid_request"),
    ({"type": "despawn", "entity_id": 1}, "invalid_request"),
    ({**DESPAWN, "tick": "0"}, "invalid_request"),
    ({**DESPAWN, "tick": True}, "invalid_request"),
    ({**DESPAWN, "tick": -1}, "invalid_request"),
    ({**DESPAWN, "tick": 2**60}, "invalid_request"),
    ({**DESPAWN, "tick": 1.5}, "invalid_request"),
    ({**DESPAWN, "priority": 2**40}, "invalid_request"),
    ({**DESPAWN, "max_attempts": 0}, "invalid_request"),
    ({**DESPAWN, "entity_id": 0}, "invalid_request"),
    ({**DESPAWN, "entity_id": "1"}, "invalid_request"),
    ({**DESPAWN, "command_id": "has space"}, "invalid_request"),
    ({**DESPAWN, "components": []}, "invalid_request"),
    ({"type": "spawn", "tick": 0}, "invalid_request"),
    ({"type": "spawn", "tick": 0, "components": []}, "invalid_request"),
    ({"type": "spawn", "tick": 0, "components": [{"name": "P", "fingerprint": "nope", "data": {}}]}, "invalid_request"),
    ({"type": "spawn", "tick": 0, "components": [{"name": "P", "fingerprint": FINGERPRINT}]}, "invalid_request"),
    ({"type": "spawn", "tick": 0, "components": [{"name": "P", "fingerprint": FINGERPRINT, "data": {}, "x": 1}]}, "invalid_request"),
    ({"type": "spawn", "tick": 0, "components": "Position"}, "invalid_request"),
    ({"type": "update", "tick": 0, "entity_id": 1, "component_types": [{"name": "P", "fingerprint": FINGERPRINT}]}, "invalid_request"),
    ({"type": "remove_components", "tick": 0, "entity_id": 1, "components": []}, "invalid_request"),
    ([DESPAWN], "invalid_request"),
    ("despawn", "invalid_request"),
    (None, "invalid_request"),
]


@pytest.mark.parametrize("body,code", BAD_COMMANDS)
async def test_bad_commands_are_refused_with_a_code_and_persist_nothing(client, world, snapshot, body, code):
    before = snapshot()
    response = await client.post(f"/worlds/{world}/commands", json=body, headers=PLAYER)
    assert response.status_code == 422, response.text
    assert response.json()["code"] == code and response.json()["message"]
    batch = await client.post(f"/worlds/{world}/commands:batch", json={"commands": [DESPAWN, body]}, headers=PLAYER)
    assert (batch.status_code, batch.json()["code"]) == (422, code)
    assert snapshot() == before


async def test_legacy_spellings_are_named_as_such(client, world):
    response = await client.post(f"/worlds/{world}/commands", json={"type": "message", "tick": 0}, headers=PLAYER)
    assert "legacy" in response.json()["message"] and "not even a no-op" in response.json()["message"]


@pytest.mark.parametrize(
    "raw,content_type",
    [(b"{", "application/json"), (b'{"type": "despawn",}', "application/json"), (b"\xff\xfe", "application/json"),
     (b"", "application/json"), (b"type=despawn", "application/x-www-form-urlencoded")],
)  # fmt: skip
async def test_malformed_bodies(client, world, snapshot, raw, content_type):
    before = snapshot()
    response = await client.post(f"/worlds/{world}/commands", content=raw, headers={**PLAYER, "Content-Type": content_type})
    assert response.status_code in (400, 422), response.text
    assert response.json()["code"] in ("invalid_json", "invalid_request")
    assert snapshot() == before


async def test_oversized_bodies_are_refused_before_parsing(client, world, snapshot):
    before = snapshot()
    big = {"type": "spawn", "tick": 0, "components": [value(Position(x=0, y=0))] * 1, "pad": "x" * MAX_BODY}
    declared = await client.post(f"/worlds/{world}/commands", json=big, headers=PLAYER)
    assert (declared.status_code, declared.json()["code"]) == (413, "payload_too_large")

    async def chunks():
        for _ in range(MAX_BODY // 1000 + 2):
            yield b" " * 1000  # no Content-Length: the limit counts the streamed bytes

    streamed = await client.post(f"/worlds/{world}/commands", content=chunks(), headers={**PLAYER, "Content-Type": "application/json"})
    assert (streamed.status_code, streamed.json()["code"]) == (413, "payload_too_large")
    unauthenticated = await client.post(f"/worlds/{world}/commands", json=big)
    assert unauthenticated.status_code == 413  # the limit guards every route, before anything else
    assert snapshot() == before


@pytest.mark.parametrize(
    "path,body,status,code",
    [
        ("/worlds/{w}/ledger/drop_tables", {}, 400, "unregistered_operation"),
        ("/worlds/{w}/ledger/_migrate", {}, 400, "unregistered_operation"),
        ("/worlds/{w}/ledger/lease", {}, 422, "invalid_request"),
        ("/worlds/{w}/ledger/lease", {"owner": "o", "writer_epoch": "1", "tick": 0, "limit": 1, "lease_ms": 1}, 422, "invalid_request"),
        ("/worlds/{w}/ledger/reserve_entity_ids", {"count": 2**62}, 422, "invalid_request"),
        ("/worlds/{w}/ledger/reserve_entity_ids", {"count": 0}, 422, "invalid_request"),
        ("/worlds/{w}/ledger/world_info", {"world_id": "other"}, 422, "invalid_request"),
        ("/worlds/{w}/ledger/list_worlds", {}, 422, "invalid_request"),
        ("/ledger/world_info", {}, 422, "invalid_request"),
        ("/worlds/{w}/ledger/publish", {"owner": "o", "manifest": {}, "writes": []}, 422, "invalid_request"),
        ("/worlds/{w}/ledger/admit", {"commands": [{"command_id": "x"}]}, 422, "invalid_request"),
        ("/worlds/{w}/ledger/admit", {"commands": []}, 422, "invalid_command"),
        ("/worlds/{w}/ledger/guard", {"owner": "o", "session": "s", "writer_epoch": 1, "sequence": "1"}, 422, "invalid_request"),
        ("/worlds/{w}/ledger/fail", {"owner": "o", "command_id": "c", "permanent": True, "error": "e"}, 400, "unregistered_operation"),
    ],
)
async def test_runner_protocol_refuses_what_is_not_allowlisted_or_well_typed(client, world, snapshot, path, body, status, code):
    before = snapshot()
    response = await client.post(path.format(w=world), json=body, headers=ADMIN)
    assert (response.status_code, response.json()["code"]) == (status, code), response.text
    assert snapshot() == before


@pytest.mark.parametrize("settings", [
    {"tick_mode": "sometimes"}, {"tick_mode": "LOCKSTEP"}, {"tick_mode": None}, {"tick_mode": 1},
    {"tick_mode": "realtime", "tick_interval_ms": 0}, {"tick_interval_ms": -1}, {"tick_interval_ms": 86_400_001},
    {"tick_interval_ms": 1.5}, {"tick_interval_ms": "100"}, {"tick_interval_ms": True}, {"tick_interval_ms": None},
    {"tick_rate": 10},
])  # fmt: skip
async def test_bad_tick_settings_are_refused_and_create_nothing(client, snapshot, settings):
    before = snapshot()
    response = await client.post("/worlds", json={"name": "bad", "world_id": "bad", **settings}, headers=ADMIN)
    assert (response.status_code, response.json()["code"]) == (422, "invalid_request"), response.text
    assert snapshot() == before
    assert (await client.get("/worlds/bad", headers=ADMIN)).json()["code"] == "world_not_found"


@pytest.mark.parametrize("settings,code", [
    ({"tick_mode": "sometimes"}, "invalid_command"),
    ({"tick_mode": "realtime", "tick_interval_ms": 0}, "invalid_command"),
    ({"tick_interval_ms": -1}, "invalid_request"),  # out of the argument's bounds: refused before the ledger
    ({"tick_interval_ms": 86_400_001}, "invalid_request"),
])  # fmt: skip
async def test_the_runner_protocol_refuses_bad_tick_settings_too(client, snapshot, settings, code):
    before = snapshot()
    response = await client.post("/worlds/bad/ledger/create_world", json={"name": "bad", **settings}, headers=ADMIN)
    assert (response.status_code, response.json()["code"]) == (422, code), response.text
    assert snapshot() == before


async def test_unknown_routes_and_methods(client):
    assert (await client.get("/nope", headers=OPERATOR)).json()["code"] == "not_found"
    assert (await client.put("/worlds", headers=OPERATOR)).json()["code"] == "method_not_allowed"
    bad_world = await client.get("/worlds/bad%20id", headers=OPERATOR)
    assert (bad_world.status_code, bad_world.json()["code"]) == (422, "invalid_request")
