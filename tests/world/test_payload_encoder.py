"""Admission's short cut past the decoder (`archetype.world.operations.payload_encoder`, used by
`OperationSpec.payload_of`) against the path it replaces (`payload_of_exhaustive`): the same
payload text or the same refusal (class, code, message, path) for every operation, hostile ones
included; and the models it mirrors, pinned, so that a change to them fails here first."""

from __future__ import annotations

import enum
import math
import re
import warnings
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import Field, field_validator, model_validator

from archetype.canonical import MAX_SAFE_INTEGER, PLAIN, PLAIN_SORTED, plain_json
from archetype.commands.families import default_registry
from archetype.commands.options import ActorCtx, DurableOptions, Role
from archetype.commands.scheduler import CommandScheduler, DeferredItem
from archetype.world.components import Component, ComponentTypeRef, ComponentValue, canonical_by_validation, inert
from archetype.world.operations import PORTABLE_MUTATIONS, RemoveComponents, Spawn, SpawnReserved
from tests.component_modules.alpha import Health
from tests.component_modules.coercing import Counter, Label, Loose, Ratio, Tree
from tests.component_modules.floats import Point, Wild


class Defaulted(Component):
    """A non-canonical default cannot be written (the fingerprint refuses it): a factory can."""

    x: float = Field(default_factory=lambda: math.inf)


class Checked(Component):
    x: float

    @field_validator("x")
    @classmethod
    def _same(cls, value: float) -> float:
        return value


class Constrained(Component):
    x: float = Field(gt=0)


class Grabby(Component):
    """A validator that changes the very dict it is given."""

    n: int = 0

    @model_validator(mode="before")
    @classmethod
    def _grab(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data["n"] = data.get("n", 0) + 1
        return data


class Touchy:
    """A value that raises when compared."""

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("compared")

    __ne__ = __eq__
    __hash__ = object.__hash__


class Mode(enum.IntEnum):
    ONE = 1


class Text(str):
    pass


class Big(int):
    pass


REGISTRY = default_registry()
CLASSES: list[type[Component]] = [Point, Wild, Health, Counter, Label, Loose, Ratio, Tree]
IDENTITIES = [(cls.__name__, cls.component_fingerprint()) for cls in CLASSES] + [
    ("Elsewhere", "e" * 64),  # a class this process has not loaded (an edge admitting for runners)
    ("bad name", "e" * 64),
    ("Elsewhere", "E" * 64),
    ("Elsewhere", "e" * 63),
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**60), max_value=2**60),
    st.sampled_from([MAX_SAFE_INTEGER, MAX_SAFE_INTEGER + 1, -MAX_SAFE_INTEGER - 1, 2**200]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.sampled_from(["\udfff", "a\ud800", "é", "🐝", "mangle", Text("t"), Text("é"), Big(3), Big(2**60), Mode.ONE]),
    st.sampled_from([b"x", object(), {1, 2}]),
)
keys = st.one_of(st.text(max_size=4), st.sampled_from(["\udfff", "x", "y", "hp", "n", "value", "text", "inverse", "depth"]))


def _json_like(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.lists(inner, max_size=3).map(tuple),
            st.dictionaries(keys, inner, max_size=3),
        ),
        max_leaves=8,
    )


def _nested(depth: int) -> Any:
    value: Any = {}
    for _ in range(depth - 1):
        value = {"n": value}
    return value


fields_of = {
    Point: st.fixed_dictionaries({"x": st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), scalars)},
                                 optional={"y": scalars}),  # fmt: skip
    Wild: st.fixed_dictionaries({"x": st.one_of(st.sampled_from(["inf", "-inf", "nan", "1e400", 1.5]), scalars)}),
    Health: st.fixed_dictionaries({"hp": st.one_of(st.integers(min_value=-5, max_value=2**54), scalars)}),
    Counter: st.fixed_dictionaries({"n": st.one_of(st.sampled_from([1e18, 1e15, 2.5, 3.0]), st.integers(), scalars)}),
    Label: st.fixed_dictionaries({"text": st.one_of(st.sampled_from(["mangle", "ok"]), scalars)}),
    Loose: st.fixed_dictionaries({"value": _json_like(scalars)}),
    Ratio: st.fixed_dictionaries({"inverse": st.one_of(st.sampled_from([0, 0.0, 2.0, 1e-320]), scalars)}),
    Tree: st.fixed_dictionaries({"depth": st.sampled_from([0, 1, 5, 31, 33, 40])}),
}


@st.composite
def data_for(draw: st.DrawFn, identity: tuple[str, str]) -> Any:
    cls = next((c for c in CLASSES if (c.__name__, c.component_fingerprint()) == identity), None)
    kind = draw(st.sampled_from(["fields", "fields", "junk", "deep", "extra"]))
    if kind == "fields" and cls is not None:
        data = draw(fields_of[cls])
        if draw(st.booleans()):
            data = dict(reversed(list(data.items())))  # key order is the caller's
        return data
    if kind == "deep":
        return _nested(draw(st.sampled_from([31, 32, 33, 62, 65])))
    if kind == "extra":
        return {"zz": 1, "aa": 2, **(draw(fields_of[cls]) if cls is not None else {})}
    return draw(st.one_of(st.dictionaries(keys, _json_like(scalars), max_size=3), scalars))


@st.composite
def component_value(draw: st.DrawFn) -> Any:
    identity = draw(st.sampled_from(IDENTITIES))
    data = draw(data_for(identity))
    how = draw(st.sampled_from(["validated", "validated", "mutated", "constructed"]))
    if how == "validated" or how == "mutated":
        try:
            value = ComponentValue(name=identity[0], fingerprint=identity[1], data=data if how == "validated" else {})
        except Exception:
            how = "constructed"
        else:
            if how == "mutated" and isinstance(data, dict):
                value.data.update(data)  # the data dict is the one mutable thing in a frozen operation
            return value
    return ComponentValue.model_construct(name=identity[0], fingerprint=identity[1], data=data)


@st.composite
def type_ref(draw: st.DrawFn) -> Any:
    name, fingerprint = draw(st.sampled_from(IDENTITIES))
    if draw(st.booleans()):
        try:
            return ComponentTypeRef(name=name, fingerprint=fingerprint)
        except Exception:
            pass
    return ComponentTypeRef.model_construct(name=name, fingerprint=fingerprint)


world_ids = st.one_of(
    st.sampled_from(["w", "bench", "a.b-c_d", "x" * 64]),
    st.sampled_from(["x" * 65, "", "no spaces", "-w", "w\n", "wé", "w\udfff", Text("w"), 7, None]),
)
entity_ids = st.one_of(
    st.integers(min_value=1, max_value=50),
    st.sampled_from([0, -1, MAX_SAFE_INTEGER, MAX_SAFE_INTEGER + 1, True, 1.0, Big(2), "1", None]),
)


@st.composite
def operation(draw: st.DrawFn, model: Any = None) -> Any:
    model = model or draw(st.sampled_from(PORTABLE_MUTATIONS))
    fields: dict[str, Any] = {"world_id": draw(world_ids)}
    if "entity_id" in model.model_fields:
        fields["entity_id"] = draw(entity_ids)
    if "components" in model.model_fields:
        values = draw(st.lists(component_value(), min_size=0, max_size=3))
        if draw(st.integers(0, 20)) == 0:
            values = values * 100  # beyond 256 when there are three
        container = draw(st.sampled_from([tuple, tuple, tuple, list]))
        fields["components"] = container(values)
    if "component_types" in model.model_fields:
        fields["component_types"] = tuple(draw(st.lists(type_ref(), min_size=0, max_size=3)))
    if draw(st.integers(0, 10)) == 0:
        fields["operation"] = draw(st.sampled_from(["spawn", "update", Text(model.model_fields["operation"].default), Touchy()]))
    if draw(st.integers(0, 10)) == 0:
        fields.pop(draw(st.sampled_from(sorted(fields))))
    if draw(st.booleans()):
        try:
            return model(**fields)
        except Exception:
            pass
    return model.model_construct(**fields)


def outcome(check: Any, op: Any) -> tuple[Any, ...]:
    try:
        return ("ok", check(op))
    except Exception as exc:
        return ("refused", type(exc), str(exc), getattr(exc, "code", None), getattr(exc, "path", None))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(operation())
def test_the_short_cut_agrees_with_the_exhaustive_path(op: Any) -> None:
    spec = REGISTRY.resolve(op) if type(op) in REGISTRY else REGISTRY.named(type(op).model_fields["operation"].default)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pydantic warns when it dumps a model_construct'ed field of the wrong type
        assert outcome(spec.payload_of, op) == outcome(spec.payload_of_exhaustive, op)


class Backwards(Component):
    """Fields out of sorted order: a second class whose values the encoder writes as given."""

    zeta: float
    alpha: float = 1.0


finite = st.floats(allow_nan=False, allow_infinity=False)


def _point_as_constructed(data: dict[str, Any]) -> ComponentValue:
    """A value of `Point` as a caller may make one, unvalidated: a non-finite float, an `int`, a
    field missing."""
    return ComponentValue.model_construct(name="Point", fingerprint=Point.component_fingerprint(), data=data)


@st.composite
def ordinary(draw: st.DrawFn, model: Any) -> Any:
    """An operation of `model` as callers build it, whose values (of two classes taking their
    data as given) the batch encoder may write, or one of them a near miss."""
    fields: dict[str, Any] = {"world_id": draw(st.sampled_from(["w", "bench", "x" * 64]))}
    if "entity_id" in model.model_fields:
        fields["entity_id"] = draw(st.sampled_from([1, 7, MAX_SAFE_INTEGER]))
    if "components" in model.model_fields:
        odd = st.sampled_from([math.inf, -math.inf, math.nan, 1, True, Big(1), "1.0"])
        near_miss = st.one_of(
            st.fixed_dictionaries({"x": st.one_of(finite, odd), "y": st.one_of(finite, odd)}),
            st.sampled_from([{"x": 1.0}, {"x": 1.0, "y": 2.0, "z": 3.0}, {"y": 1.0, "x": -0.0}]),
        ).map(_point_as_constructed)  # fmt: skip
        values = st.one_of(st.builds(Point, x=finite, y=finite), st.builds(Backwards, zeta=finite, alpha=finite), near_miss)
        fields["components"] = draw(st.lists(values, min_size=1, max_size=3))
    if "component_types" in model.model_fields:
        fields["component_types"] = draw(st.lists(st.sampled_from([Point, Backwards, Health]), min_size=1, max_size=3))
    return model(**fields)


@st.composite
def batch(draw: st.DrawFn) -> tuple[Any, list[Any]]:
    """A model and a batch of its operations, built the ordinary way or not, with now and then one
    of another model or a hostile one among them."""
    model = draw(st.sampled_from(PORTABLE_MUTATIONS))
    kinds = st.one_of(ordinary(model), ordinary(model), ordinary(model), operation(model), operation())
    return model, draw(st.lists(kinds, min_size=1, max_size=5))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batch())
def test_a_batchs_payloads_are_the_single_encoders(drawn: tuple[Any, list[Any]]) -> None:
    """`encode_all` answers `encode`'s payloads, byte for byte, exactly when `encode` vouches for
    every operation with no value to build live; None (each asked alone) otherwise."""
    model, ops = drawn
    durable = REGISTRY.named(model.model_fields["operation"].default).require_durable()
    assert durable.encode is not None and durable.encode_all is not None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        singles = [durable.encode(op) for op in ops]
        expected = [one[0] for one in singles] if all(one is not None and not one[1] for one in singles) else None  # type: ignore[index]
        assert durable.encode_all(ops) == expected


def test_the_batch_encoder_writes_batches_built_the_ordinary_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """Else the property above could hold with `encode_all` answering None throughout; and a
    batch's rows take their payloads from it (no operation asked of `payload_of`)."""
    batches = [
        [Spawn(world_id="w", components=[Point(x=float(n))]) for n in range(5)],
        [Spawn(world_id="w", components=[Point(x=1.5), Backwards(zeta=-0.0)]), Spawn(world_id="v", components=[Backwards(zeta=2.0)])],
        [RemoveComponents(world_id="w", entity_id=n, component_types=[Point, Health][:n]) for n in (1, 2)],
        [SpawnReserved(world_id="w", entity_id=n, components=[Point(x=1e300, y=-2.5)]) for n in (1, 2, 3)],
    ]
    for ops in batches:
        durable = REGISTRY.resolve(ops[0]).require_durable()
        assert durable.encode_all is not None
        assert durable.encode_all(ops) == [REGISTRY.resolve(op).payload_of_exhaustive(op) for op in ops]
    from archetype.commands.options import DurableOptions
    from archetype.commands.registry import OperationSpec
    from archetype.commands.scheduler import CommandScheduler, DeferredItem

    items = [DeferredItem(op=op, options=DurableOptions(tick=0), command_id=f"c{n}") for n, op in enumerate(batches[1])]
    expected = [CommandScheduler(REGISTRY, authority=None)._admission_row(item, None, "local") for item in items]  # type: ignore[arg-type]
    monkeypatch.setattr(OperationSpec, "payload_of", None)
    world_ids, rows = CommandScheduler(REGISTRY, authority=None)._admission_rows(items, None, "local")  # type: ignore[arg-type]
    assert list(zip(world_ids, rows, strict=True)) == expected


def test_the_short_cut_is_taken_for_operations_built_the_ordinary_way() -> None:
    """Else the property above would hold trivially."""
    ops = [
        Spawn(world_id="w", components=[Point(x=1.5), Health(hp=3)]),
        Spawn(world_id="w", components=[
            ComponentValue(name="Elsewhere", fingerprint="e" * 64, data={"b": [1, {"z": 2, "a": None}], "a": "é"}),
        ]),  # fmt: skip
        SpawnReserved(world_id="w", entity_id=2, components=[Counter(n=1)]),
        RemoveComponents(world_id="w", entity_id=1, component_types=[Point, Health]),
    ]
    from archetype.canonical import parse_json
    from archetype.commands.http_translator import SubmitCommandRequest, translate

    body = parse_json('{"type":"spawn","tick":0,"priority":0,"max_attempts":3,"components":[{"name":"Point","fingerprint":"'
                      + Point.component_fingerprint() + '","data":{"y":2,"x":1.5}}]}')  # fmt: skip
    ops.append(translate("w", SubmitCommandRequest.model_validate(body)).op)  # what the HTTP route admits
    for op in ops:
        spec = REGISTRY.resolve(op)
        assert spec.require_durable().encode is not None and spec.durable.encode(op) is not None  # type: ignore[union-attr]
        assert spec.payload_of(op) == spec.payload_of_exhaustive(op)


def test_admission_never_hands_a_validator_the_callers_own_data() -> None:
    op = Spawn(world_id="w", components=[ComponentValue(name="Grabby", fingerprint=Grabby.component_fingerprint(), data={"n": 1})])
    spec = REGISTRY.resolve(op)
    first = spec.payload_of(op)
    assert op.components[0].data == {"n": 1}
    assert spec.payload_of(op) == first == spec.payload_of_exhaustive(op)
    assert op.components[0].data == {"n": 1}


def test_plain_json_vouches_for_exact_json_types_only() -> None:
    assert plain_json({"a": [1, 2.5, "é", None, True], "b": {"c": {}}}) == PLAIN_SORTED
    assert plain_json({"b": 1, "a": 2}) == PLAIN and plain_json({"a": {"d": 1, "c": 2}}) == PLAIN
    for refused in ({"a": (1,)}, {"a": Text("x")}, {"a": Big(1)}, {"a": Mode.ONE}, {"a": math.nan}, {"a": 2**53},
                    {"a": "\udfff"}, {"\udfff": 1}, {1: 1}, {"a": {1, 2}}, _nested(33)):  # fmt: skip
        assert plain_json(refused, 32) == 0, refused
    assert plain_json(_nested(32), 32) == PLAIN_SORTED


def test_inert_and_canonical_by_validation_are_only_claimed_where_they_hold() -> None:
    assert canonical_by_validation(Point) and inert(Point) and inert(Health) and inert(Wild) and inert(Counter)
    for cls in (Grabby, Checked, Constrained, Defaulted, Label, Loose, Ratio, Tree):
        assert not inert(cls), cls
    for cls in (Grabby, Wild, Defaulted, Checked, Constrained, Health, Counter, Label, Loose, Ratio, Tree):
        assert not canonical_by_validation(cls), cls


# -- the models the encoder mirrors, pinned (operations.py, "admission's short cut") --
CONFIG_KEYS = ("extra", "strict", "frozen", "revalidate_instances", "coerce_numbers_to_str")


def _shape(model: type[Any]) -> dict[str, Any]:
    decorators = model.__pydantic_decorators__
    return {
        "fields": {
            name: (re.sub(r" at 0x[0-9a-f]+", "", repr(info.annotation)), re.sub(r" at 0x[0-9a-f]+", "", repr(info.metadata)),
                   repr(info.default))
            for name, info in model.model_fields.items()
        },  # fmt: skip
        "validators": sorted(
            [*decorators.field_validators, *decorators.model_validators, *decorators.validators, *decorators.root_validators]
        ),
        "serializers": sorted([*decorators.field_serializers, *decorators.model_serializers, *decorators.computed_fields]),
        "config": {key: model.model_config.get(key) for key in CONFIG_KEYS},
    }


def test_the_mirrored_models_are_unchanged() -> None:
    """payload_encoder re-states what validating these models checks. If this fails, a model
    changed: make the encoder check what it now checks (or stop vouching), then update the pin."""
    shapes = {model.__name__: _shape(model) for model in (*PORTABLE_MUTATIONS, ComponentValue, ComponentTypeRef)}
    assert shapes == PINNED


def _pinned() -> dict[str, Any]:
    config = {"extra": "forbid", "strict": None, "frozen": True, "revalidate_instances": None, "coerce_numbers_to_str": None}
    world = ("<class 'str'>", "[_PydanticGeneralMetadata(pattern='^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$')]", "PydanticUndefined")
    entity = ("<class 'int'>", "[Strict(strict=True), Ge(ge=1), Le(le=9007199254740991)]", "PydanticUndefined")
    sized = "json_schema_input_type=PydanticUndefined), MinLen(min_length=1), MaxLen(max_length=256)]"
    values = ("tuple[archetype.world.components.ComponentValue, ...]",
              "[BeforeValidator(func=<function _to_values>, " + sized, "PydanticUndefined")  # fmt: skip
    refs = ("tuple[archetype.world.components.ComponentTypeRef, ...]",
            "[BeforeValidator(func=<function _to_refs>, " + sized, "PydanticUndefined")  # fmt: skip

    def op(name: str, **fields: Any) -> dict[str, Any]:
        literal = (f"typing.Literal['{name}']", "[]", repr(name))
        return {"fields": {"operation": literal, "world_id": world, **fields}, "validators": ["_strings_are_unicode"],
                "serializers": [], "config": config}  # fmt: skip

    name = ("<class 'str'>", "[_PydanticGeneralMetadata(pattern='^[A-Za-z_][A-Za-z0-9_]{0,127}$')]", "PydanticUndefined")
    fingerprint = ("<class 'str'>", "[_PydanticGeneralMetadata(pattern='^[0-9a-f]{64}$')]", "PydanticUndefined")
    data = ("dict[str, typing.Any]", "[]", "PydanticUndefined")
    return {
        "Spawn": op("spawn", components=values),
        "SpawnReserved": op("spawn_reserved", entity_id=entity, components=values),
        "Despawn": op("despawn", entity_id=entity),
        "Update": op("update", entity_id=entity, components=values),
        "AddComponents": op("add_components", entity_id=entity, components=values),
        "RemoveComponents": op("remove_components", entity_id=entity, component_types=refs),
        "ComponentValue": {"fields": {"name": name, "fingerprint": fingerprint, "data": data},
                           "validators": ["_canonical_data"], "serializers": [], "config": config},  # fmt: skip
        "ComponentTypeRef": {"fields": {"name": name, "fingerprint": fingerprint}, "validators": [], "serializers": [],
                             "config": config},  # fmt: skip
    }


PINNED = _pinned()


@pytest.mark.parametrize("model", PORTABLE_MUTATIONS, ids=lambda m: m.__name__)
def test_every_portable_mutation_has_the_short_cut(model: type[Any]) -> None:
    durable = REGISTRY.named(model.model_fields["operation"].default).require_durable()
    assert durable.encode is not None


def test_a_batch_built_together_refuses_as_item_by_item() -> None:
    """A batch's live values are validated per class at once; a refusal is then found again item
    by item, so it is the first in batch order, with its own path."""
    from archetype.commands.options import DurableOptions
    from archetype.commands.scheduler import CommandScheduler, DeferredItem

    scheduler = CommandScheduler(REGISTRY, authority=None)  # type: ignore[arg-type]
    options = DurableOptions(tick=0)

    def item(*values: Any, command_id: str = "c") -> DeferredItem:
        return DeferredItem(op=Spawn(world_id="w", components=list(values)), options=options, command_id=command_id)

    huge = ComponentValue(name="Counter", fingerprint=Counter.component_fingerprint(), data={"n": 1e18})
    misfit = ComponentValue(name="Health", fingerprint=Health.component_fingerprint(), data={"hp": "lots"})
    batches = [
        [item(Point(x=1.0)), item(Point(x=2.0), huge), item(misfit)],
        [item(Point(x=1.0)), item(misfit), item(huge)],
        [item(Point(x=1.0)), item(Point(x=2.0), command_id="not an id"), item(huge)],
        [item(Point(x=1.0), command_id="a"), item(Health(hp=2), Point(x=3.0), command_id="b")],
    ]
    for batch in batches:
        assert outcome(lambda items: list(zip(*scheduler._admission_rows(items, None, "local"), strict=True)), batch) == outcome(
            lambda items: [scheduler._admission_row(i, None, "local") for i in items], batch
        )


class _Options(DurableOptions):
    """A DurableOptions subclass: its rows are made one by one."""


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.floats(allow_nan=False, allow_infinity=False),
            st.sampled_from(["plain", "subclass"]),
            st.integers(0, 2**40),
            st.integers(-5, 5),
            st.integers(1, 9),
            st.sampled_from(["id", "none", "bad", "long"]),
        ),
        min_size=2,
        max_size=6,
    ),
    st.sampled_from([None, "alice"]),
)
def test_a_batchs_rows_made_by_column_are_the_rows_made_one_by_one(specs: list[Any], principal: str | None) -> None:
    """Every field of every row (key order included), or the refusal, is `_admission_row`'s of
    each item: options of each kind and value, command ids given, fresh, refused, too long."""
    ids = {"id": lambda n: f"c-{n}", "none": lambda n: None, "bad": lambda n: f"c {n}", "long": lambda n: "c" * 129}
    items = [
        DeferredItem(
            op=Spawn(world_id="w", components=[Point(x=x)]),
            options=(DurableOptions if kind == "plain" else _Options)(tick=tick, priority=priority, max_attempts=attempts),
            command_id=ids[key](n),
        )
        for n, (x, kind, tick, priority, attempts, key) in enumerate(specs)
    ]  # fmt: skip
    actor = None if principal is None else ActorCtx(principal=principal, roles=frozenset({Role.player}))
    scheduler = CommandScheduler(REGISTRY, authority=None)  # type: ignore[arg-type]

    def fresh_ids_masked(pairs: list[Any]) -> list[Any]:
        masked = []
        for (world_id, row), item in zip(pairs, items, strict=True):
            if item.command_id is None:
                assert re.fullmatch(r"[0-9a-f]{32}", row["command_id"])
                row = {**row, "command_id": "(fresh)"}
            masked.append((world_id, list(row.items())))
        return masked

    by_column = outcome(lambda batch: fresh_ids_masked(list(zip(*scheduler._admission_rows(batch, actor, "local"), strict=True))), items)
    one_by_one = outcome(lambda batch: fresh_ids_masked([scheduler._admission_row(i, actor, "local") for i in batch]), items)
    assert by_column == one_by_one
