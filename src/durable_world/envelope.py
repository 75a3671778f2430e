"""The RPC result shape: domain errors travel as data, never as exceptions.

An exception thrown out of a Durable Object reaches the caller as a generic JS Error (its Python
class is lost), so the object answers `{"ok": true, "result": ...}` or
`{"ok": false, "error": {"code": ..., "message": ...}}` and the caller re-raises the typed error.
"""

from __future__ import annotations

from typing import Any

from archetype.commands.errors import CommandError, error_from_json


def success(result: Any) -> dict[str, Any]:
    return {"ok": True, "result": result}


def failure(error: CommandError) -> dict[str, Any]:
    return {"ok": False, "error": error.to_json()}


def unwrap(reply: dict[str, Any]) -> Any:
    """The result of a reply, or its typed `CommandError` raised."""
    if reply.get("ok") is True:
        return reply.get("result")
    raise error_from_json(reply.get("error") or {})
