"""The Worker's HTTP app with the env bindings wrangler.toml declares, in front of the real
WorldObject on the Durable Object stand-in: HTTP -> DurableObjectAuthority -> RPC -> ledger."""

from __future__ import annotations

import json
import sys
import types

import httpx
import pytest

from tests.support.durable_object_standin import FakeQueue, world_namespace
from worker import entry
from worker.entry import Default, WorldObject, build_app

pytestmark = pytest.mark.timeout(60)

TOKENS = {"admin-token": {"principal": "ops", "roles": ["admin", "player", "viewer"]},
          "viewer-token": {"principal": "eve", "roles": ["viewer"]}}  # fmt: skip


@pytest.fixture
def env(tmp_path, clock):
    queue = FakeQueue()
    namespace = world_namespace(tmp_path / "objects", clock, queue=queue)
    env = namespace.env
    env.ARCHETYPE_TOKENS = json.dumps(TOKENS)
    yield env
    namespace.close()


@pytest.fixture
async def client(env):
    transport = httpx.ASGITransport(app=build_app(env))
    async with httpx.AsyncClient(transport=transport, base_url="http://worker.test") as client:
        yield client


def auth(token):
    return {"Authorization": f"Bearer {token}"}


def test_the_entry_exports_the_durable_object_class():
    # wrangler.toml binds class_name = "WorldObject": the runtime finds it among the entry's exports
    import durable_world

    assert issubclass(WorldObject, durable_world.WorldObject) and WorldObject.__name__ == "WorldObject"
    assert WorldObject.MODULES == ()  # the source tree's worker.modules names none; a staged bundle's does
    assert [c.__name__ for c in Default.__mro__[1:2]] == ["WorkerEntrypoint"]


async def test_http_reaches_the_world_object_through_the_bindings(client, env):
    created = await client.post("/worlds", json={"name": "edge", "world_id": "w-edge"}, headers=auth("admin-token"))
    assert created.status_code == 201, created.text
    assert created.json()["status"] == "ACTIVE"

    submitted = await client.post(
        "/worlds/w-edge/commands",
        json={"type": "despawn", "tick": 3, "priority": 0, "max_attempts": 2, "entity_id": 7},
        headers={**auth("admin-token"), "Idempotency-Key": "despawn-7"},
    )
    assert submitted.status_code == 202, submitted.text
    assert submitted.json()["command_id"] == "despawn-7"

    status = await client.get("/worlds/w-edge/commands/despawn-7", headers=auth("admin-token"))
    assert status.status_code == 200 and status.json()["status"] == "PENDING"

    # the same command now lives in the world's Durable Object, and its admission event is queued
    assert [r["command_id"] for r in env.WORLDS.instance("w-edge").ledger.history("w-edge")] == ["despawn-7"]
    assert await env.WORLDS.run_alarm("w-edge")
    assert [(m["command_id"], m["event_type"]) for m in env.AUDIT_QUEUE.messages] == [("despawn-7", "admitted")]


async def test_errors_from_the_object_keep_their_code_over_http(client):
    missing = await client.get("/worlds/w-nowhere", headers=auth("viewer-token"))
    assert missing.status_code == 404 and missing.json()["code"] == "world_not_found"
    denied = await client.post("/worlds", json={"name": "x"}, headers=auth("viewer-token"))
    assert denied.status_code == 403 and denied.json()["code"] == "permission_denied"
    anonymous = await client.get("/worlds/w-nowhere")
    assert anonymous.status_code == 401


async def test_fetch_hands_every_request_to_one_app_through_the_asgi_bridge(env, monkeypatch):
    calls = []

    async def asgi_fetch(app, request, bindings):  # workerd's `asgi.fetch(app, request, env)`
        calls.append((app, request, bindings))
        return f"response to {request}"

    monkeypatch.setitem(sys.modules, "asgi", types.SimpleNamespace(fetch=asgi_fetch))
    monkeypatch.setattr(entry, "_app", None)
    assert await Default(None, env).fetch("request-1") == "response to request-1"
    await Default(None, env).fetch("request-2")
    (app, _, bindings), (again, _, _) = calls
    assert app is again and bindings is env
    assert any(getattr(route, "path", None) == "/worlds/{world_id}/commands" for route in app.routes)
