"""The exact operation registry: one OperationSpec per exact model type and discriminator name.

Resolution is by exact type only (no MRO fallback): a subclass of a registered model is not
registered. Only the six portable world mutations may carry a DurableOperation.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from archetype.canonical import NonCanonicalValueError, canonical_json
from archetype.commands.errors import InvalidCommandError, NotDurableError, UnregisteredOperationError
from archetype.commands.options import Role
from archetype.world.operations import PORTABLE_MUTATIONS

SUMMARY_LIMIT = 200

Handler = Callable[[Any, Any], Awaitable[Any]]


@dataclass(frozen=True)
class DurableOperation:
    """How a durable command is rebuilt from its stored payload and applied inside a tick.

    `decode(payload: dict)` must return the exact registered model; `materialize(world, op)` runs
    with the world's operation lock held and mutates only that world.
    """

    decode: Callable[[dict[str, Any]], BaseModel]
    materialize: Callable[[Any, Any], None]


@dataclass(frozen=True)
class OperationSpec:
    model: type[BaseModel]
    handler: Handler
    permission: Role
    quota_scope: str | None = None
    summarize: Callable[[Any], str] = repr
    trusted: bool = True
    untrusted: bool = False
    world_key: Callable[[Any], str] | None = None
    durable: DurableOperation | None = None
    version: int = 1

    @property
    def name(self) -> str:
        return operation_name(self.model)

    def require_durable(self) -> DurableOperation:
        if self.durable is None:
            raise NotDurableError(f"{self.name} is direct-only; it cannot be deferred")
        return self.durable

    def summary(self, op: Any) -> str:
        text = self.summarize(op)
        return text if len(text) <= SUMMARY_LIMIT else text[: SUMMARY_LIMIT - 3] + "..."

    def payload_of(self, op: BaseModel) -> str:
        """The canonical payload JSON of `op`, checked against this spec's discriminator."""
        if type(op) is not self.model:
            raise UnregisteredOperationError(f"{type(op).__qualname__} is not exactly {self.model.__qualname__}")
        data = op.model_dump(mode="json")
        if data.get("operation") != self.name:
            raise InvalidCommandError(f"operation {data.get('operation')!r} does not match discriminator {self.name!r}")
        try:
            return canonical_json(data)
        except NonCanonicalValueError as exc:
            raise InvalidCommandError(str(exc)) from exc

    def decode_exact(self, payload: str) -> BaseModel:
        """Rebuild the model from stored payload; it must be the exact type and round-trip byte for byte."""
        try:
            op = self.require_durable().decode(json.loads(payload))
        except ValidationError as exc:
            raise InvalidCommandError(f"payload does not decode as {self.name}: {exc.errors()[:3]}") from exc
        if type(op) is not self.model:
            raise InvalidCommandError(f"decoder for {self.name!r} returned {type(op).__qualname__}, not {self.model.__qualname__}")
        if self.payload_of(op) != payload:
            raise InvalidCommandError(f"payload of {self.name!r} does not round-trip its canonical JSON")
        return op


def operation_name(model: type[BaseModel]) -> str:
    field = model.model_fields.get("operation")
    name = field.default if field is not None else None
    if not isinstance(name, str) or not name:
        raise TypeError(f"{model.__qualname__} has no `operation` discriminator with a default name")
    return name


class OperationRegistry:
    def __init__(self) -> None:
        self._by_model: dict[type[BaseModel], OperationSpec] = {}
        self._by_name: dict[str, OperationSpec] = {}

    def register(self, spec: OperationSpec) -> OperationSpec:
        name = spec.name
        if spec.model in self._by_model:
            raise ValueError(f"model {spec.model.__qualname__} is already registered")
        if name in self._by_name:
            raise ValueError(f"operation name {name!r} is already registered")
        if spec.durable is not None and spec.model not in PORTABLE_MUTATIONS:
            raise ValueError(
                f"{spec.model.__qualname__} cannot be durable: only Spawn, SpawnReserved, Despawn, Update, "
                "AddComponents and RemoveComponents are portable tick mutations"
            )
        if spec.durable is not None and spec.world_key is None:
            raise ValueError(f"durable operation {name!r} needs a world-key extractor")
        if not (isinstance(spec.version, int) and spec.version >= 1):
            raise ValueError(f"operation {name!r} needs a positive schema version")
        if not (spec.trusted or spec.untrusted):
            raise ValueError(f"operation {name!r} is available to nobody")
        self._by_model[spec.model] = spec
        self._by_name[name] = spec
        return spec

    def resolve(self, op: object) -> OperationSpec:
        spec = self._by_model.get(type(op))
        if spec is None:
            raise UnregisteredOperationError(f"{type(op).__qualname__} is not a registered operation")
        return spec

    def named(self, name: str) -> OperationSpec:
        spec = self._by_name.get(name)
        if spec is None:
            raise UnregisteredOperationError(f"no operation named {name!r} is registered")
        return spec

    def __iter__(self):
        return iter(self._by_name.values())

    def __contains__(self, model: object) -> bool:
        return model in self._by_model
