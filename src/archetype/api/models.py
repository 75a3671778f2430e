"""Request and response bodies of the HTTP routes (the commands themselves are SubmitCommandRequest)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from archetype.canonical import parse_json
from archetype.commands.audit_history import AuditEvent
from archetype.commands.http_translator import SubmitCommandRequest
from archetype.commands.scheduler import CommandIdentity, CommandSummary
from archetype.world.operations import CreateWorld

MAX_BATCH = 1000


class CreateWorldRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, CreateWorld.model_fields["name"]]
    world_id: Annotated[str | None, CreateWorld.model_fields["world_id"]]


class WorldView(BaseModel):
    world_id: str
    name: str
    status: str
    tick_head: int
    created_at: int
    updated_at: int

    @classmethod
    def of(cls, info: Mapping[str, Any]) -> WorldView:
        return cls(**{name: info[name] for name in cls.model_fields})


class DestroyedWorld(BaseModel):
    world_id: str
    cancelled: int


class SubmitBatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    commands: list[SubmitCommandRequest] = Field(min_length=1, max_length=MAX_BATCH)


class CommandAccepted(BaseModel):
    """The durable identity of an admitted command; `replayed` when the key was admitted before."""

    command_id: str
    world_id: str
    sequence: int
    digest: str
    replayed: bool
    entity_id: int | None = None

    @classmethod
    def of(cls, identity: CommandIdentity, entity_id: int | None = None) -> CommandAccepted:
        return cls(**identity.model_dump(), entity_id=entity_id)


class BatchAccepted(BaseModel):
    commands: list[CommandAccepted]


class CommandView(CommandSummary):
    """A ledger row over HTTP: the shared fields plus the canonical payload as JSON.

    A stored payload without a canonical value (a row admitted before admission refused it)
    is answered as `payload: null` with the reason in `problem`, never as a failing page."""

    payload: dict[str, Any] | None
    problem: str | None = None

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> CommandView:
        try:
            payload = parse_json(row["payload"])
        except ValueError as exc:
            return cls(**cls.summary_fields(row), payload=None, problem=f"{type(exc).__name__}: {exc}")
        if not isinstance(payload, dict):
            return cls(**cls.summary_fields(row), payload=None, problem="the stored payload is not a JSON object")
        return cls(**cls.summary_fields(row), payload=payload)


class HistoryPage(BaseModel):
    commands: list[CommandView]
    next_after: int | None = Field(description="pass as `after` for the next page; null when this page is the last")


class AuditPage(BaseModel):
    events: list[AuditEvent]
    next_after: int | None = Field(description="pass as `after` for the next page; null when this page is the last")


class Health(BaseModel):
    status: str
