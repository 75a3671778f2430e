"""The world family's operation models.

Six portable tick mutations may be durable (`PORTABLE_MUTATIONS`); the others are direct-only.
None of them carries target tick, priority or attempts: those belong to `DurableOptions`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from archetype.canonical import MAX_SAFE_INTEGER, NonCanonicalValueError, check_canonical
from archetype.world.components import Component, ComponentTypeRef, ComponentValue, live_component, non_canonical

WorldId = str
WORLD_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
EntityId = int


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


ComponentValues = Annotated[tuple[ComponentValue, ...], BeforeValidator(_to_values), Field(min_length=1, max_length=256)]
ComponentTypes = Annotated[tuple[ComponentTypeRef, ...], BeforeValidator(_to_refs), Field(min_length=1, max_length=256)]


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
