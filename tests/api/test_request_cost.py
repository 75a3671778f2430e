"""What a request costs the server beyond its answer: no dependency runs in a worker thread, and
world creation is one ledger call (docs/performance.md, "Many worlds in one serve")."""

from __future__ import annotations

from typing import Any

import fastapi.dependencies.utils
import httpx

from archetype.api import create_app
from tests.api.conftest import ADMIN, PLAYER, TOKENS, VIEWER


async def test_no_route_dependency_runs_in_a_worker_thread(authority, monkeypatch):
    """FastAPI hands a plain-function dependency to a worker thread (a thread hop and a GIL
    hand-over per dependency per request); every dependency of ours is a coroutine."""

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"a dependency ran in a worker thread: {args[:1]}")

    monkeypatch.setattr(fastapi.dependencies.utils, "run_in_threadpool", refused)
    app = create_app(authority, tokens=TOKENS, telemetry=True)  # every request through the framework
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as client:
        assert (await client.post("/worlds", json={"name": "a", "world_id": "w1"}, headers=ADMIN)).status_code == 201
        submitted = await client.post("/worlds/w1/commands", json={"type": "despawn", "tick": 0, "entity_id": 1},
                                      headers={**PLAYER, "Idempotency-Key": "k1"})  # fmt: skip
        assert submitted.status_code == 202
        assert (await client.get("/worlds/w1", headers=VIEWER)).status_code == 200
        assert (await client.post("/ledger/list_worlds", json={}, headers=ADMIN)).status_code == 200


async def test_world_creation_is_one_ledger_call(authority):
    calls: list[str] = []
    rpc = authority.rpc

    async def counted(method: str, arguments: dict[str, Any]) -> Any:
        calls.append(method)
        return await rpc(method, arguments)

    authority.rpc = counted
    for app in (create_app(authority, tokens=TOKENS), create_app(authority, tokens=TOKENS, telemetry=True)):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as client:
            calls.clear()
            created = await client.post("/worlds", json={"name": "a", "world_id": "w1"}, headers=ADMIN)
            assert created.status_code == 201 and created.json()["world_id"] == "w1"
            assert calls == ["create_world"]
