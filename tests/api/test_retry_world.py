"""POST /worlds/{id}/retry: an operator's "retry now" of a stalled world (docs/ledger.md, "World
health"): operator only, typed refusals, asking twice is asking once, every answer one the
published OpenAPI allows; and the typed client's `retry_world` speaks it."""

from __future__ import annotations

import json

import httpx
import pytest

from archetype import AsyncClient
from archetype.commands import PermissionDeniedError, WorldNotFoundError
from archetype.runtime import Runtime
from tests.api.conftest import ADMIN, OPERATOR, PLAYER, VIEWER
from tests.api.test_openapi import check
from tests.component_modules.flaky import Probe
from tests.conformance.helpers import probe

ROUTE = "/worlds/{world_id}/retry"


async def stall(authority, world_id: str, times: int) -> None:
    runner = Runtime(authority, owner="runner")
    world = await runner.worlds.get(world_id)

    def overheat(w, tick, entity_id, components):
        raise RuntimeError("the reactor overheated")

    await runner.dispatcher.apply(probe(world_id, "hot"))
    world.add_processor(overheat, Probe)
    for _ in range(times):
        with pytest.raises(RuntimeError):
            await runner.worlds.step(world_id)
    await runner.worlds.close()


async def test_an_operator_retries_a_stalled_world_now(client, world, authority):
    await stall(authority, world, 3)
    url = f"/worlds/{world}/retry"
    for headers in (PLAYER, VIEWER):
        refused = await client.post(url, headers=headers)
        check(refused, ROUTE)
        assert (refused.status_code, refused.json()["code"]) == (403, "permission_denied")
    ghost = await client.post("/worlds/ghost/retry", headers=OPERATOR)
    check(ghost, ROUTE)
    assert (ghost.status_code, ghost.json()["code"]) == (404, "world_not_found")
    assert (await client.get(f"/worlds/{world}", headers=VIEWER)).json()["health"]["failed_attempts"] == 3

    first = await client.post(url, headers=OPERATOR)
    again = await client.post(url, headers=OPERATOR)
    for response in (first, again):
        check(response, ROUTE)
        assert response.status_code == 200, response.text
    health = first.json()["health"]
    assert (health["status"], health["failed_attempts"], health["last_error"]) == ("STALLED", 0, "RuntimeError: the reactor overheated")
    assert again.json() == first.json() == (await client.get(f"/worlds/{world}", headers=VIEWER)).json()
    events = [e for e in await authority.read_outbox(world, limit=100) if e["command_id"] == ""]
    assert [e["event_type"] for e in events] == ["world_stalled", "world_retry_requested"]  # once, though asked twice
    assert [json.loads(e["payload"])["actor"] for e in events] == [None, "runner"]  # the operator token's principal

    assert (await client.delete(f"/worlds/{world}", headers=ADMIN)).status_code == 200
    closed = await client.post(url, headers=OPERATOR)
    check(closed, ROUTE)
    assert (closed.status_code, closed.json()["code"]) == (409, "world_closing")


async def test_the_typed_client_retries_a_world(app, world, authority):
    await stall(authority, world, 2)
    transport = httpx.ASGITransport(app=app)
    operator = AsyncClient("http://local", token="t-operator", transport=transport)
    player = AsyncClient("http://local", token="t-player", transport=transport)
    retried = await operator.retry_world(world)
    assert (retried.health.status, retried.health.failed_attempts) == ("STALLED", 0)
    with pytest.raises(PermissionDeniedError):
        await player.retry_world(world)
    with pytest.raises(WorldNotFoundError):
        await operator.retry_world("ghost")
    await operator.close()
    await player.close()
