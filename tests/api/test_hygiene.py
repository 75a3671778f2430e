"""HTTP hygiene at the front door: no redirect built from the client's Host header, single-valued
headers sent once, and the issue's hostile bodies answered with documented codes."""

from __future__ import annotations

import pytest

from tests.api.conftest import ADMIN, PLAYER

DESPAWN = {"type": "despawn", "tick": 0, "entity_id": 1}


@pytest.mark.parametrize("path", ["/worlds/w1/", "/worlds/", "/health/", "/worlds/w1/commands/"])
async def test_a_trailing_slash_is_not_found_and_never_redirects_to_the_host_header(client, world, path):
    response = await client.get(path, headers={**ADMIN, "Host": "evil.example"})
    assert (response.status_code, response.json()["code"]) == (404, "not_found")
    assert "location" not in response.headers


@pytest.mark.parametrize(
    "headers",
    [
        [("Authorization", "Bearer t-player"), ("Idempotency-Key", "k1"), ("Idempotency-Key", "k2")],
        [("Authorization", "Bearer t-player"), ("Idempotency-Key", "k1"), ("Idempotency-Key", "k1")],
        [("Authorization", "Bearer t-player"), ("Authorization", "Bearer t-admin")],
        [("Authorization", "Bearer t-player"), ("Content-Type", "application/json"), ("Content-Type", "text/plain")],
    ],
    ids=["two-keys", "the-same-key-twice", "two-tokens", "two-content-types"],
)
async def test_a_single_valued_header_sent_twice_is_refused_and_persists_nothing(client, world, snapshot, headers):
    before = snapshot()
    response = await client.post(f"/worlds/{world}/commands", json=DESPAWN, headers=headers)
    assert (response.status_code, response.json()["code"]) == (400, "duplicate_header"), response.text
    assert snapshot() == before


async def test_one_idempotency_key_still_names_the_command(client, world):
    response = await client.post(f"/worlds/{world}/commands", json=DESPAWN, headers={**PLAYER, "Idempotency-Key": "k1"})
    assert (response.status_code, response.json()["command_id"]) == (202, "k1")


@pytest.mark.parametrize(
    "body",
    [
        b'{"type":"message","type":"spawn","tick":0,"components":[]}',  # the issue's: last one would win
        b'{"type":"despawn","tick":0,"entity_id":' + b"9" * 4400 + b"}",
        b"[" * 1000 + b"]" * 1000,
    ],
    ids=["duplicate-type", "4400-digits", "depth-1000"],
)
async def test_the_issues_hostile_bodies_answer_non_canonical_value(client, world, snapshot, body):
    before = snapshot()
    response = await client.post(f"/worlds/{world}/commands", content=body, headers={**PLAYER, "Content-Type": "application/json"})
    assert (response.status_code, response.json()["code"]) == (422, "non_canonical_value"), response.text
    assert snapshot() == before
