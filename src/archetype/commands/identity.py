"""Command identity: the digest over every identity-bearing field of a persisted command."""

from __future__ import annotations

import re
from json.encoder import encode_basestring_ascii
from typing import Any

from archetype.canonical import MAX_SAFE_INTEGER, digest, sha256_hex

# A command id (an idempotency key), in full; the scheduler and the ledger's redrive refuse others.
COMMAND_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")

IDENTITY_FIELDS = (
    "command_id",
    "schema_version",
    "world_id",
    "scheduled_tick",
    "priority",
    "max_attempts",
    "operation",
    "payload",
    "principal",
)


def command_digest(row: dict[str, Any]) -> str:
    """SHA-256 over the identity-bearing fields; origin, timestamps and state are not identity."""
    text = _identity_text(row)
    return sha256_hex(text) if text is not None else digest({field: row[field] for field in IDENTITY_FIELDS})


def _identity_text(row: dict[str, Any]) -> str | None:
    """The canonical JSON of the identity fields, written directly when every field has its plain
    type (ASCII strings, safe integers, a principal or None), as every admitted row does: the
    payload is then not walked and re-checked a second time after admission checked it. None for
    anything else, which the generic canonical path digests (or refuses) instead."""
    command_id, operation, payload, world_id = row["command_id"], row["operation"], row["payload"], row["world_id"]
    max_attempts, priority, scheduled_tick = row["max_attempts"], row["priority"], row["scheduled_tick"]
    schema_version, principal = row["schema_version"], row["principal"]
    # (one expression, not loops over the fields' names: the loops were a quarter of the text's cost)
    if not (
        type(command_id) is str and command_id.isascii() and type(operation) is str and operation.isascii()
        and type(payload) is str and payload.isascii() and type(world_id) is str and world_id.isascii()
        and type(max_attempts) is int and -MAX_SAFE_INTEGER <= max_attempts <= MAX_SAFE_INTEGER
        and type(priority) is int and -MAX_SAFE_INTEGER <= priority <= MAX_SAFE_INTEGER
        and type(scheduled_tick) is int and -MAX_SAFE_INTEGER <= scheduled_tick <= MAX_SAFE_INTEGER
        and type(schema_version) is int and -MAX_SAFE_INTEGER <= schema_version <= MAX_SAFE_INTEGER
    ):  # fmt: skip
        return None
    if principal is None:
        principal_text = "null"
    elif type(principal) is str and principal.isascii():
        principal_text = encode_basestring_ascii(principal)
    else:
        return None
    # the keys in sorted order, as canonical_json lays them out
    return (
        f'{{"command_id":{encode_basestring_ascii(command_id)},"max_attempts":{max_attempts},'
        f'"operation":{encode_basestring_ascii(operation)},"payload":{encode_basestring_ascii(payload)},'
        f'"principal":{principal_text},"priority":{priority},"scheduled_tick":{scheduled_tick},'
        f'"schema_version":{schema_version},"world_id":{encode_basestring_ascii(world_id)}}}'
    )
