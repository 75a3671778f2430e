"""DurableOptions, actors and roles: who may do what, and when a durable command is due."""

from __future__ import annotations

from enum import IntEnum

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from archetype.canonical import MAX_SAFE_INTEGER

MAX_PRIORITY = 2**31


class DurableOptions(BaseModel):
    """Target tick, priority and attempt budget of a durable command.

    Lower `priority` runs first within a tick; ties keep admission order (the ledger sequence).
    Booleans are refused (strict integers), so `tick=True` is an error, not tick 1.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tick: StrictInt = Field(ge=0, le=MAX_SAFE_INTEGER)
    priority: StrictInt = Field(default=0, ge=-MAX_PRIORITY, le=MAX_PRIORITY)
    max_attempts: StrictInt = Field(default=3, ge=1, le=1000)


class Role(IntEnum):
    """Roles are ranked: each includes every permission of the roles below it."""

    viewer = 1
    player = 2
    operator = 3
    admin = 4


class ActorCtx(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    principal: str = Field(min_length=1, max_length=200)
    roles: frozenset[Role] = frozenset()

    def has(self, required: Role) -> bool:
        return any(role >= required for role in self.roles)
