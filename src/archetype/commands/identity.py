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
_TEXT_FIELDS = ("command_id", "operation", "payload", "world_id")
_INTEGER_FIELDS = ("max_attempts", "priority", "scheduled_tick", "schema_version")


def command_digest(row: dict[str, Any]) -> str:
    """SHA-256 over the identity-bearing fields; origin, timestamps and state are not identity."""
    text = _identity_text(row)
    return sha256_hex(text) if text is not None else digest({field: row[field] for field in IDENTITY_FIELDS})


def _identity_text(row: dict[str, Any]) -> str | None:
    """The canonical JSON of the identity fields, written directly when every field has its plain
    type (ASCII strings, safe integers, a principal or None), as every admitted row does: the
    payload is then not walked and re-checked a second time after admission checked it. None for
    anything else, which the generic canonical path digests (or refuses) instead."""
    for field in _TEXT_FIELDS:
        value = row[field]
        if type(value) is not str or not value.isascii():
            return None
    for field in _INTEGER_FIELDS:
        value = row[field]
        if type(value) is not int or not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            return None
    principal = row["principal"]
    if principal is None:
        principal_text = "null"
    elif type(principal) is str and principal.isascii():
        principal_text = encode_basestring_ascii(principal)
    else:
        return None
    # the keys in sorted order, as canonical_json lays them out
    return (
        f'{{"command_id":{encode_basestring_ascii(row["command_id"])},"max_attempts":{row["max_attempts"]},'
        f'"operation":{encode_basestring_ascii(row["operation"])},"payload":{encode_basestring_ascii(row["payload"])},'
        f'"principal":{principal_text},"priority":{row["priority"]},"scheduled_tick":{row["scheduled_tick"]},'
        f'"schema_version":{row["schema_version"]},"world_id":{encode_basestring_ascii(row["world_id"])}}}'
    )
