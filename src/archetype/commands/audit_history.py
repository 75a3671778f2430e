"""GetAuditHistory: the direct-only, commands-owned read of the audit projection.

It reads only the analytical projection (the Iceberg table a runtime's `audit` reader serves),
never the ledger: `CommandScheduler.history` is the authoritative ledger view, this is the
append-only event history, which may lag the ledger and is deduplicated by event identity.
Pyodide-safe: the reader behind `HandlerContext.audit` is supplied by the runtime.
"""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

from archetype.canonical import MAX_SAFE_INTEGER
from archetype.commands.dispatcher import HandlerContext
from archetype.commands.errors import AuditUnavailableError, PermissionDeniedError
from archetype.commands.identity import COMMAND_ID_PATTERN
from archetype.commands.options import Role
from archetype.commands.registry import OperationRegistry, OperationSpec
from archetype.commands.scheduler import CommandStatus, WorldHealth
from archetype.world.operations import WORLD_ID_PATTERN, Name, Operation

MAX_HISTORY_LIMIT = 10_000


class GetAuditHistory(Operation):
    """Audit events of one world, oldest first (by event sequence), filtered by every given field.

    `tick_from`/`tick_to` are inclusive and exclude events without a tick. `after_event_seq`
    pages: pass the last `event_seq` of the previous page.
    """

    operation: Literal["get_audit_history"] = "get_audit_history"
    world_id: str = Field(pattern=WORLD_ID_PATTERN)
    tick_from: StrictInt | None = Field(default=None, ge=0, le=MAX_SAFE_INTEGER)
    tick_to: StrictInt | None = Field(default=None, ge=0, le=MAX_SAFE_INTEGER)
    principal: Name | None = None
    command_id: str | None = Field(default=None, pattern=COMMAND_ID_PATTERN.pattern)
    status: CommandStatus | None = None
    after_event_seq: StrictInt = Field(default=0, ge=0, le=MAX_SAFE_INTEGER)
    limit: StrictInt = Field(default=100, ge=1, le=MAX_HISTORY_LIMIT)

    @model_validator(mode="after")
    def _tick_range(self) -> GetAuditHistory:
        if self.tick_from is not None and self.tick_to is not None and self.tick_from > self.tick_to:
            raise ValueError(f"tick_from {self.tick_from} is after tick_to {self.tick_to}")
        return self


class AuditEvent(BaseModel):
    """One projected outbox event, as the ledger wrote it (occurred_at in ms since the epoch)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    event_id: str
    world_id: str
    event_seq: int
    command_id: str
    event_type: str
    status: CommandStatus | WorldHealth  # a world's own events (world_stalled, world_recovered): its health
    operation: str
    tick: int | None
    principal: str | None
    origin: str
    occurred_at: int
    payload: str


class AuditReader(Protocol):
    """What a runtime's `audit` must offer GetAuditHistory: the projection, filtered and deduplicated."""

    async def history(self, query: GetAuditHistory) -> list[AuditEvent]: ...


async def _get_audit_history(ctx: HandlerContext, op: GetAuditHistory) -> list[AuditEvent]:
    if ctx.audit is None:
        raise AuditUnavailableError("this runtime has no audit log; GetAuditHistory reads only the audit projection")
    actor = ctx.actor
    if actor is not None and not actor.has(Role.analyst):
        # a principal's events are private to it, like its commands (docs/ledger.md, isolation)
        if op.principal not in (None, actor.principal):
            raise PermissionDeniedError("reading another principal's audit events needs the analyst role")
        op = op.model_copy(update={"principal": actor.principal})
    return await ctx.audit.history(op)


def _summary(op: GetAuditHistory) -> str:
    return f"audit history {op.model_dump(exclude_defaults=True, exclude={'operation'})}"


def register_audit_history(registry: OperationRegistry) -> None:
    registry.register(
        OperationSpec(
            GetAuditHistory, _get_audit_history, permission=Role.viewer, untrusted=True,
            world_key=lambda op: op.world_id, summarize=_summary,
        )  # fmt: skip
    )
