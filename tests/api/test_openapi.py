"""The published OpenAPI document tells the truth: real answers validate against it, errors are
our `{"code", "message"}` with their codes, the bearer scheme is declared, the submit body is a
union discriminated by `type`, and every code it publishes is documented in docs/errors.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import schemathesis

from archetype.api import create_app
from archetype.commands.errors import CommandError
from archetype.commands.http_translator import MUTATIONS
from tests.api.conftest import ADMIN, NOBODY, OPERATOR, PLAYER, QUOTA, VIEWER
from tests.api.test_routes import value
from tests.component_modules.alpha import Position

PUBLISHED = create_app(None).openapi()
SCHEMA = schemathesis.openapi.from_dict(PUBLISHED)
ERRORS_DOC = (Path(__file__).resolve().parents[2] / "docs" / "errors.md").read_text()


def published_codes() -> dict[str, set[int]]:
    codes: dict[str, set[int]] = {}
    for operations in PUBLISHED["paths"].values():
        for operation in operations.values():
            for status, response in operation["responses"].items():
                if status.startswith(("4", "5")):
                    enum = response["content"]["application/json"]["schema"]["properties"]["code"]["enum"]
                    for code in enum:
                        codes.setdefault(code, set()).add(int(status))
    return codes


def test_errors_are_our_envelope_never_the_frameworks():
    assert not {"HTTPValidationError", "ValidationError"} & set(PUBLISHED["components"]["schemas"])
    for path, operations in PUBLISHED["paths"].items():
        for method, operation in operations.items():
            statuses = {int(s) for s in operation["responses"]}
            assert {400, 408, 413, 422} <= statuses, (method, path)  # the front door answers these anywhere
            if path != "/health":
                assert {401, 403} <= statuses and operation["security"] == [{"HTTPBearer": []}], (method, path)


def test_the_bearer_scheme_is_declared():
    assert PUBLISHED["components"]["securitySchemes"]["HTTPBearer"] == {
        "type": "http", "scheme": "bearer", "description": "a token of the server's token table"
    }  # fmt: skip


def test_every_published_code_is_documented_with_its_status():
    for code, statuses in published_codes().items():
        rows = [line for line in ERRORS_DOC.splitlines() if line.startswith("|") and f"`{code}`" in line]
        assert rows, f"{code} is not in docs/errors.md"
        documented = {int(n) for row in rows for n in re.findall(r"\|\s*(\d{3})\s*\|", row)}
        assert statuses <= documented, f"{code}: published {statuses}, documented {documented}"


def every_error_class(cls=CommandError):
    for sub in cls.__subclasses__():
        yield sub
        yield from every_error_class(sub)


def test_every_4xx_error_class_is_documented():
    for cls in every_error_class():
        if 400 <= cls.http_status < 500:
            assert f"`{cls.code}`" in ERRORS_DOC, f"{cls.__name__} ({cls.code}) is not in docs/errors.md"


def test_the_submit_body_is_a_union_discriminated_by_type():
    schemas = PUBLISHED["components"]["schemas"]
    submit = schemas["SubmitCommand"]
    assert submit["discriminator"]["propertyName"] == "type"
    assert set(submit["discriminator"]["mapping"]) == set(MUTATIONS)
    assert len(submit["oneOf"]) == len(MUTATIONS)
    for type_name, ref in submit["discriminator"]["mapping"].items():
        variant = schemas[ref.rsplit("/", 1)[1]]
        assert variant["properties"]["type"]["const"] == type_name and variant["additionalProperties"] is False
        assert set(variant["required"]) == {"type", "tick", *MUTATIONS[type_name][1]}
    batch = schemas["SubmitBatchRequest"]["properties"]["commands"]["items"]
    assert batch == {"$ref": "#/components/schemas/SubmitCommand"}


def check(response, path: str) -> None:
    """`response` is an answer the published schema allows for this operation (status, body, codes)."""
    SCHEMA[path][response.request.method].validate_response(response)


async def test_real_answers_validate_against_the_published_schema(client, world):
    spawn = {"type": "spawn", "tick": 0, "components": [value(Position(x=1, y=2))]}
    answers = [
        (await client.get("/health"), "/health"),
        (await client.post("/worlds", json={"name": "arena", "world_id": world}, headers=ADMIN), "/worlds"),
        (await client.post("/worlds", json={"name": "other", "world_id": world}, headers=ADMIN), "/worlds"),  # 409
        (await client.post("/worlds", json={"name": "x"}, headers=PLAYER), "/worlds"),  # 403
        (await client.post("/worlds", content=b"{nope", headers={**ADMIN, "Content-Type": "application/json"}), "/worlds"),
        (await client.get("/worlds", headers=VIEWER), "/worlds"),
        (await client.get(f"/worlds/{world}", headers=VIEWER), "/worlds/{world_id}"),
        (await client.get("/worlds/ghost", headers=VIEWER), "/worlds/{world_id}"),  # 404
        (await client.get(f"/worlds/{world}", headers=NOBODY), "/worlds/{world_id}"),  # 403
        (await client.get(f"/worlds/{world}"), "/worlds/{world_id}"),  # 401
        (await client.get(f"/worlds/{world}/state", headers=VIEWER), "/worlds/{world_id}/state"),
    ]
    submit = "/worlds/{world_id}/commands"
    keyed = {**PLAYER, "Idempotency-Key": "ship"}
    answers += [
        (await client.post(f"/worlds/{world}/commands", json=spawn, headers=keyed), submit),
        (await client.post(f"/worlds/{world}/commands", json=spawn, headers=keyed), submit),  # replay
        (await client.post(f"/worlds/{world}/commands", json={**spawn, "tick": 1}, headers=keyed), submit),  # 409
        (await client.post(f"/worlds/{world}/commands", json={"type": "message", "tick": 0}, headers=PLAYER), submit),
        (await client.post(f"/worlds/{world}/commands", json={"type": "despawn", "tick": 0}, headers=PLAYER), submit),
        (await client.post(f"/worlds/{world}/commands", content=b"[" * 100 + b"]" * 100, headers=PLAYER), submit),
        (await client.post(f"/worlds/{world}/commands", content=b"x" * 70_000, headers=PLAYER), submit),  # 413
    ]
    for index in range(QUOTA):
        await client.post(f"/worlds/{world}/commands", json={"type": "despawn", "tick": 7, "entity_id": index + 1}, headers=PLAYER)
    over = await client.post(f"/worlds/{world}/commands", json={"type": "despawn", "tick": 7, "entity_id": 99}, headers=PLAYER)
    batch = {"commands": [{"type": "despawn", "tick": 3, "entity_id": 1}, spawn]}
    answers += [
        (over, submit),  # 429
        (await client.post(f"/worlds/{world}/commands:batch", json=batch, headers=PLAYER), submit + ":batch"),
        (await client.get(f"/worlds/{world}/commands/ship", headers=PLAYER), submit + "/{command_id}"),
        (await client.get(f"/worlds/{world}/commands/ship", headers=VIEWER), submit + "/{command_id}"),  # 404
        (await client.get(f"/worlds/{world}/commands", headers=OPERATOR), submit),
        (await client.post(f"/worlds/{world}/commands:outcomes", json={"command_ids": ["ship", "gone"]}, headers=PLAYER),
         submit + ":outcomes"),
        (await client.post(f"/worlds/{world}/commands:outcomes", json={"command_ids": []}, headers=PLAYER), submit + ":outcomes"),
        (await client.get(f"/worlds/{world}/state", params={"component": "Position", "entity_id": [1, 2]}, headers=VIEWER),
         "/worlds/{world_id}/state"),
        (await client.get(f"/worlds/{world}/state", params={"component": "Nobody"}, headers=VIEWER), "/worlds/{world_id}/state"),
        (await client.get(f"/worlds/{world}/state", params={"layout": "sections"}, headers=VIEWER), "/worlds/{world_id}/state"),
        (await client.get(f"/worlds/{world}/commands?principal=pat", headers=PLAYER), submit),  # 403
        (await client.get(f"/worlds/{world}/audit", headers=VIEWER), "/worlds/{world_id}/audit"),  # 503: no audit here
        (await client.post(f"/worlds/{world}/ledger/watermark", json={}, headers=OPERATOR), "/worlds/{world_id}/ledger/{method}"),
        (await client.post("/ledger/list_worlds", json={}, headers=OPERATOR), "/ledger/{method}"),
        (await client.post("/ledger/nope", json={}, headers=OPERATOR), "/ledger/{method}"),
        (await client.delete(f"/worlds/{world}", headers=ADMIN), "/worlds/{world_id}"),
        (await client.post(f"/worlds/{world}/commands", json=spawn, headers=PLAYER), submit),  # 409 world_closing
    ]
    statuses = set()
    for response, path in answers:
        check(response, path)
        statuses.add(response.status_code)
    assert statuses >= {200, 201, 202, 400, 401, 403, 404, 409, 413, 422, 429, 503}


@pytest.mark.parametrize("code", ["request_timeout", "duplicate_header", "payload_too_large", "non_canonical_value"])
def test_the_front_door_codes_are_published_for_every_operation(code):
    total = sum(len(operations) for operations in PUBLISHED["paths"].values())
    count = sum(
        1
        for operations in PUBLISHED["paths"].values()
        for operation in operations.values()
        if any(code in r["content"]["application/json"]["schema"]["properties"]["code"]["enum"]
               for s, r in operation["responses"].items() if s.startswith("4"))  # fmt: skip
    )
    assert count == total
