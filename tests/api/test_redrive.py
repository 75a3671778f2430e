"""POST /worlds/{id}/dead-letters/{command_id}/redrive: operator only, idempotent by its key,
every answer one the published OpenAPI allows."""

from __future__ import annotations

import json

from archetype import Permanent
from archetype.runtime import Runtime
from archetype.world import Step
from tests.api.conftest import OPERATOR, PLAYER, VIEWER
from tests.api.test_openapi import check
from tests.component_modules.flaky import Probe
from tests.conformance.helpers import fail_next

ROUTE = "/worlds/{world_id}/dead-letters/{command_id}/redrive"


def probe_spawn(label: str) -> dict:
    value = {"name": "Probe", "fingerprint": Probe.component_fingerprint(), "data": {"label": label}}
    return {"type": "spawn", "tick": 0, "components": [value]}


async def test_an_operator_redrives_a_players_dead_letter_once(client, world, authority):
    fail_next("doomed", Permanent("the account is closed"))
    submitted = await client.post(f"/worlds/{world}/commands", json=probe_spawn("doomed"),
                                  headers={**PLAYER, "Idempotency-Key": "doomed"})  # fmt: skip
    assert submitted.status_code == 202, submitted.text
    await client.post(f"/worlds/{world}/commands", json={**probe_spawn("open"), "tick": 99},
                      headers={**PLAYER, "Idempotency-Key": "open"})  # fmt: skip
    runner = Runtime(authority, owner="runner")
    await runner.dispatcher.apply(Step(world_id=world))
    dead = (await client.get(f"/worlds/{world}/commands/doomed", headers=PLAYER)).json()
    assert (dead["status"], dead["last_error"]) == ("DEAD_LETTER", "Permanent: the account is closed")

    url = f"/worlds/{world}/dead-letters/doomed/redrive"
    keyed = {**OPERATOR, "Idempotency-Key": "doomed-again"}
    refused = [
        (await client.post(url, params={"principal": "pat"}, headers=PLAYER), 403, "permission_denied"),
        (await client.post(url, params={"principal": "pat"}, headers=VIEWER), 403, "permission_denied"),
        # the operator's own scope has none; no principal's has `nobodys`
        (await client.post(url, params={"principal": "runner"}, headers=keyed), 404, "command_not_found"),
        (await client.post(f"/worlds/{world}/dead-letters/nobodys/redrive", headers=keyed), 404, "command_not_found"),
        (await client.post(f"/worlds/{world}/dead-letters/open/redrive", params={"principal": "pat"}, headers=OPERATOR),
         409, "not_dead_lettered"),  # fmt: skip
        (await client.post("/worlds/ghost/dead-letters/doomed/redrive", headers=OPERATOR), 404, "world_not_found"),
    ]
    for response, status, code in refused:
        check(response, ROUTE)
        assert (response.status_code, response.json()["code"]) == (status, code), response.text

    first = await client.post(url, params={"principal": "pat"}, headers=keyed)
    again = await client.post(url, params={"principal": "pat"}, headers=keyed)
    other = await client.post(url, params={"principal": "pat"}, headers={**OPERATOR, "Idempotency-Key": "third"})
    for response in (first, again, other):
        check(response, ROUTE)
    assert first.status_code == again.status_code == 202
    assert first.json() == {**again.json(), "replayed": False} and again.json()["replayed"] is True
    assert first.json()["redriven_from"] == dead["sequence"] and first.json()["command_id"] == "doomed-again"
    assert (other.status_code, other.json()["code"]) == (409, "already_redriven")
    (event,) = [e for e in await authority.read_outbox(world, limit=1000) if e["event_type"] == "redriven"]
    assert json.loads(event["payload"])["actor"] == "runner"  # the operator token's principal (docs/ledger.md, "Who asked")

    # the player sees the new command in its own scope, linked to the dead one, which is untouched but for its mark
    new = (await client.get(f"/worlds/{world}/commands/doomed-again", headers=PLAYER)).json()
    assert (new["status"], new["attempts"], new["redriven_from"], new["principal"]) == ("PENDING", 0, dead["sequence"], "pat")
    marked = {**dead, "redriven_by": new["sequence"]}
    assert (await client.get(f"/worlds/{world}/commands/doomed", headers=PLAYER)).json() == marked
    await runner.dispatcher.apply(Step(world_id=world))
    assert (await client.get(f"/worlds/{world}/commands/doomed-again", headers=PLAYER)).json()["status"] == "APPLIED"


async def test_world_health_is_published_in_the_world_view(client, world):
    response = await client.get(f"/worlds/{world}", headers=VIEWER)
    check(response, "/worlds/{world_id}")
    assert response.json()["health"] == {"status": "ACTIVE", "failed_attempts": 0, "last_error": None, "since": None,
                                         "lag_ms": 0}  # fmt: skip


async def test_a_dead_letter_of_a_type_migrated_since_is_not_redriven(client, world, authority):
    """Its payload would put the superseded type back into an open command: 422, nothing changes."""
    from archetype.commands.scheduler import schema_row
    from tests.component_modules.alpha import Health, Position

    fail_next("old", Permanent("poisoned"))
    health = {"name": "Health", "fingerprint": Health.component_fingerprint(), "data": {"hp": 1}}
    spawn = {**probe_spawn("old"), "components": [*probe_spawn("old")["components"], health]}
    assert (await client.post(f"/worlds/{world}/commands", json=spawn, headers={**PLAYER, "Idempotency-Key": "old"})).status_code == 202
    await Runtime(authority, owner="runner").dispatcher.apply(Step(world_id=world))
    await authority.record_components(world, [schema_row(Position)])
    epoch = (await authority.acquire_writer(world))["writer_epoch"]
    await authority.migrate_components(world, epoch, {"name": "Health", "from_fingerprint": Health.component_fingerprint(),
                                                      "to_fingerprint": Position.component_fingerprint()}, [], [])  # fmt: skip
    history = await authority.history(world)
    refused = await client.post(f"/worlds/{world}/dead-letters/old/redrive", params={"principal": "pat"}, headers=OPERATOR)
    check(refused, ROUTE)
    assert (refused.status_code, refused.json()["code"]) == (422, "unknown_component")
    assert f"was migrated to {Position.component_fingerprint()}" in refused.json()["message"]
    assert await authority.history(world) == history
