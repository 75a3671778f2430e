"""Bearer tokens -> ActorCtx, and the role gate every route passes before it looks anything up.

The token table maps a token to a principal and its roles. Only SHA-256 digests of the tokens are
kept, so a lookup neither stores nor compares the secrets themselves. The table comes from a
dict, a JSON file or the `ARCHETYPE_TOKENS` environment value (a secret, in the Worker):

    {"<token>": {"principal": "alice", "roles": ["player"]}, ...}

It is validated by the pydantic models below; a mistake is one `TokenTableError` line naming the
entry by its position (never by its token, a secret) and what to fix.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any, Literal

from fastapi import Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from archetype.api.errors import UnauthenticatedError
from archetype.commands.errors import PermissionDeniedError
from archetype.commands.options import ActorCtx, Role
from archetype.world.operations import Name

TOKENS_ENV = "ARCHETYPE_TOKENS"
RoleName = Literal[tuple(Role.__members__)]  # type: ignore[valid-type]

# Declares the scheme in the OpenAPI document (Swagger UI's Authorize button) and reads the token;
# auto_error=False so that a missing or non-bearer header is our 401 `unauthenticated`.
BEARER = HTTPBearer(auto_error=False, description="a token of the server's token table")
Bearer = Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)]


class TokenEntry(BaseModel):
    """One actor of the token table."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    principal: Name
    roles: list[RoleName] = Field(default_factory=list, description="role names, e.g. [\"player\"]")  # type: ignore[valid-type]

    def actor(self) -> ActorCtx:
        return ActorCtx(principal=self.principal, roles=frozenset(Role[name] for name in self.roles))


TokenKey = Annotated[str, Field(min_length=1, pattern=r"^\S+$")]
_TABLE = TypeAdapter(dict[TokenKey, TokenEntry])


class TokenTableError(ValueError):
    """A token table that does not validate, said in one line."""


def _one_line(exc: ValidationError, tokens: list[str]) -> str:
    problems = []
    for error in exc.errors(include_url=False):
        loc = list(error["loc"])
        where = "the table"
        if loc and isinstance(loc[0], str) and loc[0] in tokens:  # name the entry by position: its key is a secret
            where = f"entry {tokens.index(str(loc.pop(0))) + 1}"
            where += "'s token" if loc[:1] == ["[key]"] else ""
        field = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc if part != "[key]")[1:]
        problems.append(f"{where}{' ' + field if field else ''}: {error['msg']}")
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f'token table: {problems[0]}{more}; an entry is "<token>": {{"principal": "alice", "roles": ["player"]}}'


def validate_tokens(data: Any) -> dict[str, ActorCtx]:
    """The actors of a parsed token table; TokenTableError says what is wrong."""
    tokens = [key for key in data if isinstance(key, str)] if isinstance(data, Mapping) else []
    try:
        entries = _TABLE.validate_python(data)
    except ValidationError as exc:
        raise TokenTableError(_one_line(exc, tokens)) from None
    return {token: entry.actor() for token, entry in entries.items()}


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class TokenTable:
    def __init__(self, tokens: Mapping[str, ActorCtx | Mapping[str, Any]]) -> None:
        given = {token: actor for token, actor in tokens.items() if isinstance(actor, ActorCtx)}
        parsed = validate_tokens({token: entry for token, entry in tokens.items() if token not in given})
        self._actors = {_digest(token): actor for token, actor in {**given, **parsed}.items()}

    @classmethod
    def from_json(cls, text: str) -> TokenTable:
        try:
            data = TypeAdapter(Any).validate_json(text)
        except ValidationError as exc:
            raise TokenTableError(f"token table: not JSON ({exc.errors(include_url=False)[0]['msg']})") from None
        if not isinstance(data, dict):
            raise TokenTableError("token table: a JSON object of \"<token>\": {\"principal\", \"roles\"} is expected")
        return cls(data)

    def authenticate(self, token: str | None) -> ActorCtx:
        if not token or not token.strip():
            raise UnauthenticatedError("send `Authorization: Bearer <token>`")
        actor = self._actors.get(_digest(token.strip()))
        if actor is None:
            raise UnauthenticatedError("the bearer token is not known")
        return actor


def require(role: Role) -> Callable[..., Awaitable[ActorCtx]]:
    """A route dependency: authenticate, then deny a missing role before the route touches a world.

    A coroutine although it never waits: FastAPI runs a plain function dependency in a worker
    thread, a thread hop (and GIL hand-over) per dependency of every request."""

    async def dependency(request: Request, credentials: Bearer) -> ActorCtx:
        actor = request.app.state.tokens.authenticate(credentials.credentials if credentials else None)
        if not actor.has(role):
            raise PermissionDeniedError(f"this route needs the {role.name} role")
        return actor

    dependency.__name__ = f"require_{role.name}"
    return dependency
