"""Property-based: whatever the input, the API answers below 500, every refusal is a coded JSON
error, and a refused request persists nothing. Schemathesis derives requests (valid and invalid)
from the published OpenAPI schema; hypothesis fuzzes SubmitCommandRequest bodies against a live world."""

from __future__ import annotations

import asyncio
import functools
import json
import operator
import os
import types
import typing

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from schemathesis import checks
from starlette.testclient import TestClient

from archetype.api import create_app
from archetype.api.runner_protocol import ARGUMENTS, LEDGER_ROUTE_ROLES, WORLD_SCOPED
from archetype.audit import AuditLog
from archetype.commands import Role
from archetype.commands.ledger_rows import (
    AdmissionRow,
    ComponentMigrationRow,
    EntityRewrite,
    ManifestRow,
    PayloadRewrite,
    StateWrite,
)
from archetype.commands.scheduler import schema_row
from local_catalog import open_local_authority
from tests.api.conftest import ADMIN, PLAYER, PROJECTOR, TOKENS, persisted
from tests.component_modules.alpha import Position

FIELDS = ["type", "tick", "priority", "max_attempts", "command_id", "entity_id", "components", "component_types", "extra"]
TYPES = ["spawn", "despawn", "update", "add_components", "remove_components", "message", "custom", "query_world"]
EXAMPLES = int(os.environ.get("ARCHETYPE_PROPERTY_EXAMPLES", "60"))  # raise it for a longer hunt
PROPERTY_SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture
def edge(tmp_path):
    """A fresh app over a fresh catalog, with one world (`w1`), and a snapshot of what it persisted."""
    authority = open_local_authority(tmp_path / "data")
    audit = AuditLog.open_local(tmp_path / "data", authority)
    app = create_app(authority, tokens=TOKENS, max_body_bytes=16 * 1024, audit=audit)
    with TestClient(app) as client:
        assert client.post("/worlds", json={"name": "arena", "world_id": "w1"}, headers=ADMIN).status_code == 201
        yield app, client, lambda: persisted(tmp_path / "data")
    asyncio.run(audit.close())
    asyncio.run(authority.close())


def assert_refusal_is_clean(status: int, body: bytes, before: dict, after: dict) -> None:
    assert status < 500, body
    if status >= 400:
        error = json.loads(body)
        assert set(error) == {"code", "message"} and error["code"], error
        assert after == before, f"a refused request ({status} {error['code']}) persisted something"


# The schema as published; its operations do not depend on the authority behind the app.
SCHEMA = schemathesis.openapi.from_dict(create_app(None).openapi())
POSITIVE, NEGATIVE = schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE
CASES = [
    pytest.param(op, mode, id=f"{op.label}-{mode.value}")
    for op in (result.ok() for result in SCHEMA.get_all_operations())
    for mode in (POSITIVE, NEGATIVE)
    if mode is POSITIVE or any(len(part) for part in (op.path_parameters, op.query, op.headers, op.body))
]


# What the published schema promises of every answer: a status it lists for the operation, the
# content type and body schema it lists for that status (error codes included: they are enums).
CONFORMANCE = [checks.not_a_server_error, checks.status_code_conformance, checks.content_type_conformance,
               checks.response_schema_conformance]  # fmt: skip


def send(client: TestClient, case):
    kwargs = case.as_transport_kwargs(base_url="http://testserver", headers=ADMIN)
    body = {"json": kwargs["json"]} if "json" in kwargs else {"content": kwargs.get("data")}
    try:
        return client.request(kwargs["method"], kwargs["url"], headers=kwargs["headers"], params=kwargs["params"], **body)
    except httpx.InvalidURL:  # a query past httpx's 64 KiB (a thousand repeated filters, say): no client sends it
        reject()


@pytest.mark.parametrize("operation,mode", CASES)
@PROPERTY_SETTINGS
@given(data=st.data())
def test_answers_match_the_published_schema_and_refusals_persist_nothing(edge, operation, mode, data):
    _, client, snapshot = edge
    existing = {"world_id": "w1"} if "{world_id}" in operation.path and data.draw(st.booleans()) else None
    case = data.draw(operation.as_strategy(mode, path_parameters=existing))
    before = snapshot()
    response = send(client, case)
    case.validate_response(response, checks=CONFORMANCE)
    assert_refusal_is_clean(response.status_code, response.content, before, snapshot())


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
field_values = st.one_of(json_values, st.sampled_from(TYPES), st.integers(-3, 3))
bodies = st.dictionaries(st.sampled_from(FIELDS), field_values, max_size=6) | json_values


@given(body=bodies)
@PROPERTY_SETTINGS
def test_fuzzed_submissions(edge, body):
    _, client, snapshot = edge
    before = snapshot()
    response = client.post("/worlds/w1/commands", json=body, headers=PLAYER)
    assert response.status_code in (202, 400, 404, 409, 422, 429), response.text
    assert_refusal_is_clean(response.status_code, response.content, before, snapshot())


ids = st.sampled_from(["runner", "w1", "c1", ""]) | st.text(max_size=6)
ints = st.integers(0, 20) | st.integers(-(2**64), 2**64)
dicts = st.dictionaries(st.sampled_from(["commit_token", "tick", "writer_epoch", "settlements", "entity_id",
                                         "components", "command_id", "operation", "payload"]), json_values | ints | ids)  # fmt: skip
BY_ANNOTATION = {
    "int": ints, "str": ids, "bool": st.booleans(), "int | None": ints | st.none(), "str | None": ids | st.none(),
    "list[str]": st.lists(ids, max_size=3), "dict[str, Any]": dicts, "list[dict[str, Any]]": st.lists(dicts, max_size=3),
    "list[str] | None": st.lists(ids | st.sampled_from(["Position", "Health"]), max_size=3) | st.none(),
    "list[int] | None": st.lists(ints, max_size=3) | st.none(),
    # the exact wire shapes, well-typed most of the time so that calls get past validation
    "list[AdmissionRow]": st.lists(st.from_type(AdmissionRow) | dicts, max_size=3),
    "ManifestRow": st.from_type(ManifestRow) | dicts,
    "StateWrite": st.from_type(StateWrite) | dicts,
    "list[EntityRewrite]": st.lists(st.from_type(EntityRewrite) | dicts, max_size=3),
    "list[ComponentSchemaRow]": st.lists(
        st.sampled_from([schema_row(Position)]) | st.fixed_dictionaries({"name": ids, "fingerprint": ids, "schema": dicts})
        | dicts, max_size=3,
    ),
    "ComponentMigrationRow": st.from_type(ComponentMigrationRow) | dicts,
    "list[PayloadRewrite]": st.lists(st.from_type(PayloadRewrite) | dicts, max_size=3),
}  # fmt: skip


def _unbounded(annotation):
    """The annotation without its `Annotated[...]` bounds (`Quota | None` -> `int | None`), in lists too: the
    fuzzing draws values beyond them on purpose."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _unbounded(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return functools.reduce(operator.or_, map(_unbounded, typing.get_args(annotation)))
    if typing.get_origin(annotation) is list:  # `list[EntityId]` -> `list[int]`
        return list[_unbounded(typing.get_args(annotation)[0])]  # type: ignore[misc]
    return annotation


def _argument(annotation) -> st.SearchStrategy:
    annotation = _unbounded(annotation)
    spelled = annotation.__name__ if isinstance(annotation, type) and not hasattr(annotation, "__origin__") else str(annotation)
    spelled = spelled.replace("typing.", "").replace("archetype.commands.ledger_rows.", "")
    typed = BY_ANNOTATION[spelled]
    return st.one_of(typed, typed, typed, field_values)  # mostly well-typed, sometimes anything


@st.composite
def ledger_calls(draw):
    """A runner-protocol call with mostly well-typed arguments, so the fuzzing reaches the ledger."""
    method = draw(st.sampled_from(sorted(LEDGER_ROUTE_ROLES)))
    fields = ARGUMENTS[method].model_fields
    arguments = {name: draw(_argument(f.annotation)) for name, f in fields.items() if draw(st.integers(0, 9))}
    world_id = "doomed" if method == "destroy" else draw(st.sampled_from(["w1", "ghost"]))  # w1 stays ACTIVE
    path = f"/worlds/{world_id}/ledger/{method}" if method in WORLD_SCOPED else f"/ledger/{method}"
    return path, arguments


@given(call=ledger_calls())
@PROPERTY_SETTINGS
def test_fuzzed_runner_protocol_calls(edge, call):
    _, client, snapshot = edge
    path, arguments = call
    before = snapshot()
    outbox = LEDGER_ROUTE_ROLES[path.rsplit("/", 1)[1]] is Role.projector
    response = client.post(path, json=arguments, headers=PROJECTOR if outbox else ADMIN)
    assert_refusal_is_clean(response.status_code, response.content, before, snapshot())
