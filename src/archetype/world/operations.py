"""The world family's operation models.

Six portable tick mutations may be durable (`PORTABLE_MUTATIONS`); the others are direct-only.
None of them carries target tick, priority or attempts: those belong to `DurableOptions`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from archetype.canonical import MAX_SAFE_INTEGER, NonCanonicalValueError, check_canonical, nesting_exceeds
from archetype.world.components import (
    COMPONENT_NAME_PATTERN,
    FINGERPRINT_PATTERN,
    MAX_DATA_DEPTH,
    Component,
    ComponentTypeRef,
    ComponentValue,
    live_component,
    non_canonical,
)

WorldId = str
WORLD_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
EntityId = int
MAX_COMPONENTS = 256
"""The most component values (or types) one mutation carries."""


class Operation(BaseModel):
    """Base of every operation model: frozen, unknown fields forbidden, exact `operation` tag.

    Every string field holds valid Unicode (no lone surrogates): names and ids are stored and
    answered as JSON, where a lone surrogate has no form. Component values check their own data.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")

    @model_validator(mode="after")
    def _strings_are_unicode(self) -> Operation:
        for name, value in self.__dict__.items():
            if isinstance(value, str) and not value.isascii():
                try:
                    check_canonical(value, path=f"$.{name}")
                except NonCanonicalValueError as exc:
                    raise non_canonical(exc) from None
        return self


def _entity_id() -> Any:
    return Field(ge=1, le=MAX_SAFE_INTEGER, strict=True)


def _world_id() -> Any:
    return Field(pattern=WORLD_ID_PATTERN)


def _to_values(items: Any) -> Any:
    """Direct construction may pass live components; they become values with affinity."""
    if isinstance(items, (list, tuple)):
        return tuple(_to_value(c) if isinstance(c, Component) else c for c in items)
    return items


def _to_value(component: Component) -> ComponentValue:
    try:
        return ComponentValue.from_component(component)
    except NonCanonicalValueError as exc:
        raise non_canonical(exc) from None


def _to_refs(items: Any) -> Any:
    if isinstance(items, (list, tuple)):
        return tuple(ComponentTypeRef.from_type(t) if isinstance(t, type) else t for t in items)
    return items


ComponentValues = Annotated[
    tuple[ComponentValue, ...], BeforeValidator(_to_values), Field(min_length=1, max_length=MAX_COMPONENTS)
]
ComponentTypes = Annotated[
    tuple[ComponentTypeRef, ...], BeforeValidator(_to_refs), Field(min_length=1, max_length=MAX_COMPONENTS)
]


class Spawn(Operation):
    operation: Literal["spawn"] = "spawn"
    world_id: WorldId = _world_id()
    components: ComponentValues

    @classmethod
    def from_components(cls, *, world_id: str, components: Iterable[Component]) -> Spawn:
        return cls(world_id=world_id, components=tuple(components))


class SpawnReserved(Operation):
    operation: Literal["spawn_reserved"] = "spawn_reserved"
    world_id: WorldId = _world_id()
    entity_id: EntityId = _entity_id()
    components: ComponentValues


class Despawn(Operation):
    operation: Literal["despawn"] = "despawn"
    world_id: WorldId = _world_id()
    entity_id: EntityId = _entity_id()


class Update(Operation):
    operation: Literal["update"] = "update"
    world_id: WorldId = _world_id()
    entity_id: EntityId = _entity_id()
    components: ComponentValues


class AddComponents(Operation):
    operation: Literal["add_components"] = "add_components"
    world_id: WorldId = _world_id()
    entity_id: EntityId = _entity_id()
    components: ComponentValues


class RemoveComponents(Operation):
    operation: Literal["remove_components"] = "remove_components"
    world_id: WorldId = _world_id()
    entity_id: EntityId = _entity_id()
    component_types: ComponentTypes



PORTABLE_MUTATIONS: tuple[type[Operation], ...] = (Spawn, SpawnReserved, Despawn, Update, AddComponents, RemoveComponents)


# -- admission's short cut past the decoder --
# What `model_validate` checks of these six models, field by field, written for the one input it
# is asked about at admission: the parsed canonical payload (plain JSON types, sorted keys, no
# NaN, integers within +/-(2**53-1), valid Unicode, nesting within MAX_DEPTH). On such input the
# models' own validators add nothing further: `_strings_are_unicode` is implied (world ids match
# an ASCII pattern, and the payload's strings are valid Unicode), `_to_values`/`_to_refs` leave a
# list without live objects as it is, and no field coerces, so the decoded model dumps to the
# same payload. tests/world/test_payload_fits.py pins the models' fields and validators (it fails
# the day one changes without this) and holds every verdict to the decoder's on generated input.
_WORLD_ID = re.compile(WORLD_ID_PATTERN)
_COMPONENT_NAME = re.compile(COMPONENT_NAME_PATTERN)
_FINGERPRINT = re.compile(FINGERPRINT_PATTERN)
_VALUE_KEYS = frozenset({"data", "fingerprint", "name"})
_REF_KEYS = frozenset({"fingerprint", "name"})


def _identity_fits(item: Any, keys: frozenset[str]) -> bool:
    if type(item) is not dict or item.keys() != keys:
        return False
    name, fingerprint = item["name"], item["fingerprint"]
    return (
        type(name) is str and _COMPONENT_NAME.fullmatch(name) is not None
        and type(fingerprint) is str and _FINGERPRINT.fullmatch(fingerprint) is not None
    )  # fmt: skip


# A value's data sits three containers deep in its payload (the payload, `components`, the value):
# a payload nesting no deeper than this cannot hold data nested deeper than MAX_DATA_DEPTH, and
# as the payload is canonical, neither can its data be otherwise non-canonical.
_SHALLOW = 3 + MAX_DATA_DEPTH


def _value_fits(item: Any, shallow: bool) -> bool:
    if not _identity_fits(item, _VALUE_KEYS) or type(item["data"]) is not dict:
        return False
    if not shallow:
        try:
            check_canonical(item["data"], max_depth=MAX_DATA_DEPTH)  # ComponentValue._canonical_data's check
        except NonCanonicalValueError:
            return False
    return True


def _values_fit(value: Any, shallow: bool) -> bool:
    return (
        type(value) is list and 1 <= len(value) <= MAX_COMPONENTS and all(_value_fits(item, shallow) for item in value)
    )


def _refs_fit(value: Any, shallow: bool) -> bool:
    return type(value) is list and 1 <= len(value) <= MAX_COMPONENTS and all(_identity_fits(item, _REF_KEYS) for item in value)


_FIELD_FITS: dict[str, Callable[[Any, bool], bool]] = {
    "world_id": lambda value, _: type(value) is str and _WORLD_ID.fullmatch(value) is not None,
    "entity_id": lambda value, _: type(value) is int and 1 <= value <= MAX_SAFE_INTEGER,  # strict: not a bool
    "components": _values_fit,
    "component_types": _refs_fit,
}


def payload_fits(model: type[Operation]) -> Callable[[dict[str, Any], str], bool]:
    """A predicate on a canonical payload of `model` (one of PORTABLE_MUTATIONS), parsed and as
    text: True when `model.model_validate` accepts it and the model dumps back to the same text,
    its component values being exactly the payload's (name, fingerprint, data); False when it
    might not (the decoder is then asked, and says why). Admission uses it in place of the decoder."""
    if model not in PORTABLE_MUTATIONS:
        raise TypeError(f"{model.__qualname__} is not a portable mutation")
    name = model.model_fields["operation"].default
    fields = frozenset(model.model_fields)
    checks = [(field, _FIELD_FITS[field]) for field in model.model_fields if field != "operation"]

    def fits(payload: dict[str, Any], text: str) -> bool:
        if payload.keys() != fields or payload["operation"] != name:
            return False
        shallow = not nesting_exceeds(text, _SHALLOW)
        return all(check(payload[field], shallow) for field, check in checks)

    return fits


# -- direct-only --
class CreateWorld(Operation):
    operation: Literal["create_world"] = "create_world"
    name: str = Field(min_length=1, max_length=200)
    world_id: WorldId | None = Field(default=None, pattern=WORLD_ID_PATTERN)


class DestroyWorld(Operation):
    operation: Literal["destroy_world"] = "destroy_world"
    world_id: WorldId = _world_id()


class Step(Operation):
    operation: Literal["step"] = "step"
    world_id: WorldId = _world_id()


class QueryComponents(Operation):
    operation: Literal["query_components"] = "query_components"
    world_id: WorldId = _world_id()
    component_types: ComponentTypes



class ReserveEntityIds(Operation):
    operation: Literal["reserve_entity_ids"] = "reserve_entity_ids"
    world_id: WorldId = _world_id()
    count: int = Field(ge=1, le=100_000, strict=True)


def operation_components(op: Operation, *, context: Any = None) -> list[Component]:
    """Live components of a mutation carrying values (decoded through affinity or wire identity),
    each checked canonical (`live_component`): a value that would not survive publication fails
    here, as a permanent (ValueError) failure of its own command, not of the whole tick."""
    return [live_component(value, context=context) for value in getattr(op, "components", ())]
