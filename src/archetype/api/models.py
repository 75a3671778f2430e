"""Request and response bodies of the HTTP routes (the commands themselves are SubmitCommandRequest)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, GetJsonSchemaHandler, TypeAdapter, create_model, model_validator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from archetype.canonical import canonical_text, parse_json
from archetype.commands.audit_history import AuditEvent
from archetype.commands.http_translator import MUTATION_FIELDS, MUTATIONS, SubmitCommandRequest
from archetype.commands.identity import COMMAND_ID_PATTERN
from archetype.commands.ledger_rows import StateRead
from archetype.commands.port import StorageFault
from archetype.commands.scheduler import CommandIdentity, CommandSummary, WorldHealth
from archetype.commands.state_pages import entity_texts
from archetype.world.components import ComponentValue
from archetype.world.error_text import error_text
from archetype.world.operations import CreateWorld, ForkWorld
from archetype.world.tick_mode import TickMode, check_tick_mode

MAX_BATCH = 1000


class CreateWorldRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, CreateWorld.model_fields["name"]]
    world_id: Annotated[str | None, CreateWorld.model_fields["world_id"]]
    tick_mode: Annotated[TickMode, CreateWorld.model_fields["tick_mode"]]
    tick_interval_ms: Annotated[int, CreateWorld.model_fields["tick_interval_ms"]]

    def operation(self) -> CreateWorld:
        return CreateWorld(**self.model_dump())

    @model_validator(mode="after")
    def _interval_fits_mode(self) -> CreateWorldRequest:
        check_tick_mode(self.tick_mode, self.tick_interval_ms)
        return self


class ForkWorldRequest(BaseModel):
    """`POST /worlds/{world_id}:fork`: a new world made of this one at `at_tick` (docs/ledger.md, "Forks")."""

    model_config = ConfigDict(extra="forbid")

    at_tick: Annotated[int, ForkWorld.model_fields["at_tick"]]
    world_id: Annotated[str | None, ForkWorld.model_fields["fork_world_id"]]
    name: Annotated[str, ForkWorld.model_fields["name"]]
    with_open_commands: Annotated[bool, ForkWorld.model_fields["with_open_commands"]]

    def operation(self, source_world_id: str) -> ForkWorld:
        return ForkWorld(world_id=source_world_id, at_tick=self.at_tick, fork_world_id=self.world_id, name=self.name,
                         with_open_commands=self.with_open_commands)  # fmt: skip


class WorldHealthView(BaseModel):
    """Whether the world's ticks publish (docs/ledger.md, "World health")."""

    status: WorldHealth
    failed_attempts: int = Field(description="ticks failed before they were prepared since the last published one (or "
                                             "since an operator's retry: POST /worlds/{world_id}/retry)")
    last_error: str | None = Field(description="the last failed tick's error (type: message)")
    since: int | None = Field(description="when the world stalled, in ms since the epoch; null while ACTIVE")
    lag_ms: int | None = Field(
        description="a lockstep world: how late its last tick published after it was due, in ms (an interval or more: "
        "its host is behind and runs ticks back to back); null for a realtime world"
    )


class WorldView(BaseModel):
    world_id: str
    name: str
    status: str
    tick_head: int
    tick_mode: TickMode = Field(description="lockstep: every tick runs, none skipped; realtime: wall-clock ticks, coalesced")
    tick_interval_ms: int | None = Field(
        description="the length of a tick (lockstep 0: back to back); null: its host's interval (a world created "
        "before tick modes)"
    )
    created_at: int
    updated_at: int
    outbox_pending: int = Field(description="outbox events the audit projection has not acknowledged yet: its lag, in events")
    health: WorldHealthView

    @classmethod
    def of(cls, info: Mapping[str, Any]) -> WorldView:
        pending = info["next_event_seq"] - 1 - info["projected_seq"]
        lag = info["tick_lag_ms"] if info["tick_mode"] == "lockstep" else None
        health = WorldHealthView(status=info["health"], failed_attempts=info["failed_attempts"],
                                 last_error=info["health_error"], since=info["stalled_since"], lag_ms=lag)  # fmt: skip
        own = {name: info[name] for name in cls.model_fields if name not in ("outbox_pending", "health")}
        return cls(**own, outbox_pending=pending, health=health)


class WorldList(BaseModel):
    worlds: list[WorldView]


class EntityView(BaseModel):
    entity_id: int
    components: list[ComponentValue]


class StateView(BaseModel):
    """A world's published state at `tick_head`, one page of entities in id order."""

    tick_head: int
    entities: list[EntityView]
    next_after: int | None = Field(
        description="pass as `after` for the next page; null when nothing is left (a page may hold fewer entities than "
        "`limit`, even none, and still have a next one)"
    )

    @staticmethod
    def body(page: StateRead) -> bytes:
        """The JSON of this model for a ledger page, written around the components texts as they
        are (canonical JSON of the component values already), not through a model per entity."""
        entities = ",".join([f'{{"entity_id":{e},"components":{text}}}' for e, text in entity_texts(page["sections"])])
        return f'{{"tick_head":{page["tick_head"]},"entities":[{entities}],"next_after":{_json_int(page["next_after"])}}}'.encode()


class ComponentColumnView(BaseModel):
    """One component type in a section, its identity once, and each entity's value in the
    section's id order, as the stored chunks hold them (docs/storage.md): `columns` for a type of
    plain `float` / `int` fields (field -> `{"f8" | "i8": base64 of the little-endian float64 /
    int64 values}`), else `rows` (each entity's data)."""

    name: str
    fingerprint: str
    columns: dict[str, dict[Literal["f8", "i8"], str]] | None = None
    rows: list[dict[str, Any]] | None = None


class StateSectionView(BaseModel):
    """The entities of one signature (set of component types) in id order, a column per type."""

    ids: list[int]
    components: list[ComponentColumnView]


class StateSectionsView(BaseModel):
    """A page of a world's published state at `tick_head` (`layout=sections`): the same entities
    as the `entities` layout, grouped by signature, each type named once per section."""

    tick_head: int
    sections: list[StateSectionView]
    next_after: int | None = Field(description=StateView.model_fields["next_after"].description)

    @staticmethod
    def body(page: StateRead) -> bytes:
        """The JSON of this model for a ledger page, written around its columns and data texts as they are."""
        sections = ",".join([
            '{"ids":[' + ",".join(map(str, section["ids"])) + '],"components":[' + ",".join([
                f'{{"name":"{c["name"]}","fingerprint":"{c["fingerprint"]}",'
                + (f'"columns":{canonical_text(c["columns"])}}}' if "columns" in c else f'"rows":[{",".join(c["rows"])}]}}')
                for c in section["components"]
            ]) + "]}"
            for section in page["sections"]
        ])  # fmt: skip
        return f'{{"tick_head":{page["tick_head"]},"sections":[{sections}],"next_after":{_json_int(page["next_after"])}}}'.encode()


def _json_int(value: int | None) -> str:
    return "null" if value is None else str(value)


class DestroyedWorld(BaseModel):
    world_id: str
    cancelled: int


def _command_variant(type_name: str) -> type[BaseModel]:
    """The published shape of one `type`: the shared fields as SubmitCommandRequest declares them,
    and the mutation's own fields, required, as its family model declares them."""
    model, fields = MUTATIONS[type_name]
    shared = [name for name in SubmitCommandRequest.model_fields if name != "type" and name not in MUTATION_FIELDS]
    return create_model(  # type: ignore[call-overload]  # field definitions built from models: typed Any
        f"{model.__name__}Command",
        __config__=ConfigDict(extra="forbid"),
        __doc__=f"`type: {type_name}`: a durable `{model.__name__}` ({', '.join(sorted(fields))}).",
        type=(Literal[type_name], ...),
        **{name: (SubmitCommandRequest.model_fields[name].annotation, SubmitCommandRequest.model_fields[name]) for name in shared},
        **{name: (model.model_fields[name].annotation, model.model_fields[name]) for name in sorted(fields)},
    )


# Built at import time from the five variants, so only a runtime Union (not `X | Y`) can spell it.
_VARIANTS: Any = Union[tuple(_command_variant(type_name) for type_name in MUTATIONS)]  # noqa: UP007
_PUBLISHED_COMMAND: TypeAdapter[Any] = TypeAdapter(Annotated[_VARIANTS, Field(discriminator="type")])


class SubmitCommand(SubmitCommandRequest):
    """SubmitCommandRequest as the routes take it, published as what it accepts: a union
    discriminated by `type`, so each type's required fields show (validation stays
    SubmitCommandRequest's, with its `unsupported_command_type` for any other spelling)."""

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return handler(_PUBLISHED_COMMAND.core_schema)


class SubmitBatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    commands: list[SubmitCommand] = Field(min_length=1, max_length=MAX_BATCH)


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
        # its fields as they are (no dump of them first), through the validator without the Python __init__'s frame
        return cls.__pydantic_validator__.validate_python({**identity.__dict__, "entity_id": entity_id})

    @staticmethod
    def json_of(identity: CommandIdentity, entity_id: int | None = None) -> bytes:
        """The JSON of `CommandAccepted.of(identity, entity_id)`, written from the identity's own (whose
        fields are this model's first five, in its order) without building the model: building it cost
        an HTTP admission three times what writing its JSON does."""
        entity = b"null" if entity_id is None else b"%d" % entity_id
        return _IDENTITY_JSON(identity)[:-1] + b',"entity_id":' + entity + b"}"


_IDENTITY_JSON = CommandIdentity.__pydantic_serializer__.to_json


class RedriveAccepted(BaseModel):
    """The command redriving a dead letter; `replayed` when this redrive was made before."""

    command_id: str
    world_id: str
    sequence: int
    digest: str
    replayed: bool
    redriven_from: int = Field(description="the sequence of the dead-lettered command")


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
            return cls(**cls.summary_fields(row), payload=None, problem=error_text(exc))
        if not isinstance(payload, dict):
            return cls(**cls.summary_fields(row), payload=None, problem="the stored payload is not a JSON object")
        return cls(**cls.summary_fields(row), payload=payload)


class CommandOutcome(CommandSummary):
    """Where a command stands: a ledger row without its payload (which its submitter holds)."""

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> CommandOutcome:
        return cls(**cls.summary_fields(row))


class OutcomesRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command_ids: list[Annotated[str, Field(pattern=COMMAND_ID_PATTERN.pattern)]] = Field(min_length=1, max_length=MAX_BATCH)


class OutcomesPage(BaseModel):
    """The outcomes of the command ids asked for, in admission order, and the ids of those asked
    for that name no command the caller may read (never admitted, another principal's, or pruned)."""

    commands: list[CommandOutcome]
    missing: list[str]


class HistoryPage(BaseModel):
    commands: list[CommandView]
    next_after: int | None = Field(description="pass as `after` for the next page; null when this page is the last")


class AuditPage(BaseModel):
    events: list[AuditEvent]
    next_after: int | None = Field(description="pass as `after` for the next page; null when this page is the last")


class HealthReason(BaseModel):
    """Why a process is degraded: its storage refuses writes (a full disk, docs/errors.md)."""

    code: Literal["storage_unavailable"]
    message: str
    since: int = Field(description="ms since the epoch: the first write refused since the last one that succeeded")


class Health(BaseModel):
    """`ok`, or `degraded` with its reason: the process answers, its storage takes no write (reads
    and everything already written go on; admissions answer 503 `storage_unavailable`)."""

    status: Literal["ok", "degraded"]
    reason: HealthReason | None = None

    @classmethod
    def of(cls, fault: StorageFault | None) -> Health:
        if fault is None:
            return cls(status="ok")
        return cls(status="degraded", reason=HealthReason(code="storage_unavailable", message=fault.message,
                                                          since=fault.since_ms))  # fmt: skip


class ComponentView(BaseModel):
    """One component type a world recorded: what a client sends as `name` and `fingerprint`, and
    the canonical prefixed schema its data is validated against at admission (docs/components.md)."""

    name: str
    fingerprint: str = Field(description="SHA-256 (hex) of the canonical JSON of `schema`")
    schema_: dict[str, Any] = Field(alias="schema", description="the canonical prefixed schema: component, properties, required, defs")
    recorded_at: int
    superseded_by: str | None = Field(description="the fingerprint a declared migration moved this type's values to; null: current")

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)


class MigrationView(BaseModel):
    name: str
    from_fingerprint: str
    to_fingerprint: str
    tick: int = Field(description="the tick head the migration rewrote the world at")
    entities: int
    commands: int
    migrated_at: int


class ComponentList(BaseModel):
    """The component types a world recorded (by name, then when) and the component migrations it ran."""

    components: list[ComponentView]
    migrations: list[MigrationView]
