"""Command identity: the digest over every identity-bearing field of a persisted command."""

from __future__ import annotations

import re
from typing import Any

from archetype.canonical import digest

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
    return digest({field: row[field] for field in IDENTITY_FIELDS})
