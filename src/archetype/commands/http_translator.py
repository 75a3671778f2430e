"""SubmitCommandRequest: the HTTP shape of one durable command, and its state-free translator.

The request recognises exactly five mutation spellings. Anything else, the legacy `message`,
`custom` and `query_world` envelopes included, fails validation with the error type
`unsupported_command_type`: it is never accepted as a durable no-op. Translation only builds the
family model and `DurableOptions`; dispatch, policy, queueing and replay stay with the dispatcher.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator
from pydantic_core import PydanticCustomError

from archetype.commands.errors import InvalidCommandError
from archetype.commands.identity import COMMAND_ID_PATTERN
from archetype.commands.options import DurableOptions
from archetype.commands.scheduler import DeferredItem
from archetype.world.components import ComponentTypeRef, ComponentValue
from archetype.world.operations import AddComponents, Despawn, RemoveComponents, Spawn, Update

CommandType = Literal["spawn", "despawn", "update", "add_components", "remove_components"]

# type -> (family model, the mutation fields it takes besides world_id)
MUTATIONS: dict[str, tuple[type[Spawn | Despawn | Update | AddComponents | RemoveComponents], frozenset[str]]] = {
    "spawn": (Spawn, frozenset({"components"})),
    "despawn": (Despawn, frozenset({"entity_id"})),
    "update": (Update, frozenset({"entity_id", "components"})),
    "add_components": (AddComponents, frozenset({"entity_id", "components"})),
    "remove_components": (RemoveComponents, frozenset({"entity_id", "component_types"})),
}
MUTATION_FIELDS = frozenset({"entity_id", "components", "component_types"})
LEGACY_TYPES = frozenset({"message", "custom", "query_world"})
UNSUPPORTED_TYPE_ERROR = "unsupported_command_type"


class IdempotencyKeyMismatchError(InvalidCommandError):
    code = "idempotency_key_mismatch"


def _option(name: str) -> Any:
    return DurableOptions.model_fields[name]


class SubmitCommandRequest(BaseModel):
    """One durable world mutation as a client submits it over HTTP."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: CommandType
    tick: Annotated[StrictInt, _option("tick")]
    priority: Annotated[StrictInt, _option("priority")]
    max_attempts: Annotated[StrictInt, _option("max_attempts")]
    command_id: Annotated[str | None, Field(pattern=COMMAND_ID_PATTERN.pattern)] = None
    entity_id: StrictInt | None = None
    components: list[ComponentValue] | None = None
    component_types: list[ComponentTypeRef] | None = None

    @field_validator("type", mode="before")
    @classmethod
    def _supported_type(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in MUTATIONS:
            legacy = " (a legacy envelope: it is not a durable command, not even a no-op)" if value in LEGACY_TYPES else ""
            supported = ", ".join(MUTATIONS)
            raise PydanticCustomError(UNSUPPORTED_TYPE_ERROR, f"type {value!r} is not supported{legacy}; use one of {supported}")
        return value

    @model_validator(mode="after")
    def _fields_of_type(self) -> SubmitCommandRequest:
        wanted = MUTATIONS[self.type][1]
        given = {name for name in MUTATION_FIELDS if getattr(self, name) is not None}
        if given != wanted:
            raise ValueError(f"{self.type} takes {sorted(wanted)}; got {sorted(given)}")
        return self


# The DurableOptions of each (tick, priority, max_attempts) translated, kept (a frozen value; at
# most OPTIONS_KEPT, cleared when full): a request's three fields carry DurableOptions' own
# constraints, already checked, and building the model again was 12k of translate's 44k CPU
# instructions. Requests for one tick, the usual traffic, share theirs.
OPTIONS_KEPT = 1024
_OPTIONS: dict[tuple[int, int, int], DurableOptions] = {}


def durable_options(tick: int, priority: int, max_attempts: int) -> DurableOptions:
    """`DurableOptions(tick=tick, priority=priority, max_attempts=max_attempts)`."""
    key = (tick, priority, max_attempts)
    exact = type(tick) is int and type(priority) is int and type(max_attempts) is int  # (True == 1, but is no tick)
    options = _OPTIONS.get(key) if exact else None
    if options is None:
        options = DurableOptions(tick=tick, priority=priority, max_attempts=max_attempts)
        if exact:
            if len(_OPTIONS) >= OPTIONS_KEPT:
                _OPTIONS.clear()
            _OPTIONS[key] = options
    return options


def translate(world_id: str, request: SubmitCommandRequest, *, idempotency_key: str | None = None) -> DeferredItem:
    """The family model and options of `request` for `world_id`; the idempotency key is the command id.

    Raises pydantic's ValidationError when the mutation does not validate as its family model,
    and IdempotencyKeyMismatchError when the header and `command_id` name different ids.
    """
    if idempotency_key is not None and request.command_id is not None and idempotency_key != request.command_id:
        raise IdempotencyKeyMismatchError(
            f"Idempotency-Key {idempotency_key!r} and command_id {request.command_id!r} name different commands"
        )
    model, fields = MUTATIONS[request.type]
    # the model's validator without BaseModel.__init__'s Python frame (what it calls)
    op = model.__pydantic_validator__.validate_python({"world_id": world_id, **{name: getattr(request, name) for name in fields}})
    options = durable_options(request.tick, request.priority, request.max_attempts)
    return DeferredItem(op=op, options=options, command_id=idempotency_key or request.command_id)


Mutation = Spawn | Despawn | Update | AddComponents | RemoveComponents


def request_of(op: Mutation, options: DurableOptions, *, command_id: str | None = None) -> SubmitCommandRequest:
    """The request that `translate`s back into `op` with `options`: what a client submits for a
    family model. (SpawnReserved has none: a spawn submitted alone reserves its entity itself.)"""
    for type_name, (model, fields) in MUTATIONS.items():
        if type(op) is model:
            return SubmitCommandRequest(type=type_name, tick=options.tick, priority=options.priority,
                                        max_attempts=options.max_attempts, command_id=command_id,
                                        **{name: getattr(op, name) for name in fields})  # fmt: skip
    named = ", ".join(model.__name__ for model, _ in MUTATIONS.values())
    raise TypeError(f"{type(op).__name__} is not one of the five durable mutations ({named})")
