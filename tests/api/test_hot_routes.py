"""HotRoutes (archetype.api.hot) answers single-command admission, world creation and /health byte
for byte as the framework's routes do, and leaves every request it is not sure of to them."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from archetype.api import create_app
from archetype.api.auth import TokenTable
from archetype.api.hot import ACTORS_KEPT, HotRoutes
from archetype.api.models import CommandAccepted
from archetype.commands.options import Role
from archetype.commands.scheduler import CommandIdentity
from local_catalog import open_local_authority
from tests.api.conftest import MAX_BODY, QUOTA, TOKENS, auth
from tests.api.test_routes import value
from tests.component_modules.alpha import Position

COMMANDS = "/worlds/w1/commands"


def despawn(entity_id: int = 1, tick: int = 0) -> dict[str, Any]:
    return {"type": "despawn", "tick": tick, "entity_id": entity_id}


def keyed(key: str, token: str = "t-player") -> dict[str, str]:
    return auth(token, **{"Idempotency-Key": key})


# (method, path, body as JSON or raw bytes, headers); `hot` marks what HotRoutes itself answers
REQUESTS: list[tuple[str, str, Any, dict[str, str], bool]] = [
    ("GET", "/health", None, {}, True),
    ("POST", COMMANDS, despawn(), keyed("k1"), True),
    ("POST", COMMANDS, despawn(), keyed("k1"), True),  # a replay
    ("POST", COMMANDS, despawn(entity_id=2), keyed("k1"), True),  # a conflict: 409 from the ledger
    ("POST", COMMANDS, {**despawn(entity_id=3), "command_id": "k-field"}, auth("t-player"), True),  # no header key
    ("POST", COMMANDS, {"type": "spawn", "tick": 0, "components": [value(Position(x=0, y=0))]}, keyed("ship"), True),
    *[("POST", COMMANDS, despawn(entity_id=9, tick=5), keyed(f"q{i}"), True) for i in range(QUOTA + 1)],  # the last: quota
    ("POST", "/worlds/nowhere/commands", despawn(), keyed("k2"), True),  # world_not_found
    ("POST", COMMANDS, {"type": "despawn", "tick": 0, "entity_id": 1, "command_id": "k-a"}, keyed("k-b"), True),
    ("POST", COMMANDS, despawn(), keyed("k3", "t-viewer"), False),  # no player role
    ("POST", COMMANDS, despawn(), keyed("k3", "t-unknown"), False),
    ("POST", COMMANDS, despawn(), {"Authorization": "Basic dXNlcjpwYXNz", "Idempotency-Key": "k3"}, False),
    ("POST", COMMANDS, despawn(), {"Idempotency-Key": "k3"}, False),
    ("POST", COMMANDS, despawn(), keyed("no spaces allowed"), False),
    ("POST", COMMANDS, {"type": "despawn", "tick": 0}, keyed("k4"), False),  # fails validation
    ("POST", COMMANDS, {"type": "teleport", "tick": 0}, keyed("k4"), False),
    ("POST", COMMANDS, b'{"type": "despawn",', {**keyed("k4"), "Content-Type": "application/json"}, False),
    ("POST", COMMANDS, b'{"type": "despawn", "tick": 0, "entity_id": 1}', {**keyed("k5"), "Content-Type": "text/plain"}, False),
    ("POST", COMMANDS, b"", {**keyed("k5"), "Content-Type": "application/json"}, False),
    ("POST", "/worlds/bad world/commands", despawn(), keyed("k6"), False),
    ("GET", COMMANDS, None, auth("t-player"), False),
    ("GET", "/health?x=1", None, {}, True),
    ("POST", "/worlds", {"name": "second", "world_id": "w2"}, auth("t-admin"), True),
    ("POST", "/worlds", {"name": "second", "world_id": "w2"}, auth("t-admin", **{"Idempotency-Key": "not a key"}), True),
    ("POST", "/worlds", {"name": "other", "world_id": "w2"}, auth("t-admin"), True),  # world_exists
    ("POST", "/worlds", {"name": "third", "world_id": "w3"}, auth("t-player"), False),
    ("POST", "/worlds", {"name": "third", "world_id": "w3", "extra": 1}, auth("t-admin"), False),
    ("POST", "/worlds", {"name": "third", "world_id": "not valid"}, auth("t-admin"), False),
]


async def answers(app: Any, count: dict[str, int] | None = None) -> list[tuple[Any, ...]]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as client:
        created = await client.post("/worlds", json={"name": "arena", "world_id": "w1"}, headers=auth("t-admin"))
        assert created.status_code == 201
        found = []
        for method, path, body, headers, _ in REQUESTS:
            before = dict(count or {})
            kwargs: dict[str, Any] = {"content": body} if isinstance(body, bytes) else {"json": body} if body is not None else {}
            response = await client.request(method, path, headers=headers, **kwargs)
            # every header, in order, as the app sent it: the answers are the same bytes whichever path gave them
            answer = (response.status_code, response.headers.raw, response.content)
            found.append((*answer, count != before) if count is not None else answer)
        return found


def hot_layer(app: Any) -> HotRoutes:
    """The app's HotRoutes instance, among its front layers."""
    layer = app._front
    while not isinstance(layer, HotRoutes):
        layer = layer.app
    return layer


def counting(app: Any, count: dict[str, int]) -> None:
    """Count what HotRoutes answers itself: it names the framework's route of every request it
    answers."""
    layer = hot_layer(app)
    named = layer.route

    def route(method: str, path: str) -> Any:
        count["hot"] = count.get("hot", 0) + 1
        return named(method, path)

    layer.route = route  # type: ignore[method-assign]


@pytest.fixture
async def authorities(tmp_path, clock):
    made = [open_local_authority(tmp_path / name, clock=clock) for name in ("hot", "framework")]
    yield made
    for authority in made:
        await authority.close()


async def test_hot_routes_answer_as_the_framework_does(authorities):
    hot_app = create_app(authorities[0], tokens=TOKENS, quota=QUOTA, max_body_bytes=MAX_BODY)
    count: dict[str, int] = {}
    counting(hot_app, count)
    # with FastAPI's telemetry on, every request goes through the framework
    framework = create_app(authorities[1], tokens=TOKENS, quota=QUOTA, max_body_bytes=MAX_BODY, telemetry=True)
    hot_answers = await answers(hot_app, count)
    framework_answers = await answers(framework)
    assert [a[:3] for a in hot_answers] == framework_answers
    assert [a[3] for a in hot_answers] == [r[4] for r in REQUESTS]  # each answered by the path expected
    statuses = [a[0] for a in framework_answers]
    assert statuses[:6] == [200, 202, 202, 409, 202, 202] and 429 in statuses and 404 in statuses


async def test_a_closed_admission_gate_is_the_frameworks_to_answer(authorities):
    app = create_app(authorities[0], tokens=TOKENS, quota=QUOTA, max_body_bytes=MAX_BODY)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as client:
        await client.post("/worlds", json={"name": "arena", "world_id": "w1"}, headers=auth("t-admin"))
        app.state.admission.close()
        assert (await client.get("/health")).status_code == 503
        assert (await client.post(COMMANDS, json=despawn(), headers=keyed("k1"))).json()["code"] == "shutting_down"


async def test_a_known_token_is_looked_up_once_for_its_role_and_never_for_another(authorities):
    app = create_app(authorities[0], tokens=TOKENS, quota=QUOTA, max_body_bytes=MAX_BODY)
    layer = hot_layer(app)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as client:
        assert (await client.post("/worlds", json={"name": "arena", "world_id": "w1"}, headers=auth("t-admin"))).status_code == 201
        assert (await client.post(COMMANDS, json=despawn(), headers=keyed("k1"))).status_code == 202
        assert list(layer._actors) == [(b"Bearer t-admin", Role.admin), (b"Bearer t-player", Role.player)]
        # the player's token, known now, still lacks the admin role: the framework's 403, not a world
        refused = await client.post("/worlds", json={"name": "mine", "world_id": "w9"}, headers=auth("t-player"))
        assert refused.status_code == 403 and refused.json()["code"] == "permission_denied"
        # a new token table (a reload) drops every actor read from the old one
        app.state.tokens = TokenTable({"t-admin": TOKENS["t-admin"]})
        gone = await client.post(COMMANDS, json=despawn(entity_id=2), headers=keyed("k2"))
        assert gone.status_code == 401 and gone.json()["code"] == "unauthenticated"
        assert layer._actors == {}


async def test_the_actors_kept_are_bounded_and_unknown_tokens_are_not_kept(authorities):
    tokens = {f"t{i}": {"principal": f"p{i}", "roles": ["player"]} for i in range(ACTORS_KEPT + 5)}
    app = create_app(authorities[0], tokens={**TOKENS, **tokens}, quota=QUOTA, max_body_bytes=MAX_BODY)
    layer = hot_layer(app)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as client:
        await client.post("/worlds", json={"name": "arena", "world_id": "w1"}, headers=auth("t-admin"))
        for token in [*tokens, "t-unknown"]:
            assert (await client.post(COMMANDS, json=despawn(), headers=keyed("k1", token))).status_code in (202, 401)
            assert len(layer._actors) <= ACTORS_KEPT
        assert (b"Bearer t-unknown", Role.player) not in layer._actors


def failing_admissions(authority: Any) -> None:
    rpc = authority.rpc

    async def failing(method: str, arguments: dict[str, Any]) -> Any:
        if method == "admit":
            raise RuntimeError("the disk is on fire")
        return await rpc(method, arguments)

    authority.rpc = failing


async def test_an_unexpected_failure_is_answered_as_the_frameworks_error_page(authorities):
    """HotRoutes sits ahead of the framework's error page, so it gives the app's own answer to an
    exception nothing expected (500 `internal_error`) and raises it on for the server to log, as that page does."""
    answered = []
    for authority, telemetry in zip(authorities, (False, True), strict=True):
        app = create_app(authority, tokens=TOKENS, quota=QUOTA, max_body_bytes=MAX_BODY, telemetry=telemetry)
        count: dict[str, int] = {}
        if not telemetry:
            counting(app, count)
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://edge") as client:
            await client.post("/worlds", json={"name": "arena", "world_id": "w1"}, headers=auth("t-admin"))
            failing_admissions(authority)
            count.clear()
            response = await client.post(COMMANDS, json=despawn(), headers=keyed("k1"))
            answered.append((response.status_code, response.headers.raw, response.content))
        assert count == ({} if telemetry else {"hot": 1})
    assert answered[0] == answered[1]
    assert answered[0][0] == 500 and b'"code":"internal_error"' in answered[0][2] and b"RuntimeError" in answered[0][2]


@pytest.mark.parametrize("entity_id", [None, 1, 2**53 - 1])
@pytest.mark.parametrize("replayed", [False, True])
def test_an_admissions_json_is_the_json_of_its_model(entity_id, replayed):
    """HotRoutes writes CommandAccepted's JSON from the identity's own (CommandAccepted.json_of)."""
    identity = CommandIdentity(command_id="k-1.a:b_c", world_id="w.1_x-y", sequence=2**53 - 1, digest="ab" * 32,
                               replayed=replayed)  # fmt: skip
    accepted = CommandAccepted.of(identity, entity_id)
    assert CommandAccepted.json_of(identity, entity_id) == accepted.__pydantic_serializer__.to_json(accepted)
