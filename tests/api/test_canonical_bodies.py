"""Request bodies without a canonical value are refused before any route runs: a typed 4xx with a
JSONPath, nothing persisted. Runs against the local app and the Worker's app (Durable Objects on
the stand-in), whose answers must match."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from archetype.api import create_app
from archetype.canonical import canonical_json
from local_catalog import open_local_authority
from tests.api.conftest import ADMIN, PLAYER, PROJECTOR, TOKENS, VIEWER, edge_app
from tests.component_modules.alpha import Position
from tests.component_modules.coercing import Counter, Label, Loose

WORLD = "w1"
POSITION = Position.component_fingerprint()


@pytest.fixture(params=["local", "worker"])
async def edge(request, tmp_path, clock):
    async with edge_app(request.param, tmp_path, clock) as (_, app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as client:
            created = await client.post("/worlds", json={"name": "arena", "world_id": WORLD}, headers=ADMIN)
            assert created.status_code == 201, created.text
            yield client


async def persisted(client) -> dict:
    """What the edge holds for the world: its commands, its outbox, its state."""
    history = await client.get(f"/worlds/{WORLD}/commands", headers=ADMIN)
    outbox = await client.post(f"/worlds/{WORLD}/ledger/read_outbox", json={"limit": 1000}, headers=PROJECTOR)
    world = await client.get(f"/worlds/{WORLD}", headers=VIEWER)
    assert (history.status_code, outbox.status_code, world.status_code) == (200, 200, 200)
    return {"commands": history.json()["commands"], "outbox": outbox.json(), "world": world.json()}


def update_body(x: str, *, y: str = "1", key: str = '"y"', fingerprint: str = POSITION) -> bytes:
    component = '{"name":"Position","fingerprint":"%s","data":{"x":%s,%s:%s}}' % (fingerprint, x, key, y)
    return ('{"type":"update","tick":0,"entity_id":1,"components":[%s]}' % component).encode()


def batch_of(body: bytes) -> bytes:
    return b'{"commands":[{"type":"despawn","tick":0,"entity_id":1},' + body + b"]}"


DEEP = "[" * 500 + "]" * 500
DEEPER = "[" * 100_000 + "]" * 100_000
REFUSED_BODIES = {
    "NaN": (update_body("NaN"), "$.components[0].data.x", "NaN is not a finite number"),
    "Infinity": (update_body("Infinity"), "$.components[0].data.x", "Infinity is not a finite number"),
    "-Infinity": (update_body("-Infinity"), "$.components[0].data.x", "-Infinity is not a finite number"),
    "1e400": (update_body("1e400"), "$.components[0].data.x", "Infinity is not a finite number"),
    "-1e400": (update_body("-1e400"), "$.components[0].data.x", "-Infinity is not a finite number"),
    "surrogate-escape": (update_body('"\\udfff"'), "$.components[0].data.x", "lone surrogate"),
    "surrogate-key": (update_body("1", key='"\\ud800"'), '$.components[0].data["\\ud800"]', "lone surrogate"),
    "surrogate-bytes": (update_body('"SURROGATE"').replace(b"SURROGATE", "\udfff".encode("utf-8", "surrogatepass")),
                        "$.components[0].data.x", "lone surrogate"),
    "surrogate-in-an-id": (b'{"type":"despawn","tick":0,"entity_id":1,"command_id":"k\\udfff"}', "$.command_id", "lone surrogate"),
    "duplicate-key": (b'{"type":"despawn","tick":0,"tick":5,"entity_id":1}', "$", "appears more than once"),
    "depth-500": (update_body(DEEP), "$", "nested deeper than 64"),
    "depth-100000": (update_body(DEEPER), "$", "nested deeper than 64"),
    "huge-literal": (update_body("9" * 5000), "$", "too many digits"),
    "data-depth-40": (update_body("[" * 40 + "]" * 40), "$.components[0].data.x", "nested deeper than 32"),
    "data-int-2**53": (update_body(str(2**53)), "$.components[0].data.x", "outside +/-(2**53-1)"),
}


@pytest.mark.parametrize("kind", sorted(REFUSED_BODIES))
async def test_non_canonical_bodies_are_refused_with_a_code_and_a_path_and_persist_nothing(edge, kind):
    body, path, reason = REFUSED_BODIES[kind]
    before = await persisted(edge)
    headers = {**PLAYER, "Content-Type": "application/json"}
    for route, content in ((f"/worlds/{WORLD}/commands", body), (f"/worlds/{WORLD}/commands:batch", batch_of(body))):
        response = await edge.post(route, content=content, headers=headers)
        assert response.status_code == 422, response.text
        answer = response.json()
        assert answer["code"] == "non_canonical_value" and reason in answer["message"], answer
        if route.endswith(":batch") and path != "$":
            path = path.replace("$.", "$.commands[1].", 1)
        assert answer["message"].startswith(path), answer
    assert await persisted(edge) == before


async def test_a_json_body_without_a_content_type_is_checked_too(edge):
    response = await edge.post(f"/worlds/{WORLD}/commands", content=update_body("NaN"), headers=PLAYER)
    assert (response.status_code, response.json()["code"]) == (422, "non_canonical_value")


@pytest.mark.parametrize(
    "component_type,data,reason",
    [(Counter, '{"n":1e18}', "outside"), (Label, '{"text":"mangle"}', "lone surrogate")],
)
async def test_a_live_value_without_a_canonical_form_is_refused(edge, component_type, data, reason):
    before = await persisted(edge)
    component = '{"name":"%s","fingerprint":"%s","data":%s}' % (component_type.__name__, component_type.component_fingerprint(), data)
    body = ('{"type":"spawn","tick":0,"components":[%s]}' % component).encode()
    response = await edge.post(f"/worlds/{WORLD}/commands", content=body, headers={**PLAYER, "Content-Type": "application/json"})
    assert (response.status_code, response.json()["code"]) == (422, "non_canonical_value"), response.text
    assert response.json()["message"].startswith("$.components[0].data.") and reason in response.json()["message"]
    assert await persisted(edge) == before


async def test_names_and_runner_protocol_bodies_are_checked_too(edge):
    before = await persisted(edge)
    world = await edge.post("/worlds", content=b'{"name":"arena\\udfff","world_id":"w2"}',
                            headers={**ADMIN, "Content-Type": "application/json"})  # fmt: skip
    assert (world.status_code, world.json()["code"]) == (422, "non_canonical_value")
    assert (await edge.get("/worlds/w2", headers=VIEWER)).status_code == 404
    admit = await edge.post(f"/worlds/{WORLD}/ledger/admit", content=b'{"commands":[{"priority":NaN}]}',
                            headers={**ADMIN, "Content-Type": "application/json"})  # fmt: skip
    assert (admit.status_code, admit.json()["code"]) == (422, "non_canonical_value")
    assert admit.json()["message"].startswith("$.commands[0].priority:")
    assert await persisted(edge) == before


async def test_the_tick_bound_is_2_53_minus_1_inclusive(edge):
    before = await persisted(edge)
    too_far = await edge.post(f"/worlds/{WORLD}/commands", json={"type": "despawn", "tick": 2**53, "entity_id": 1}, headers=PLAYER)
    assert (too_far.status_code, too_far.json()["code"]) == (422, "invalid_request")
    assert "tick" in too_far.json()["message"]
    entity = await edge.post(f"/worlds/{WORLD}/commands", json={"type": "despawn", "tick": 0, "entity_id": 2**53}, headers=PLAYER)
    assert (entity.status_code, entity.json()["code"]) == (422, "invalid_request")
    assert await persisted(edge) == before

    last = await edge.post(f"/worlds/{WORLD}/commands", json={"type": "despawn", "tick": 2**53 - 1, "entity_id": 2**53 - 1,
                                                               "command_id": "last"}, headers=PLAYER)  # fmt: skip
    assert last.status_code == 202, last.text
    view = await edge.get(f"/worlds/{WORLD}/commands/last", headers=PLAYER)
    assert view.status_code == 200 and view.json()["scheduled_tick"] == 2**53 - 1
    assert view.json()["payload"]["entity_id"] == 2**53 - 1 and view.json()["problem"] is None
    far_page = await edge.get(f"/worlds/{WORLD}/commands", params={"after": 2**53}, headers=VIEWER)
    assert (far_page.status_code, far_page.json()["code"]) == (422, "invalid_request")


def label_body(text_literal: str, command_id: str) -> bytes:
    component = '{"name":"Label","fingerprint":"%s","data":{"text":%s}}' % (Label.component_fingerprint(), text_literal)
    return ('{"type":"spawn","tick":0,"command_id":"%s","components":[%s]}' % (command_id, component)).encode()


async def test_canonical_bodies_still_pass(edge):
    headers = {**PLAYER, "Content-Type": "application/json"}
    accepted = [
        update_body("1e308", y="-0.0"),  # large and signed-zero floats are finite
        label_body('"\\u00e9\\ud83d\\ude00"', "pair"),  # an escaped surrogate *pair* is one valid character
        label_body('"\u00e9\U0001f600"', "raw"),  # raw UTF-8
        label_body('"' + "[" * 200 + '"', "brackets"),  # brackets inside strings are not nesting
    ]
    for body in accepted:
        response = await edge.post(f"/worlds/{WORLD}/commands", content=body, headers=headers)
        assert response.status_code == 202, response.text
    views = {c["command_id"]: c for c in (await persisted(edge))["commands"]}
    assert views["pair"]["payload"]["components"][0]["data"]["text"] == "\u00e9\U0001f600"
    assert views["raw"]["payload"]["components"][0]["data"]["text"] == "\u00e9\U0001f600"


async def test_the_ledger_refuses_a_raw_payload_without_a_canonical_value(edge):
    """The admin-only runner protocol hands rows to the ledger as they are; the ledger checks them too."""
    before = await persisted(edge)
    payload = '{"entity_id":1,"operation":"despawn","world_id":"w1","x":"\\udfff"}'  # an escaped lone surrogate
    row = {"command_id": "legacy", "schema_version": 1, "scheduled_tick": 5, "priority": 0, "operation": "despawn",
           "payload": payload, "principal": None, "origin": "gateway", "max_attempts": 3, "reserved_entity_id": None,
           "request_digest": None}  # fmt: skip
    for bad in (payload, '{"operation": "despawn"}', "not json"):
        refused = await edge.post(f"/worlds/{WORLD}/ledger/admit", json={"commands": [{**row, "payload": bad}]}, headers=ADMIN)
        assert (refused.status_code, refused.json()["code"]) == (422, "invalid_command"), refused.text
    assert await persisted(edge) == before


async def test_a_stored_payload_without_a_canonical_value_does_not_break_the_history(tmp_path, clock):
    """A row stored before admission refused such payloads reads as a problem, not a 500."""
    authority = open_local_authority(tmp_path / "data", clock=clock)
    await authority.create_world(WORLD, "arena")
    await authority.admit(WORLD, [{"command_id": "legacy", "schema_version": 1, "scheduled_tick": 5, "priority": 0,
                                   "operation": "despawn", "payload": '{"entity_id":1,"operation":"despawn","world_id":"w1"}',
                                   "principal": None, "origin": "gateway", "max_attempts": 3, "reserved_entity_id": None,
                                   "request_digest": None}])  # fmt: skip
    authority.ledger._port.execute("UPDATE commands SET payload = ? WHERE command_id = 'legacy'",
                                   ('{"entity_id":1,"operation":"despawn","world_id":"w1","x":"\\udfff"}',))  # fmt: skip
    app = create_app(authority, tokens=TOKENS)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as client:
        for route in (f"/worlds/{WORLD}/commands", f"/worlds/{WORLD}/commands/legacy"):
            response = await client.get(route, params={"trusted": True}, headers=ADMIN)
            assert response.status_code == 200, response.text
        view = (await client.get(f"/worlds/{WORLD}/commands/legacy", params={"trusted": True}, headers=ADMIN)).json()
    await authority.close()
    assert view["payload"] is None and "lone surrogate" in view["problem"]


# -- property: whatever the component data, the answer is 202 or a typed 4xx; a refusal persists nothing --
hostile_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats()  # NaN, infinities
    | st.text(st.characters(codec=None, categories=None, exclude_categories=()), max_size=4)  # surrogates
)
hostile_values = st.recursive(
    hostile_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(st.characters(exclude_categories=()), max_size=3), inner, max_size=3)
    ),
    max_leaves=10,
) | st.integers(1, 120).map(lambda depth: json.loads("[" * depth + "]" * depth))


@pytest.fixture
def sync_edge(tmp_path):
    from starlette.testclient import TestClient

    from tests.api.conftest import persisted as catalog

    authority = open_local_authority(tmp_path / "data")
    with TestClient(create_app(authority, tokens=TOKENS)) as client:
        assert client.post("/worlds", json={"name": "arena", "world_id": WORLD}, headers=ADMIN).status_code == 201
        yield client, lambda: catalog(tmp_path / "data")
    asyncio.run(authority.close())


@given(x=st.floats() | st.integers(-(2**60), 2**60), loose=hostile_values, ascii_only=st.booleans(), batch=st.booleans())
@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
def test_hostile_component_data_is_admitted_canonically_or_refused_cleanly(sync_edge, x, loose, ascii_only, batch):
    client, snapshot = sync_edge
    try:
        data = json.dumps({"x": x, "y": 0.5}, allow_nan=True, ensure_ascii=ascii_only)
        loose_data = json.dumps({"value": loose}, allow_nan=True, ensure_ascii=ascii_only)
    except (ValueError, RecursionError):
        return
    components = ('[{"name":"Position","fingerprint":"%s","data":%s},{"name":"Loose","fingerprint":"%s","data":%s}]'
                  % (POSITION, data, Loose.component_fingerprint(), loose_data))  # fmt: skip
    command = '{"type":"spawn","tick":0,"components":%s}' % components
    body = ('{"commands":[%s]}' % command if batch else command).encode("utf-8", "surrogatepass")
    before = snapshot()
    route = f"/worlds/{WORLD}/commands" + (":batch" if batch else "")
    response = client.post(route, content=body, headers={**PLAYER, "Content-Type": "application/json"})
    assert response.status_code in (202, 400, 422), response.text
    event(f"{response.status_code} {response.json().get('code', 'admitted')}")
    if response.status_code != 202:
        assert response.json()["code"] in ("non_canonical_value", "invalid_command", "invalid_request"), response.text
        assert snapshot() == before
        return
    page = client.get(f"/worlds/{WORLD}/commands", headers=PLAYER).json()
    stored = page["commands"][-1]
    assert stored["problem"] is None
    assert canonical_json(stored["payload"])  # what was admitted has a canonical form, and reads back
