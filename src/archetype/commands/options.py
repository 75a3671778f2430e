"""DurableOptions, actors and roles: who may do what, and when a durable command is due."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from archetype.canonical import MAX_SAFE_INTEGER

MAX_PRIORITY = 2**31
MAX_ATTEMPTS = 1000


class DurableOptions(BaseModel):
    """Target tick, priority and attempt budget of a durable command.

    Lower `priority` runs first within a tick; ties keep admission order (the ledger sequence).
    Booleans are refused (strict integers), so `tick=True` is an error, not tick 1.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tick: StrictInt = Field(ge=0, le=MAX_SAFE_INTEGER)
    priority: StrictInt = Field(default=0, ge=-MAX_PRIORITY, le=MAX_PRIORITY)
    max_attempts: StrictInt = Field(default=3, ge=1, le=MAX_ATTEMPTS)


class Role(Enum):
    """The roles a token grants. Every operation needs one role (docs/http.md, the role matrix),
    and an actor may do it when one of its roles is that role or includes it (`INCLUDES`)."""

    viewer = "viewer"  # reads worlds, their state, its own commands and audit events
    player = "player"  # + submits commands
    analyst = "analyst"  # + reads every principal's commands and audit events; writes nothing
    operator = "operator"  # player and analyst + hosts worlds (the runner protocol), redrives dead letters
    admin = "admin"  # operator + creates and destroys worlds, trusted admission, retention; no quota
    projector = "projector"  # viewer + reads and acknowledges the outbox: the audit projector alone


# The roles each role includes besides itself. Not a ranking: a player does not read others'
# commands, an analyst does not submit, and no role includes the projector's acknowledgement,
# which deletes outbox events that only the audit table's writer knows to be projected.
INCLUDES: dict[Role, tuple[Role, ...]] = {
    Role.viewer: (),
    Role.player: (Role.viewer,),
    Role.analyst: (Role.viewer,),
    Role.operator: (Role.player, Role.analyst),
    Role.admin: (Role.operator,),
    Role.projector: (Role.viewer,),
}


def _granted(role: Role) -> frozenset[Role]:
    return frozenset((role,)).union(*(_granted(included) for included in INCLUDES[role]))


GRANTS: dict[Role, frozenset[Role]] = {role: _granted(role) for role in Role}
"""Every role a role grants: itself and what it includes, transitively."""


class ActorCtx(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    principal: str = Field(min_length=1, max_length=200)
    roles: frozenset[Role] = frozenset()

    def has(self, required: Role) -> bool:
        return any(required in GRANTS[role] for role in self.roles)
