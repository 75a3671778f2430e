"""Least privilege and bounded requests: what each role may do beyond the route matrix
(tests/api/test_role_matrix.py), the runner protocol's bounds, and the findings that proved them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from archetype import Permanent
from archetype.api import create_app
from archetype.api.runner_protocol import ARGUMENTS
from archetype.commands.audit_history import GetAuditHistory
from archetype.runtime import Runtime
from archetype.world import Step
from tests.api.conftest import ADMIN, ANALYST, OPERATOR, PLAYER, PLAYER2, PROJECTOR, QUOTA, VIEWER, auth
from tests.api.test_redrive import probe_spawn
from tests.conformance.helpers import fail_next

DESPAWN = {"type": "despawn", "tick": 0, "entity_id": 1}


def unbounded_numbers(schema: dict, definitions: dict, where: str, seen: frozenset = frozenset()) -> list[str]:
    """Where `schema` takes a number (integer or not) without both a lower and an upper bound."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return [] if name in seen else unbounded_numbers(definitions[name], definitions, where, seen | {name})
    found = []
    types = schema.get("type", [])
    if {"integer", "number"} & ({types} if isinstance(types, str) else set(types)):
        low = "minimum" in schema or "exclusiveMinimum" in schema
        high = "maximum" in schema or "exclusiveMaximum" in schema
        if not (low and high):
            found.append(where)
    for name, sub in schema.get("properties", {}).items():
        found += unbounded_numbers(sub, definitions, f"{where}.{name}", seen)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            found += unbounded_numbers(schema[key], definitions, f"{where}[]", seen)
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        for sub in schema.get(key, []):
            found += unbounded_numbers(sub, definitions, where, seen)
    return found


@pytest.mark.parametrize("method", sorted(ARGUMENTS))
def test_every_number_a_runner_protocol_method_takes_is_bounded(method):
    schema = ARGUMENTS[method].model_json_schema()
    assert unbounded_numbers(schema, schema.get("$defs", {}), method) == []


OPENAPI = create_app(None).openapi()
OPERATIONS = [(path, verb, operation) for path, verbs in OPENAPI["paths"].items() for verb, operation in verbs.items()]


@pytest.mark.parametrize("path,verb,operation", OPERATIONS, ids=[f"{v.upper()} {p}" for p, v, _ in OPERATIONS])
def test_every_number_a_route_takes_is_bounded(path, verb, operation):
    definitions = OPENAPI["components"]["schemas"]
    found = [unbounded for parameter in operation.get("parameters", [])
             for unbounded in unbounded_numbers(parameter["schema"], definitions, f"{parameter['in']} {parameter['name']}")]
    for media in operation.get("requestBody", {}).get("content", {}).values():
        found += unbounded_numbers(media["schema"], definitions, "body")
    assert found == []


def test_the_bounds_check_finds_an_unbounded_number():
    definitions = {"Row": {"properties": {"n": {"type": "integer", "minimum": 0}, "ok": {"type": "integer", "minimum": 0,
                                                                                        "maximum": 1}}}}  # fmt: skip
    schema = {"properties": {"rows": {"type": "array", "items": {"$ref": "#/$defs/Row"}},
                             "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}}  # fmt: skip
    assert unbounded_numbers(schema, definitions, "m") == ["m.rows[].n", "m.limit"]


def refused(response, status: int, code: str) -> None:
    assert (response.status_code, response.json()["code"]) == (status, code), response.text


async def test_only_the_projector_acknowledges_the_outbox(client, world):
    assert (await client.post(f"/worlds/{world}/commands", json=DESPAWN, headers=PLAYER)).status_code == 202
    ack = f"/worlds/{world}/ledger/acknowledge_outbox"
    for headers in (OPERATOR, ADMIN):  # a runner host's token, an administrator's: neither holds the audit table
        refused(await client.post(ack, json={"up_to_seq": 1}, headers=headers), 403, "permission_denied")
        refused(await client.post(f"/worlds/{world}/ledger/read_outbox", json={}, headers=headers), 403, "permission_denied")
    read = await client.post(f"/worlds/{world}/ledger/read_outbox", json={}, headers=PROJECTOR)
    assert [event["event_seq"] for event in read.json()] == [1]
    assert (await client.post(ack, json={"up_to_seq": 1}, headers=PROJECTOR)).json()["projected_seq"] == 1
    # the projector may do nothing else of a runner's or a player's
    refused(await client.post(f"/worlds/{world}/ledger/acquire_writer", json={}, headers=PROJECTOR), 403, "permission_denied")
    refused(await client.post(f"/worlds/{world}/commands", json=DESPAWN, headers=PROJECTOR), 403, "permission_denied")


@pytest.mark.parametrize(
    "path,body",
    [
        ("/ledger/register_runner", {"runner_id": "idle", "instance": "i", "lease_ms": 86_400_000}),
        ("/worlds/{w}/ledger/claim_world", {"owner": "idle", "lease_ms": 86_400_000}),
        ("/worlds/{w}/ledger/renew_world", {"owner": "idle", "writer_epoch": 1, "lease_ms": 60_001}),
        ("/worlds/{w}/ledger/lease", {"owner": "o", "session": "s", "writer_epoch": 0, "tick": 0, "limit": 1, "lease_ms": 10**12}),
        ("/worlds/{w}/ledger/lease", {"owner": "o", "session": "s", "writer_epoch": 0, "tick": 0, "limit": 10**9, "lease_ms": 1}),
        ("/worlds/{w}/ledger/lease", {"owner": "o", "session": "s", "writer_epoch": 0, "tick": -1, "limit": 1, "lease_ms": 1}),
        ("/worlds/{w}/ledger/manifests", {"limit": -1}),
        ("/worlds/{w}/ledger/history", {"limit": 10**9}),
        ("/worlds/{w}/ledger/history", {"after_sequence": -5}),
        ("/worlds/{w}/ledger/load_state", {"limit": 10**9}),
        ("/worlds/{w}/ledger/read_outbox_columns", {"limit": -1}),
        ("/worlds/{w}/ledger/prune", {"idempotency_window_ms": -1}),
    ],
)
async def test_the_runner_protocol_refuses_numbers_out_of_bounds(client, world, snapshot, path, body):
    before = snapshot()
    token = PROJECTOR if "outbox" in path else ADMIN
    refused(await client.post(path.format(w=world), json=body, headers=token), 422, "invalid_request")
    assert snapshot() == before


async def test_a_runner_registers_and_hosts_for_a_minute_at_most(client, world):
    """Runners prove liveness by renewing (stepping): a registration or world lease of an hour is refused."""
    register = {"runner_id": "r1", "instance": "i", "lease_ms": 60_000}
    assert (await client.post("/ledger/register_runner", json=register, headers=OPERATOR)).status_code == 200
    claim = await client.post(f"/worlds/{world}/ledger/claim_world", json={"owner": "r1", "lease_ms": 60_000}, headers=OPERATOR)
    assert claim.status_code == 200, claim.text
    hour = {**register, "lease_ms": 3_600_000}
    refused(await client.post("/ledger/register_runner", json=hour, headers=OPERATOR), 422, "invalid_request")


def admission_row(**changes) -> dict:
    row = {"command_id": "c1", "schema_version": 1, "scheduled_tick": 0, "priority": 0, "operation": "despawn",
           "payload": '{"entity_id":1,"world_id":"w1"}', "principal": "pat", "origin": "gateway", "max_attempts": 3,
           "reserved_entity_id": None, "request_digest": None}  # fmt: skip
    return {**row, **changes}


@pytest.mark.parametrize(
    "changes",
    [
        {"command_id": "has space"},
        {"command_id": ""},
        {"command_id": "x" * 129},
        {"scheduled_tick": -1},
        {"scheduled_tick": 2**53},
        {"max_attempts": 0},
        {"max_attempts": 1001},
        {"priority": 2**31 + 1},
        {"schema_version": 0},
        {"reserved_entity_id": 0},
        {"principal": ""},
        {"principal": "a\u202eb"},
    ],
)
async def test_trusted_admission_is_held_to_admissions_checks(client, world, snapshot, changes):
    before = snapshot()
    answer = await client.post(f"/worlds/{world}/ledger/admit", json={"commands": [admission_row(**changes)]}, headers=ADMIN)
    assert answer.status_code == 422, answer.text
    assert snapshot() == before
    ok = await client.post(f"/worlds/{world}/ledger/admit", json={"commands": [admission_row()]}, headers=ADMIN)
    assert ok.status_code == 200, ok.text


@pytest.mark.parametrize("name", ["a\x00b", "\ufeffarena", "arena\u202e", "\u2066x\u2069", "tab\there", "line\nbreak",
                                  "\x7f", "\u200bzero", "\ue000private", "\u2028", " padded", "padded "])  # fmt: skip
async def test_world_names_are_printable_text(client, snapshot, name):
    before = snapshot()
    refused(await client.post("/worlds", json={"name": name}, headers=ADMIN), 422, "invalid_request")
    refused(await client.post("/worlds/w9/ledger/create_world", json={"name": name}, headers=ADMIN), 422, "invalid_request")
    assert snapshot() == before


def takes_text(schema: dict) -> bool:
    """Whether a query parameter's schema takes a string (alone, in a union, or as an array's items)."""
    inner = [*schema.get("anyOf", []), *([schema["items"]] if "items" in schema else [])]
    return schema.get("type") == "string" and "enum" not in schema or any(takes_text(s) for s in inner)


TEXT_QUERIES = [(path, verb, parameter["name"]) for path, verb, operation in OPERATIONS
                for parameter in operation.get("parameters", [])
                if parameter["in"] == "query" and takes_text(parameter["schema"])]  # fmt: skip


def test_the_query_filters_are_all_found():
    """The table below is read from the routes: a new text filter is checked without being listed."""
    assert {(path, name) for path, _, name in TEXT_QUERIES} >= {
        ("/worlds/{world_id}/commands", "principal"), ("/worlds/{world_id}/commands/{command_id}", "principal"),
        ("/worlds/{world_id}/commands:outcomes", "principal"), ("/worlds/{world_id}/dead-letters/{command_id}/redrive", "principal"),
        ("/worlds/{world_id}/audit", "principal"), ("/worlds/{world_id}/audit", "command_id"), ("/worlds/{world_id}/state", "component"),
    }  # fmt: skip


@pytest.mark.parametrize("value", ["a\x00b", "\ufeffpat", "pat\u202e", "tab\there", "\u200bpat", " pat", "pat "])
@pytest.mark.parametrize("path,verb,name", TEXT_QUERIES)
async def test_every_text_filter_in_a_query_is_printable_text(client, world, snapshot, path, verb, name, value):
    """A principal (or command id, or component) to filter by is held to the rule its names are
    made by: an unprintable one is refused with 422 `invalid_request`, changing nothing, and a
    printable one is not."""
    url = path.format(world_id=world, command_id="c1")
    body = {"command_ids": ["c1"]} if path.endswith(":outcomes") else None
    headers = ADMIN if "redrive" in path else ANALYST
    before = snapshot()
    answer = await client.request(verb, url, params={name: value}, json=body, headers=headers)
    refused(answer, 422, "invalid_request")
    assert name in answer.json()["message"]
    assert snapshot() == before
    printable = "Ab" if name == "component" else "pat"
    answer = await client.request(verb, url, params={name: printable}, json=body, headers=headers)
    assert answer.status_code != 422 or answer.json()["code"] != "invalid_request", answer.text


@pytest.mark.parametrize("field,value", [("principal", "pat\u202e"), ("principal", " pat"), ("principal", "a\x00b"),
                                         ("command_id", "has space"), ("command_id", "c\u200b1")])  # fmt: skip
def test_the_direct_audit_read_takes_the_same_filters(field, value):
    with pytest.raises(ValidationError):
        GetAuditHistory(world_id="w1", **{field: value})
    GetAuditHistory(world_id="w1", **{field: "pat"})


async def test_printable_names_in_any_script_are_welcome(client):
    created = await client.post("/worlds", json={"name": "Café ☕ 世界 — arène 2"}, headers=ADMIN)
    assert created.status_code == 201 and created.json()["name"] == "Café ☕ 世界 — arène 2"


@pytest.mark.parametrize("path", ["/worlds/w1%2Fcommands", "/worlds/w1%2fcommands", "/worlds/w1/commands/c%2F1",
                                  "/worlds%2Fw1", "/worlds/w1%2F..%2Fw2"])  # fmt: skip
async def test_an_encoded_slash_is_never_a_path_separator(client, world, path):
    await client.post(f"/worlds/{world}/commands", json=DESPAWN, headers={**PLAYER, "Idempotency-Key": "c"})
    answer = await client.get(path, headers=ADMIN)
    refused(answer, 422, "invalid_request")
    assert "%2F" in answer.json()["message"]


async def test_an_analyst_reads_every_principals_commands_and_changes_nothing(client, world):
    for token in ("t-player", "t-player2"):
        await client.post(f"/worlds/{world}/commands", json=DESPAWN, headers=auth(token, **{"Idempotency-Key": "same"}))
    everyone = (await client.get(f"/worlds/{world}/commands", headers=ANALYST)).json()["commands"]
    assert [(c["command_id"], c["principal"]) for c in everyone] == [("same", "pat"), ("same", "quinn")]
    quinns = await client.get(f"/worlds/{world}/commands/same", params={"principal": "quinn"}, headers=ANALYST)
    assert quinns.json()["principal"] == "quinn"
    refused(await client.post(f"/worlds/{world}/commands", json=DESPAWN, headers=ANALYST), 403, "permission_denied")
    redrive = f"/worlds/{world}/dead-letters/same/redrive"
    refused(await client.post(redrive, params={"principal": "pat"}, headers=ANALYST), 403, "permission_denied")
    refused(await client.post(f"/worlds/{world}/ledger/acquire_writer", json={}, headers=ANALYST), 403, "permission_denied")


async def test_a_reader_of_everyone_finds_a_command_without_naming_its_principal(client, world):
    await client.post(f"/worlds/{world}/commands", json=DESPAWN, headers={**PLAYER, "Idempotency-Key": "mine"})
    for headers in (ADMIN, OPERATOR, ANALYST):
        found = await client.get(f"/worlds/{world}/commands/mine", headers=headers)
        assert (found.status_code, found.json()["principal"]) == (200, "pat"), found.text
    # a player's own command id stays its own: it never reads another's by leaving `principal` out
    refused(await client.get(f"/worlds/{world}/commands/mine", headers=PLAYER2), 404, "command_not_found")
    # the same id in two principals' scopes: name one
    await client.post(f"/worlds/{world}/commands", json=DESPAWN, headers={**PLAYER2, "Idempotency-Key": "mine"})
    ambiguous = await client.get(f"/worlds/{world}/commands/mine", headers=ADMIN)
    refused(ambiguous, 409, "ambiguous_command")
    assert "pat" in ambiguous.json()["message"] and "quinn" in ambiguous.json()["message"]
    named = await client.get(f"/worlds/{world}/commands/mine", params={"principal": "quinn"}, headers=ADMIN)
    assert named.json()["principal"] == "quinn"
    # its own command of that id is what a reader of everyone means first: submitting and waiting stays simple
    await client.post(f"/worlds/{world}/commands", json=DESPAWN, headers={**ADMIN, "Idempotency-Key": "mine"})
    own = await client.get(f"/worlds/{world}/commands/mine", headers=ADMIN)
    assert (own.status_code, own.json()["principal"]) == (200, "root"), own.text


async def read_by_id(route: str, client, world: str, command_id: str, headers: dict, **params: str) -> str | None:
    """Whose command of this id `route` answers: its principal, None for none, or the refusal's code."""
    if route == "command":
        answer = await client.get(f"/worlds/{world}/commands/{command_id}", params=params, headers=headers)
        if answer.status_code == 200:
            return answer.json()["principal"]
    else:
        answer = await client.post(f"/worlds/{world}/commands:outcomes", params=params, json={"command_ids": [command_id]},
                                   headers=headers)  # fmt: skip
        if answer.status_code == 200:
            page = answer.json()
            assert page["missing"] == ([] if page["commands"] else [command_id])
            return page["commands"][0]["principal"] if page["commands"] else None
    return None if answer.json()["code"] == "command_not_found" else answer.json()["code"]


@pytest.mark.parametrize("route", ["command", "outcomes"])
@pytest.mark.parametrize("reader", [ADMIN, OPERATOR, ANALYST], ids=["admin", "operator", "analyst"])
async def test_every_read_by_id_finds_another_principals_command_for_a_reader_of_everyone(client, world, route, reader):
    """The read routes that take command ids read them alike (docs/http.md's role matrix): a reader of
    every principal's commands naming none finds its own, else the one principal's that has one."""
    await client.post(f"/worlds/{world}/commands", json=DESPAWN, headers={**PLAYER, "Idempotency-Key": "theirs"})
    assert await read_by_id(route, client, world, "theirs", reader) == "pat"
    assert await read_by_id(route, client, world, "theirs", PLAYER2) is None  # a player's scope stays its own
    assert await read_by_id(route, client, world, "theirs", reader, principal="quinn") is None
    await client.post(f"/worlds/{world}/commands", json=DESPAWN, headers={**PLAYER2, "Idempotency-Key": "theirs"})
    assert await read_by_id(route, client, world, "theirs", reader) == "ambiguous_command"
    assert await read_by_id(route, client, world, "theirs", reader, principal="quinn") == "quinn"
    if reader is not ANALYST:  # who may submit: its own command of the id is the one it means
        await client.post(f"/worlds/{world}/commands", json=DESPAWN, headers={**reader, "Idempotency-Key": "theirs"})
        assert await read_by_id(route, client, world, "theirs", reader) in ("root", "runner")


async def test_outcomes_of_a_reader_of_everyone_keep_admission_order(client, world):
    for headers, command_id in ((PLAYER, "a"), (ADMIN, "b"), (PLAYER2, "c"), (PLAYER, "d")):
        await client.post(f"/worlds/{world}/commands", json=DESPAWN, headers={**headers, "Idempotency-Key": command_id})
    page = (await client.post(f"/worlds/{world}/commands:outcomes", json={"command_ids": ["d", "nope", "c", "b", "a", "d"]},
                              headers=ADMIN)).json()  # fmt: skip
    assert [(c["command_id"], c["principal"]) for c in page["commands"]] == [("a", "pat"), ("b", "root"), ("c", "quinn"), ("d", "pat")]
    assert page["missing"] == ["nope"]


async def test_an_admin_redrives_a_dead_letter_without_naming_its_principal(client, world, authority):
    fail_next("doomed", Permanent("the account is closed"))
    submitted = await client.post(f"/worlds/{world}/commands", json=probe_spawn("doomed"),
                                  headers={**PLAYER, "Idempotency-Key": "doomed"})  # fmt: skip
    assert submitted.status_code == 202, submitted.text
    await Runtime(authority, owner="runner").dispatcher.apply(Step(world_id=world))
    redriven = await client.post(f"/worlds/{world}/dead-letters/doomed/redrive", headers=ADMIN)
    assert redriven.status_code == 202, redriven.text
    new = (await client.get(f"/worlds/{world}/commands/doomed.redrive", headers=PLAYER)).json()
    assert (new["status"], new["principal"]) == ("PENDING", "pat")


async def test_the_per_tick_quota_binds_players_not_admins(client, world):
    for i in range(QUOTA + 3):
        answer = await client.post(f"/worlds/{world}/commands", json=DESPAWN, headers={**ADMIN, "Idempotency-Key": f"a{i}"})
        assert answer.status_code == 202, answer.text
    for _ in range(QUOTA):
        assert (await client.post(f"/worlds/{world}/commands", json=DESPAWN, headers=PLAYER)).status_code == 202
    refused(await client.post(f"/worlds/{world}/commands", json=DESPAWN, headers=PLAYER), 429, "quota_exceeded")


async def test_a_viewer_reads_only_its_own_commands(client, world):
    await client.post(f"/worlds/{world}/commands", json=DESPAWN, headers={**PLAYER, "Idempotency-Key": "mine"})
    assert (await client.get(f"/worlds/{world}/commands", headers=VIEWER)).json()["commands"] == []
    refused(await client.get(f"/worlds/{world}/commands/mine", headers=VIEWER), 404, "command_not_found")
