"""Bearer tokens -> ActorCtx, and the role gate every route passes before it looks anything up.

The token table maps a token to a principal and its roles. Only SHA-256 digests of the tokens are
kept, so a lookup neither stores nor compares the secrets themselves. The table comes from a
dict, a JSON file or the `ARCHETYPE_TOKENS` environment value (a secret, in the Worker):

    {"<token>": {"principal": "alice", "roles": ["player"]}, ...}
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import Request

from archetype.api.errors import UnauthenticatedError
from archetype.commands.errors import PermissionDeniedError
from archetype.commands.options import ActorCtx, Role

TOKENS_ENV = "ARCHETYPE_TOKENS"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def actor_from_json(entry: Mapping[str, Any]) -> ActorCtx:
    """`{"principal": ..., "roles": ["player", ...]}` -> ActorCtx; role names are Role member names."""
    unknown = [r for r in entry.get("roles", ()) if r not in Role.__members__]
    if unknown:
        raise ValueError(f"unknown role(s) {unknown}; roles are {list(Role.__members__)}")
    return ActorCtx(principal=entry["principal"], roles=frozenset(Role[r] for r in entry.get("roles", ())))


class TokenTable:
    def __init__(self, tokens: Mapping[str, ActorCtx | Mapping[str, Any]]) -> None:
        self._actors = {
            _digest(token): actor if isinstance(actor, ActorCtx) else actor_from_json(actor)
            for token, actor in tokens.items()
        }

    @classmethod
    def from_json(cls, text: str) -> TokenTable:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("a token table is a JSON object of token -> {principal, roles}")
        return cls(data)

    def authenticate(self, authorization: str | None) -> ActorCtx:
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise UnauthenticatedError("send `Authorization: Bearer <token>`")
        actor = self._actors.get(_digest(token.strip()))
        if actor is None:
            raise UnauthenticatedError("the bearer token is not known")
        return actor


def require(role: Role) -> Callable[[Request], ActorCtx]:
    """A route dependency: authenticate, then deny a missing role before the route touches a world."""

    def dependency(request: Request) -> ActorCtx:
        actor = request.app.state.tokens.authenticate(request.headers.get("authorization"))
        if not actor.has(role):
            raise PermissionDeniedError(f"this route needs the {role.name} role")
        return actor

    dependency.__name__ = f"require_{role.name}"
    return dependency
