"""The client's reads over a real local catalog and on the Worker's app (Durable Objects on the
stand-in): `GET /worlds/{id}/state` filtered by component types and entity ids, paged by
`next_after`, the same entities and component values the runner holds (a bad filter is a typed
4xx and changes nothing); `POST /worlds/{id}/commands:outcomes`, many commands as the single read
answers each."""

from __future__ import annotations

import httpx
import pytest

from archetype.runtime import Runtime
from archetype.world import ComponentValue, CreateWorld
from archetype.world.columnar import column_values
from archetype.world.components import type_key
from tests.api.conftest import NOBODY, PLAYER, VIEWER, auth, edge_app, persisted
from tests.component_modules.alpha import Health, Position


@pytest.fixture(params=["local", "worker"])
async def edge(request, tmp_path, clock):
    """(authority, the app's client, what the authority persisted) of `archetype serve`'s app over a
    local catalog, or of the Worker's over Durable Objects."""
    async with edge_app(request.param, tmp_path, clock) as (authority, app):

        async def stored():
            if request.param == "local":
                return persisted(tmp_path / "data")
            return await authority.world_info("w1"), await authority.load_state("w1"), await authority.components("w1")

        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as client:
            yield authority, client, stored


@pytest.fixture
def client(edge):
    return edge[1]


@pytest.fixture
async def world(edge):
    authority = edge[0]
    """A world of 30 entities (every third with Health) as its runner holds it."""
    rt = Runtime(authority, owner="runner", lease_ms=1_000)
    world_id = await rt.dispatcher.apply(CreateWorld(name="state", world_id="w1"))
    world = await rt.worlds.get(world_id)
    await world.ensure_entity_ids(30)
    async with world.lock:
        world.atomically(lambda: [world.spawn([Position(x=i / 2, y=-0.0)] + ([Health(hp=i)] if i % 3 == 0 else []))
                                  for i in range(30)])  # fmt: skip
    await world.step()
    yield world
    await rt.close()


def held(world, types=(), ids=None) -> list[dict]:
    """The runner's entities as the route answers them: entity id and component values, filtered."""
    keys = {type_key(t) for t in types}
    rows = []
    for entity_id, components in sorted(world.state.items()):
        if (ids is not None and entity_id not in ids) or not keys <= components.keys():
            continue
        kept = [components[k] for k in sorted(components) if not keys or k in keys]
        rows.append({"entity_id": entity_id, "components": [ComponentValue.from_component(c).model_dump(mode="json") for c in kept]})
    return rows


async def read_pages(client, params) -> tuple[list[dict], int]:
    entities, after, pages = [], 0, 0
    while True:
        answer = await client.get("/worlds/w1/state", params={**params, "after": after}, headers=VIEWER)
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"] == "application/json"
        page = answer.json()
        entities += page["entities"]
        pages += 1
        if page["next_after"] is None:
            return entities, pages
        after = page["next_after"]


@pytest.mark.parametrize("types, ids", [((), None), ((Health,), None), ((Position, Health), None), ((Position,), [2, 9, 30, 31])])
async def test_the_state_filtered_and_paged(client, world, types, ids):
    params = {"component": [type_key(t) for t in types], "entity_id": ids or [], "limit": 4}
    entities, pages = await read_pages(client, params)
    assert entities == held(world, types, ids)
    assert pages >= len(entities) / 4
    by_name, _ = await read_pages(client, {**params, "component": [t.__name__ for t in types], "limit": 10_000})
    assert by_name == entities


def data(component: dict, row: int) -> dict:
    """A section's component's data at `row`: a data row, or numeric columns as the chunks hold them."""
    if "rows" in component:
        return component["rows"][row]
    return {field: column_values(column)[row] for field, column in component["columns"].items()}


async def test_the_sections_layout_holds_the_same_entities(client, world):
    for params in ({}, {"component": "Health"}, {"entity_id": [3, 4, 5], "component": ["Position"]}):
        entities = (await client.get("/worlds/w1/state", params={**params, "limit": 50}, headers=VIEWER)).json()
        grouped = (await client.get("/worlds/w1/state", params={**params, "limit": 50, "layout": "sections"}, headers=VIEWER)).json()
        assert (grouped["tick_head"], grouped["next_after"]) == (entities["tick_head"], entities["next_after"])
        rows = sorted(
            ({"entity_id": entity_id, "components": [{"data": data(c, row), "fingerprint": c["fingerprint"], "name": c["name"]}
                                                     for c in section["components"]]}
             for section in grouped["sections"] for row, entity_id in enumerate(section["ids"])),
            key=lambda e: e["entity_id"],
        )  # fmt: skip
        assert rows == entities["entities"]
        signatures = [[c["name"] for c in section["components"]] for section in grouped["sections"]]
        assert len(signatures) == len({tuple(s) for s in signatures})  # one section per signature


async def test_the_answer_keeps_the_published_floats(client, world):
    page = (await client.get("/worlds/w1/state", params={"entity_id": [1, 2]}, headers=VIEWER)).json()
    assert page["tick_head"] == world.tick and page["next_after"] is None
    assert [c["data"] for c in page["entities"][0]["components"] if c["name"] == "Position"] == [{"x": 0.0, "y": -0.0}]
    assert '"y":-0.0' in (await client.get("/worlds/w1/state", headers=VIEWER)).text


@pytest.mark.parametrize("params, status, code", [
    ({"component": "Nobody"}, 422, "unknown_component"),
    ({"component": f"Position:{'0' * 64}"}, 422, "unknown_component"),
    ({"component": "Position:abc"}, 422, "invalid_request"),
    ({"component": ["Position"] * 33}, 422, "invalid_request"),
    ({"entity_id": "x"}, 422, "invalid_request"),
    ({"entity_id": 0}, 422, "invalid_request"),
    ({"entity_id": list(range(1, 1_002))}, 422, "invalid_request"),
    ({"after": -1}, 422, "invalid_request"),
    ({"after": "soon"}, 422, "invalid_request"),
    ({"limit": 0}, 422, "invalid_request"),
    ({"limit": 10_001}, 422, "invalid_request"),
    ({"tick": -2}, 422, "invalid_request"),
    ({"tick": "then"}, 422, "invalid_request"),
    ({"tick": 2**53}, 422, "invalid_request"),
    ({"tick": 1}, 404, "tick_not_retained"),  # after the tick head
])  # fmt: skip
async def test_a_bad_filter_is_a_typed_error_and_changes_nothing(edge, world, params, status, code):
    _, client, stored = edge
    before = await stored()
    answer = await client.get("/worlds/w1/state", params=params, headers=VIEWER)
    assert (answer.status_code, answer.json()["code"]) == (status, code)
    assert await stored() == before


async def test_the_state_at_a_tick_is_what_the_world_held_then(client, world):
    """`?tick=` on both apps: each tick's state as the runner held it after that tick, with the
    filters and paging of the head; the head moves on and the earlier tick still reads the same."""
    held_at = {world.tick: (held(world), held(world, (Health,)))}
    for tick in range(3):
        async with world.lock:
            world.atomically(lambda t=tick: (world.update(3 * t + 1, [Position(x=-1.0 * t, y=2.0)]),
                                             world.despawn(3 * t + 2)))  # fmt: skip
        await world.step()
        held_at[world.tick] = held(world), held(world, (Health,))
    for tick, (entities, healthy) in held_at.items():
        found, pages = await read_pages(client, {"tick": tick, "limit": 7})
        assert found == entities and pages > 1, tick
        found, _ = await read_pages(client, {"tick": tick, "component": "Health"})
        assert found == healthy, tick
        page = (await client.get("/worlds/w1/state", params={"tick": tick}, headers=VIEWER)).json()
        assert page["tick_head"] == tick


async def test_roles_and_worlds(client, world):
    assert (await client.get("/worlds/w1/state", headers=NOBODY)).json()["code"] == "permission_denied"
    assert (await client.get("/worlds/ghost/state", headers=VIEWER)).json()["code"] == "world_not_found"


async def test_outcomes_answer_many_commands_as_the_single_read_does(client, world):
    world = world.world_id
    for index in range(5):
        body = {"type": "despawn", "tick": index, "entity_id": 100 + index}
        await client.post(f"/worlds/{world}/commands", json=body, headers=auth("t-player", **{"Idempotency-Key": f"d{index}"}))
    asked = ["d3", "nope", "d0", "d3", "d4"]
    answer = await client.post(f"/worlds/{world}/commands:outcomes", json={"command_ids": asked}, headers=PLAYER)
    assert answer.status_code == 200
    outcomes = answer.json()
    assert [c["command_id"] for c in outcomes["commands"]] == ["d0", "d3", "d4"]  # admission order, once each
    assert outcomes["missing"] == ["nope"]
    for outcome in outcomes["commands"]:
        single = (await client.get(f"/worlds/{world}/commands/{outcome['command_id']}", headers=PLAYER)).json()
        assert outcome == {name: value for name, value in single.items() if name not in ("payload", "problem")}
    for body, code in (({"command_ids": []}, "invalid_request"), ({"command_ids": ["bad id"]}, "invalid_request"),
                       ({"command_ids": [f"c{n}" for n in range(1_001)]}, "invalid_request"),
                       ({"ids": ["d0"]}, "invalid_request")):  # fmt: skip
        refused = await client.post(f"/worlds/{world}/commands:outcomes", json=body, headers=PLAYER)
        assert (refused.status_code, refused.json()["code"]) == (422, code)
    missing = await client.post("/worlds/ghost/commands:outcomes", json={"command_ids": ["d0"]}, headers=PLAYER)
    assert (missing.status_code, missing.json()["code"]) == (404, "world_not_found")
