"""`POST /worlds/{id}:fork` on `archetype serve`'s app (a local catalog) and the Worker's (Durable
Objects on the stand-in): admin only, the fork's row
as the answer, an identical retry answered the same, bad input a typed 4xx that changes nothing.
The Worker's fork is a new object copied page by page from the source's: the same answers."""

from __future__ import annotations

import json

import pytest

from tests.api import test_reads
from tests.api.conftest import ADMIN, OPERATOR, VIEWER

edge, world = test_reads.edge, test_reads.world  # the fixtures: both apps, a world of 30 entities


def fork_body(tick, **fields):
    return {"at_tick": tick, "world_id": "w1-fork", "name": "what if", **fields}


async def test_a_fork_answers_the_new_world(edge, world):
    authority, client, stored = edge
    answer = await client.post("/worlds/w1:fork", json=fork_body(world.tick), headers=ADMIN)
    assert answer.status_code == 201, answer.text
    assert (answer.json()["world_id"], answer.json()["name"], answer.json()["tick_head"]) == ("w1-fork", "what if", world.tick)
    again = await client.post("/worlds/w1:fork", json=fork_body(world.tick), headers=ADMIN)
    assert (again.status_code, again.json()) == (201, answer.json())
    for each in ("w1", "w1-fork"):  # the event names the admin token's principal on both worlds
        (event,) = [e for e in await authority.read_outbox(each, limit=1000) if e["event_type"] == "world_forked"]
        assert json.loads(event["payload"])["actor"] == "root"
    source = (await client.get("/worlds/w1/state", headers=VIEWER)).json()["entities"]
    forked = (await client.get("/worlds/w1-fork/state", headers=VIEWER)).json()["entities"]
    assert forked == source and forked


@pytest.mark.parametrize("body, headers, status, code", [
    (fork_body(0), OPERATOR, 403, "permission_denied"),
    (fork_body(5), ADMIN, 404, "tick_not_retained"),
    (fork_body(-2), ADMIN, 422, "invalid_request"),
    (fork_body(0, world_id="bad id"), ADMIN, 422, "invalid_request"),
    (fork_body(0, name=""), ADMIN, 422, "invalid_request"),
    (fork_body(0, color="red"), ADMIN, 422, "invalid_request"),
    ({"world_id": "w1-fork", "name": "x"}, ADMIN, 422, "invalid_request"),
])  # fmt: skip
async def test_a_bad_fork_is_a_typed_error_and_changes_nothing(edge, world, body, headers, status, code):
    authority, client, stored = edge
    before = await stored()
    answer = await client.post("/worlds/w1:fork", json=body, headers=headers)
    assert (answer.status_code, answer.json()["code"]) == (status, code)
    assert await stored() == before
    assert (await client.post("/worlds/ghost:fork", json=fork_body(0), headers=ADMIN)).json()["code"] == "world_not_found"
