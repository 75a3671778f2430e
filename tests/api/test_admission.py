"""Idempotency keys, conflicts and quotas through HTTP admission."""

from __future__ import annotations

from archetype.commands import DurableOptions
from archetype.runtime import Runtime
from archetype.world import Despawn
from tests.api.conftest import PLAYER, QUOTA, auth
from tests.api.test_routes import value
from tests.component_modules.alpha import Position


def despawn(tick: int = 0, entity_id: int = 1, **extra) -> dict:
    return {"type": "despawn", "tick": tick, "entity_id": entity_id, **extra}


def keyed(key: str, token: str = "t-player") -> dict[str, str]:
    return auth(token, **{"Idempotency-Key": key})


async def test_idempotency_key_from_header_or_field(client, world, snapshot):
    by_header = await client.post(f"/worlds/{world}/commands", json=despawn(), headers=keyed("k-header"))
    by_field = await client.post(f"/worlds/{world}/commands", json=despawn(command_id="k-field"), headers=PLAYER)
    both = await client.post(f"/worlds/{world}/commands", json=despawn(command_id="k-both"), headers=keyed("k-both"))
    assert [r.json()["command_id"] for r in (by_header, by_field, both)] == ["k-header", "k-field", "k-both"]

    before = snapshot()
    mismatch = await client.post(f"/worlds/{world}/commands", json=despawn(command_id="k-a"), headers=keyed("k-b"))
    assert (mismatch.status_code, mismatch.json()["code"]) == (422, "idempotency_key_mismatch")
    malformed = await client.post(f"/worlds/{world}/commands", json=despawn(), headers=keyed("no spaces allowed"))
    assert (malformed.status_code, malformed.json()["code"]) == (422, "invalid_request")
    assert snapshot() == before


async def test_replay_and_conflict(client, world, snapshot):
    first = await client.post(f"/worlds/{world}/commands", json=despawn(), headers=keyed("k1"))
    before = snapshot()
    replay = await client.post(f"/worlds/{world}/commands", json=despawn(), headers=keyed("k1"))
    assert replay.status_code == 202
    assert replay.json() == {**first.json(), "replayed": True}
    for changed in (despawn(entity_id=2), despawn(tick=1), despawn(priority=5), despawn(max_attempts=1)):
        conflict = await client.post(f"/worlds/{world}/commands", json=changed, headers=keyed("k1"))
        assert (conflict.status_code, conflict.json()["code"]) == (409, "command_conflict")
    assert snapshot() == before
    # another principal's identical key names its own command: it can neither replay nor block this one
    other_actor = await client.post(f"/worlds/{world}/commands", json=despawn(entity_id=2), headers=keyed("k1", "t-player2"))
    assert other_actor.status_code == 202 and not other_actor.json()["replayed"]
    assert other_actor.json()["sequence"] != first.json()["sequence"]


async def test_spawn_answers_its_reserved_entity_and_replays_it(client, world, snapshot):
    body = {"type": "spawn", "tick": 0, "components": [value(Position(x=0, y=0))]}
    first = await client.post(f"/worlds/{world}/commands", json=body, headers=keyed("ship"))
    other = await client.post(f"/worlds/{world}/commands", json=body, headers=keyed("boat"))
    assert first.json()["entity_id"] != other.json()["entity_id"]
    before = snapshot()
    replay = await client.post(f"/worlds/{world}/commands", json=body, headers=keyed("ship"))
    assert replay.json()["entity_id"] == first.json()["entity_id"] and replay.json()["replayed"]
    moved = {**body, "components": [value(Position(x=1, y=0))]}
    conflict = await client.post(f"/worlds/{world}/commands", json=moved, headers=keyed("ship"))
    assert (conflict.status_code, conflict.json()["code"]) == (409, "command_conflict")
    assert snapshot() == before


async def test_quota_per_actor_world_and_tick(client, world):
    for index in range(QUOTA):
        assert (await client.post(f"/worlds/{world}/commands", json=despawn(), headers=keyed(f"a{index}"))).status_code == 202
    over = await client.post(f"/worlds/{world}/commands", json=despawn(), headers=keyed("a-over"))
    assert (over.status_code, over.json()["code"]) == (429, "quota_exceeded")
    assert (await client.post(f"/worlds/{world}/commands", json=despawn(tick=1), headers=keyed("a-next"))).status_code == 202
    assert (await client.post(f"/worlds/{world}/commands", json=despawn(), headers=keyed("b0", "t-player2"))).status_code == 202
    await client.post("/worlds", json={"name": "second", "world_id": "w2"}, headers=auth("t-admin"))
    assert (await client.post("/worlds/w2/commands", json=despawn(), headers=keyed("a-w2"))).status_code == 202


async def test_quota_is_never_debited_for_replays_conflicts_or_rejections(client, world, authority):
    assert (await client.post(f"/worlds/{world}/commands", json=despawn(), headers=keyed("k1"))).status_code == 202
    for _ in range(QUOTA + 2):
        assert (await client.post(f"/worlds/{world}/commands", json=despawn(), headers=keyed("k1"))).status_code == 202
        assert (await client.post(f"/worlds/{world}/commands", json=despawn(entity_id=2), headers=keyed("k1"))).status_code == 409
        assert (await client.post(f"/worlds/{world}/commands", json=despawn(entity_id=0), headers=keyed("bad"))).status_code == 422
        assert (await client.post("/worlds/ghost/commands", json=despawn(), headers=keyed("ghost"))).status_code == 404
    # trusted admission is not an actor's and never counts against one
    trusted = Runtime(authority)
    await trusted.dispatcher.defer(Despawn(world_id=world, entity_id=3), DurableOptions(tick=0))
    for index in range(QUOTA - 1):
        assert (await client.post(f"/worlds/{world}/commands", json=despawn(), headers=keyed(f"n{index}"))).status_code == 202
    assert (await client.post(f"/worlds/{world}/commands", json=despawn(), headers=keyed("n-over"))).status_code == 429


async def test_a_batch_is_charged_all_or_nothing(client, world, snapshot):
    used = 3
    for index in range(used):
        await client.post(f"/worlds/{world}/commands", json=despawn(), headers=keyed(f"u{index}"))
    before = snapshot()
    too_many = [despawn(command_id=f"x{i}") for i in range(QUOTA - used + 1)]
    refused = await client.post(f"/worlds/{world}/commands:batch", json={"commands": too_many}, headers=PLAYER)
    assert (refused.status_code, refused.json()["code"]) == (429, "quota_exceeded")
    assert snapshot() == before
    fits = await client.post(f"/worlds/{world}/commands:batch", json={"commands": too_many[:-1]}, headers=PLAYER)
    assert fits.status_code == 202 and len(fits.json()["commands"]) == QUOTA - used
    # a batch spread over ticks is charged per tick, still all or nothing
    mixed = [despawn(tick=5, command_id="t5"), despawn(tick=0, command_id="t0")]
    assert (await client.post(f"/worlds/{world}/commands:batch", json={"commands": mixed}, headers=PLAYER)).status_code == 429
    history = (await client.get(f"/worlds/{world}/commands", params={"limit": 100}, headers=auth("t-admin"))).json()
    assert "t5" not in {c["command_id"] for c in history["commands"]}
