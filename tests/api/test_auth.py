"""Bearer tokens and roles: 401 without a known token, and role denial before any world lookup."""

from __future__ import annotations

import pytest

from archetype.api.auth import TokenTable, TokenTableError
from archetype.commands import ActorCtx, Role
from tests.api.conftest import ADMIN, NOBODY, PLAYER, VIEWER, auth

DESPAWN = {"type": "despawn", "tick": 0, "entity_id": 1}

# (method, path template, body, the weakest headers that are still refused)
GUARDED = [
    ("GET", "/worlds/{w}", None, NOBODY),
    ("DELETE", "/worlds/{w}", None, PLAYER),
    ("POST", "/worlds/{w}/retry", None, PLAYER),
    ("POST", "/worlds/{w}/commands", DESPAWN, VIEWER),
    ("POST", "/worlds/{w}/commands:batch", {"commands": [DESPAWN]}, VIEWER),
    ("GET", "/worlds/{w}/commands/c1", None, NOBODY),
    ("GET", "/worlds/{w}/commands", None, NOBODY),
    ("POST", "/worlds/{w}/ledger/history", {}, PLAYER),
    ("POST", "/worlds/{w}/ledger/acknowledge_outbox", {"up_to_seq": 0}, ADMIN),
    ("POST", "/worlds/{w}/ledger/admit", {"commands": []}, auth("t-operator")),
]


@pytest.mark.parametrize("method,path,body,refused", GUARDED)
async def test_unauthorised_callers_cannot_tell_whether_a_world_exists(client, world, snapshot, method, path, body, refused):
    before = snapshot()
    for headers, status, code in (
        ({}, 401, "unauthenticated"),
        ({"Authorization": "Bearer not-a-token"}, 401, "unauthenticated"),
        ({"Authorization": "Basic dDpw"}, 401, "unauthenticated"),
        (refused, 403, "permission_denied"),
    ):
        answers = []
        for world_id in (world, "no-such-world"):
            response = await client.request(method, path.format(w=world_id), json=body, headers=headers)
            answers.append((response.status_code, response.json()))
        assert answers[0] == answers[1], f"{method} {path} tells worlds apart for {headers}"
        assert answers[0][0] == status and answers[0][1]["code"] == code
    assert snapshot() == before


async def test_authentication_comes_before_body_validation(client, world):
    bad = await client.post(f"/worlds/{world}/commands", json={"type": "message"}, headers={})
    assert bad.status_code == 401 and bad.headers["www-authenticate"] == "Bearer"
    denied = await client.post(f"/worlds/{world}/commands", json={"type": "message"}, headers=VIEWER)
    assert denied.status_code == 403


async def test_roles_are_ranked(client, world):
    assert (await client.get(f"/worlds/{world}", headers=ADMIN)).status_code == 200
    assert (await client.post(f"/worlds/{world}/commands", json=DESPAWN, headers=ADMIN)).status_code == 202
    assert (await client.post("/worlds", json={"name": "x"}, headers=PLAYER)).status_code == 403


def test_token_table_from_json():
    table = TokenTable.from_json('{"s3cret": {"principal": "alice", "roles": ["player", "viewer"]}}')
    assert table.authenticate("s3cret") == ActorCtx(principal="alice", roles=frozenset({Role.player, Role.viewer}))



@pytest.mark.parametrize(
    "text,says",
    [
        ('{"t": {"roles": ["admin"]}}', "entry 1 principal: Field required"),
        ('{"t": {"principal": "a", "roles": "admin"}}', "entry 1 roles: Input should be a valid list"),
        ('{"t": {"principal": "a", "roles": ["god"]}}', "entry 1 roles[0]: Input should be 'viewer', 'player', 'analyst'"),
        ('{"t": {"principal": "a", "role": ["admin"]}}', "entry 1 role: Extra inputs are not permitted"),
        ('{"t": {"principal": "a\\u202eb", "roles": []}}', "entry 1 principal: Value error, U+202E (RIGHT-TO-LEFT OVERRIDE"),
        ('{"ok": {"principal": "a"}, "s3cret": 5}', "entry 2: Input should be a valid dictionary"),
        ('{"two words": {"principal": "a"}}', "entry 1's token: String should match pattern"),
        ('["t"]', "a JSON object"),
        ("{nope", "not JSON"),
    ],
)
def test_a_bad_token_table_is_one_line_naming_the_entry_never_the_token(text, says):
    with pytest.raises(TokenTableError) as refused:
        TokenTable.from_json(text)
    message = str(refused.value)
    assert says in message and "\n" not in message, message
    assert "s3cret" not in message and "two words" not in message
