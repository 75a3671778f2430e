"""Runtime.open_remote: the same AsyncWorld and scheduler code stepping a world over real loopback HTTP."""

from __future__ import annotations

import httpx
import pytest

from archetype.api.errors import InternalError, ShuttingDownError, UnauthenticatedError
from archetype.commands import (
    CommandError,
    DurableOptions,
    PermissionDeniedError,
    StaleWriterError,
    WorldClosingError,
    WorldNotFoundError,
)
from archetype.remote import HttpAuthority
from archetype.runtime import Runtime
from archetype.world import ComponentValue, CreateWorld, DestroyWorld, QueryComponents, Spawn, Step, Update
from tests.component_modules.alpha import Position

pytestmark = pytest.mark.timeout(60)


async def test_a_remote_runtime_steps_commands_submitted_over_http(served):
    async with await Runtime.open_remote(served.url, token="t-admin") as admin:
        world_id = await admin.dispatcher.apply(CreateWorld(name="remote", world_id="r1"))
    async with httpx.AsyncClient(base_url=served.url, headers={"Authorization": "Bearer t-player"}) as player:
        spawn = {"type": "spawn", "tick": 0, "components": [ComponentValue.from_component(Position(x=1, y=1)).model_dump()]}
        entity = (await player.post(f"/worlds/{world_id}/commands", json=spawn, headers={"Idempotency-Key": "ship"})).json()["entity_id"]

    async with await Runtime.open_remote(served.url, token="t-operator", owner="remote-runner") as runner:
        assert await runner.dispatcher.apply(Step(world_id=world_id)) == 1
        found = await runner.dispatcher.apply(QueryComponents(world_id=world_id, component_types=[Position]))
        assert found == [(entity, (Position(x=1, y=1),))]
        (record,) = await runner.scheduler.history(world_id)
        assert (record.command_id, record.status.value, record.applied_tick, record.principal) == ("ship", "APPLIED", 0, "pat")
        assert record.operation_model.entity_id == entity
        assert (await runner.scheduler.command(world_id, "ship", scope="pat")).origin == "gateway"

    # a fresh runner resumes the published state from the authority
    async with await Runtime.open_remote(served.url, token="t-admin", owner="second-runner") as second:
        await second.dispatcher.defer(Update(world_id=world_id, entity_id=entity, components=[Position(x=9, y=9)]),
                                      DurableOptions(tick=1), command_id="move")  # fmt: skip
        assert await second.dispatcher.apply(Step(world_id=world_id)) == 1
        found = await second.dispatcher.apply(QueryComponents(world_id=world_id, component_types=[Position]))
        assert found == [(entity, (Position(x=9, y=9),))]
        assert [m["tick"] for m in await second.authority.manifests(world_id=world_id)] == [0, 1]


async def test_remote_errors_come_back_typed(served):
    async with await Runtime.open_remote(served.url, token="t-admin", owner="a") as first:
        world_id = await first.dispatcher.apply(CreateWorld(name="typed"))
        with pytest.raises(WorldNotFoundError):
            await first.dispatcher.apply(Step(world_id="missing"))
        await first.dispatcher.apply(Step(world_id=world_id))
        async with await Runtime.open_remote(served.url, token="t-operator", owner="b") as second:
            await second.dispatcher.apply(Step(world_id=world_id))  # fences the first runner's writer
        await first.dispatcher.defer(Spawn(world_id=world_id, components=[Position(x=0, y=0)]), DurableOptions(tick=0))
        with pytest.raises(StaleWriterError):
            await first.dispatcher.apply(Step(world_id=world_id))
        await first.dispatcher.apply(DestroyWorld(world_id=world_id))
        with pytest.raises(WorldClosingError):
            await first.dispatcher.defer(Spawn(world_id=world_id, components=[Position(x=0, y=0)]), DurableOptions(tick=0))

    async with await Runtime.open_remote(served.url, token="t-player") as player:
        with pytest.raises(PermissionDeniedError):
            await player.authority.lease(world_id, "x", "s", 1, 0, 1, 1)
    async with await Runtime.open_remote(served.url, token="wrong") as stranger:
        with pytest.raises(UnauthenticatedError):
            await stranger.authority.list_worlds()

    served.app.state.admission.close()
    async with await Runtime.open_remote(served.url, token="t-admin") as late:
        with pytest.raises(ShuttingDownError):
            await late.dispatcher.apply(CreateWorld(name="late"))


async def test_error_codes_survive_the_client():
    answers = {
        "/worlds/w/ledger/world_info": (404, {"code": "world_not_found", "message": "gone"}),
        "/worlds/w/ledger/lease": (418, {"code": "teapot_from_the_future", "message": "newer server"}),
        "/worlds/w/ledger/watermark": (502, "<html>bad gateway</html>"),
    }

    def answer(request: httpx.Request) -> httpx.Response:
        status, body = answers[request.url.path]
        return httpx.Response(status, json=body) if isinstance(body, dict) else httpx.Response(status, text=body)

    authority = HttpAuthority("http://127.0.0.1:9", token="t", transport=httpx.MockTransport(answer))
    with pytest.raises(WorldNotFoundError, match="gone"):
        await authority.world_info(world_id="w")
    with pytest.raises(CommandError) as unknown:
        await authority.rpc("lease", {"world_id": "w"})
    assert (unknown.value.code, unknown.value.http_status) == ("teapot_from_the_future", 418)
    with pytest.raises(InternalError, match="502"):
        await authority.watermark(world_id="w")
    await authority.close()
