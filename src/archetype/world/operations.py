"""The world family's operation models.

Six portable tick mutations may be durable (`PORTABLE_MUTATIONS`); the others are direct-only.
None of them carries target tick, priority or attempts: those belong to `DurableOptions`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from itertools import chain, repeat
from operator import attrgetter, eq, is_, itemgetter
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from archetype.canonical import (
    MAX_SAFE_INTEGER,
    PLAIN_SORTED,
    NonCanonicalValueError,
    canonical_text,
    check_canonical,
    plain_json,
    printable_text,
)
from archetype.world.components import (
    COMPONENT_NAME_PATTERN,
    FINGERPRINT_PATTERN,
    MAX_DATA_DEPTH,
    Component,
    ComponentTypeRef,
    ComponentValue,
    LiveValue,
    all_exactly,
    inert,
    live_component,
    loaded_class,
    non_canonical,
    text_as_given,
    texts_as_given,
)
from archetype.world.tick_mode import (
    DEFAULT_TICK_INTERVAL_MS,
    DEFAULT_TICK_MODE,
    MAX_TICK_INTERVAL_MS,
    TickMode,
    check_tick_mode,
)

WorldId = str
WORLD_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
Name = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(printable_text)]
"""A name people read (a world's, a principal's): 1 to 200 characters of printable text (docs/errors.md)."""
Label = Annotated[str, Field(min_length=1, max_length=256), AfterValidator(printable_text)]
"""What a runner calls itself to the ledger (its instance, lease owner, session): printable text too."""
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
# `model_validate` of these six models, field by field, written for the one kind of operation it
# is vouched on: every field of the exact type validation itself makes (exact `str`, `int`,
# tuple of exact ComponentValue / ComponentTypeRef) and component data made of exact JSON types
# (`plain_json`). The model then dumps to those very values, its canonical text parses back to
# equal values of the same types, and the decoder, given them, checks nothing these checks do not:
# `_strings_are_unicode` is implied (world ids match an ASCII pattern, the discriminator is the
# model's), `_to_values` / `_to_refs` leave a list without live objects as it is, ComponentValue's
# data check is `plain_json`'s at the same depth, and no field coerces. So the decoder would
# return a model that dumps to the same payload: admission skips it. Anything else (a subclass,
# a tuple in data, a field out of range) is left to the decoder, which says why.
# tests/world/test_payload_encoder.py pins the models' fields and validators (it fails the day
# one changes without this) and holds every verdict to the decoder's on generated operations.
_WORLD_ID = re.compile(WORLD_ID_PATTERN)
_COMPONENT_NAME = re.compile(COMPONENT_NAME_PATTERN)
_FINGERPRINT = re.compile(FINGERPRINT_PATTERN)
_VALUE_FIELDS = frozenset(ComponentValue.model_fields)
_REF_FIELDS = frozenset(ComponentTypeRef.model_fields)
# Strings the patterns accepted: a world and a handful of component types recur in every command.
# Only accepted strings are kept, and the lot is dropped when it grows past the bound.
_SEEN_LIMIT = 4096
_WORLD_IDS: set[str] = set()
_IDENTITIES: set[tuple[str, str]] = set()
# a batch's columns, read in C
_FIELDS, _EXTRA = attrgetter("__dict__"), attrgetter("__pydantic_extra__")
_NAME, _FINGERPRINT_OF, _DATA = itemgetter("name"), itemgetter("fingerprint"), itemgetter("data")



def _new_world_id_ok(value: str) -> bool:
    """Whether a world id not in _WORLD_IDS matches the pattern (then kept there): the encoder
    asks only of a `str` it has not seen, testing the set itself (a call fewer per command)."""
    if _WORLD_ID.fullmatch(value) is None:
        return False
    if len(_WORLD_IDS) >= _SEEN_LIMIT:
        _WORLD_IDS.clear()
    _WORLD_IDS.add(value)
    return True


def _identity_of(item: Any, model: type[ComponentTypeRef | ComponentValue], fields: frozenset[str]) -> dict[str, Any] | None:
    """The fields of `item` (its `__dict__`, read once: each attribute of a pydantic model goes
    through its class's `__getattr__` hook, a look-up each) when it is exactly `model` with a
    valid identity, as validation leaves one; None otherwise."""
    if type(item) is not model:
        return None
    given = item.__dict__
    if given.keys() != fields or item.__pydantic_extra__ is not None:
        return None
    name, fingerprint = given["name"], given["fingerprint"]
    if type(name) is not str or type(fingerprint) is not str:
        return None
    if (name, fingerprint) not in _IDENTITIES and not _new_identity_ok(name, fingerprint):
        return None
    return given


def _new_identity_ok(name: str, fingerprint: str) -> bool:
    """Whether a component identity (two `str`s) not in _IDENTITIES matches the patterns (then
    kept there), as `_new_world_id_ok` a world id."""
    if _COMPONENT_NAME.fullmatch(name) is None or _FINGERPRINT.fullmatch(fingerprint) is None:
        return False
    if len(_IDENTITIES) >= _SEEN_LIMIT:
        _IDENTITIES.clear()
    _IDENTITIES.add((name, fingerprint))
    return True


def _identities_ok(items: list[Any], model: type[ComponentTypeRef | ComponentValue], fields: frozenset[str]) -> list[dict[str, Any]] | None:
    """`_identity_of` of every one of `items`, asked column by column: their fields, or None
    unless it answers them for every one."""
    if not all_exactly(items, model) or not all(map(is_, map(_EXTRA, items), repeat(None))):
        return None
    given = list(map(_FIELDS, items))
    if not all(map(eq, map(dict.keys, given), repeat(fields))):
        return None
    names, fingerprints = list(map(_NAME, given)), list(map(_FINGERPRINT_OF, given))
    if not all_exactly(names, str) or not all_exactly(fingerprints, str):
        return None
    for name, fingerprint in set(zip(names, fingerprints, strict=True)) - _IDENTITIES:
        if not _new_identity_ok(name, fingerprint):
            return None
    return given


# The members of a payload in canonical (sorted) order; written directly, as the strings in them
# need no escaping: world ids, component names and fingerprints match ASCII patterns without
# quotes or backslashes, and data is written by the canonical encoder.
_MEMBERS = ("component_types", "components", "entity_id", "operation", "world_id")


def payload_encoder(
    model: type[Operation],
) -> tuple[Callable[[Any], tuple[str, list[LiveValue]] | None], Callable[[list[Any]], list[str] | None]]:
    """Admission's encoders for `model` (one of PORTABLE_MUTATIONS), of one operation and of a
    batch's (`encode_all`, below). For an operation it can vouch
    for, its canonical payload (the very text `model_dump` + canonical JSON give) and the
    component values still to be built live, as the decoder would hand them on, key order
    included; None for any other (the decoder is then asked, and says why). A value whose loaded
    class takes its data as given (`text_as_given`, which writes its text) is not among them: its
    data is then exact finite floats under the class's own field names, plain JSON (`plain_json`
    would say so: it is not asked) that validation accepts as it is."""
    if model not in PORTABLE_MUTATIONS:
        raise TypeError(f"{model.__qualname__} is not a portable mutation")
    fields = frozenset(model.model_fields)
    if not fields <= set(_MEMBERS):
        raise TypeError(f"{model.__qualname__} has fields this encoder does not write")
    name = model.model_fields["operation"].default
    tail = f'"operation":"{name}","world_id":"'  # the last two members, the world id's text to follow
    has_entity, has_values, has_refs = "entity_id" in fields, "components" in fields, "component_types" in fields
    if has_values and has_refs:
        raise TypeError(f"{model.__qualname__} carries both values and types")
    listed = "components" if has_values else "component_types" if has_refs else None

    def encode(op: Any) -> tuple[str, list[LiveValue]] | None:
        if type(op) is not model:
            return None
        fields_of = op.__dict__  # (read once: as `_identity_of`)
        if fields_of.keys() != fields or op.__pydantic_extra__ is not None:
            return None
        world_id = fields_of["world_id"]
        discriminator = fields_of["operation"]
        if type(discriminator) is not str or discriminator != name:  # type first: no __ne__ runs
            return None
        if type(world_id) is not str or (world_id not in _WORLD_IDS and not _new_world_id_ok(world_id)):
            return None
        # a model has one list or none: its type and size as validation leaves them, checked once
        items = fields_of[listed] if listed is not None else ()
        if listed is not None and (type(items) is not tuple or not 1 <= len(items) <= MAX_COMPONENTS):
            return None
        head = ""  # the members before "operation", each with its comma
        if has_refs:
            refs = items
            if not all(_identity_of(ref, ComponentTypeRef, _REF_FIELDS) is not None for ref in refs):
                return None
            head = (
                '"component_types":['
                + ",".join(f'{{"fingerprint":"{ref.fingerprint}","name":"{ref.name}"}}' for ref in refs) + "],"
            )  # fmt: skip
        pending: list[LiveValue] = []
        order = PLAIN_SORTED
        seen = True  # whether every pending value's class (if loaded) may see its data as it is: an `inert` one
        if has_values:
            values = items
            texts = []
            for index, value in enumerate(values):
                given = _identity_of(value, ComponentValue, _VALUE_FIELDS)
                if given is None:
                    return None
                data, component, fingerprint = given["data"], given["name"], given["fingerprint"]
                cls = loaded_class(component, fingerprint)
                text = None if cls is None else text_as_given(cls, data)
                if text is None:
                    plain = plain_json(data, MAX_DATA_DEPTH) if type(data) is dict else 0
                    if not plain:
                        return None
                    order = min(order, plain)
                    seen = seen and (cls is None or inert(cls))
                    pending.append((index, component, cls, data))
                    text = f'{{"data":{canonical_text(data)},"fingerprint":"{fingerprint}","name":"{component}"}}'
                texts.append(text)
            head = '"components":[' + ",".join(texts) + "],"
        if has_entity:
            entity_id = fields_of["entity_id"]
            if type(entity_id) is not int or not 1 <= entity_id <= MAX_SAFE_INTEGER:
                return None
            head += f'"entity_id":{entity_id},'
        payload = "{" + head + tail + world_id + '"}'
        if pending and (order != PLAIN_SORTED or not seen):
            # as the decoder would hand them on: keys in payload (sorted) order, and fresh
            # containers, never the caller's own, for a validator that might change them
            parsed = json.loads(payload)["components"]
            pending = [(index, component, cls, parsed[index]["data"]) for index, component, cls, _ in pending]
        return payload, pending

    # a batch's payloads: these constant pieces around its columns (the list's texts, the entity
    # ids, the world ids), joined
    pieces = ["{"]
    if listed is not None:
        pieces[-1] += f'"{listed}":['
        pieces.append("],")
    if has_entity:
        pieces[-1] += '"entity_id":'
        pieces.append(",")
    pieces[-1] += tail
    pieces.append('"}')

    def encode_all(ops: list[Any]) -> list[str] | None:
        """`encode`'s payloads of `ops`, byte for byte, found column by column (each check of a
        field asked of the batch's values at once, in C; an identity, a world id, a class once per
        distinct one) when `encode` vouches for every one with no value left to build live (each
        value's class takes its data as given); None otherwise: the caller asks `encode` of each."""
        if not ops:
            return []
        if not all_exactly(ops, model) or not all(map(is_, map(_EXTRA, ops), repeat(None))):
            return None
        given = list(map(_FIELDS, ops))
        if not all(map(eq, map(dict.keys, given), repeat(fields))):
            return None
        discriminators = list(map(_OPERATION, given))
        if not all_exactly(discriminators, str) or not all(map(eq, discriminators, repeat(name))):
            return None
        world_ids = list(map(_WORLD_ID_OF, given))
        if not all_exactly(world_ids, str):
            return None
        for world_id in set(world_ids) - _WORLD_IDS:
            if not _new_world_id_ok(world_id):
                return None
        columns: list[Iterable[str]] = []
        if listed is not None:
            lists = list(map(itemgetter(listed), given))
            if not all_exactly(lists, tuple):
                return None
            sizes = list(map(len, lists))
            if not 1 <= min(sizes) <= max(sizes) <= MAX_COMPONENTS:
                return None
            items = list(chain.from_iterable(lists))
            if has_refs:
                refs = _identities_ok(items, ComponentTypeRef, _REF_FIELDS)
                if refs is None:
                    return None
                each: list[str] | None = list(map(_REF_TEXT.__mod__, map(_REF_PAIR, refs)))
            else:
                values = _identities_ok(items, ComponentValue, _VALUE_FIELDS)
                each = None if values is None else _value_texts(values)
            if each is None:
                return None
            if max(sizes) == 1:
                columns.append(each)
            else:
                at = iter(each)
                columns.append([",".join(next(at) for _ in range(size)) for size in sizes])
        if has_entity:
            entity_ids = list(map(_ENTITY_ID, given))
            if not all_exactly(entity_ids, int) or not 1 <= min(entity_ids) <= max(entity_ids) <= MAX_SAFE_INTEGER:
                return None
            columns.append(map(str, entity_ids))
        columns.append(world_ids)
        parts: list[Iterable[str]] = [repeat(pieces[0])]
        for column, piece in zip(columns, pieces[1:], strict=True):
            parts += (column, repeat(piece))
        return list(map("".join, zip(*parts, strict=False)))  # (as long as the columns: the pieces repeat)

    return encode, encode_all


_OPERATION, _WORLD_ID_OF, _ENTITY_ID = itemgetter("operation"), itemgetter("world_id"), itemgetter("entity_id")
_REF_TEXT = '{"fingerprint":"%s","name":"%s"}'
_REF_PAIR = itemgetter("fingerprint", "name")


def _value_texts(values: list[dict[str, Any]]) -> list[str] | None:
    """The canonical text of each component value (its fields, identity checked), each written by
    its loaded class (`texts_as_given`, asked once per class); None unless every one's class is
    loaded and takes its data as given."""
    identities = list(zip(map(_NAME, values), map(_FINGERPRINT_OF, values), strict=True))
    classes = {identity: loaded_class(*identity) for identity in set(identities)}
    if len(classes) == 1:
        (cls,) = classes.values()
        return None if cls is None else texts_as_given(cls, list(map(_DATA, values)))
    texts: list[str] = [""] * len(values)
    for identity, cls in classes.items():
        at = [index for index, each in enumerate(identities) if each == identity]
        written = None if cls is None else texts_as_given(cls, [values[index]["data"] for index in at])
        if written is None:
            return None
        for index, text in zip(at, written, strict=True):
            texts[index] = text
    return texts


# -- direct-only --
class CreateWorld(Operation):
    """Create a world. `tick_mode` and `tick_interval_ms` say how its ticks follow time, for good
    (docs/ledger.md, "Tick modes"): lockstep (the default: every tick runs, none skipped, one per
    interval, or back to back at 0) or realtime (the wall clock's ticks, coalesced when there is
    nothing to run or the host is late)."""

    operation: Literal["create_world"] = "create_world"
    name: Name
    world_id: WorldId | None = Field(default=None, pattern=WORLD_ID_PATTERN)
    tick_mode: TickMode = Field(default=DEFAULT_TICK_MODE, description="lockstep: every tick runs; realtime: wall-clock ticks, coalesced")
    tick_interval_ms: int = Field(
        default=DEFAULT_TICK_INTERVAL_MS, ge=0, le=MAX_TICK_INTERVAL_MS, strict=True,
        description="the length of a tick: lockstep 0 runs ticks back to back (batch), realtime needs at least 1",
    )  # fmt: skip

    @model_validator(mode="after")
    def _interval_fits_mode(self) -> CreateWorld:
        check_tick_mode(self.tick_mode, self.tick_interval_ms)
        return self


class ForkWorld(Operation):
    """A new world made of `world_id` as it was at `at_tick` (docs/ledger.md, "Forks"): its state
    and component schemas, tick head `at_tick`, its tick mode, a ledger and clock of its own;
    `with_open_commands` copies the commands scheduled after `at_tick` that were open at it."""

    operation: Literal["fork_world"] = "fork_world"
    world_id: WorldId = _world_id()
    at_tick: int = Field(ge=-1, le=MAX_SAFE_INTEGER, strict=True)
    fork_world_id: WorldId | None = Field(default=None, pattern=WORLD_ID_PATTERN)
    name: str = Field(min_length=1, max_length=200)
    with_open_commands: bool = False


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
