"""Component data is canonical on the wire and as the live value its class builds (docs/components.md)."""

import math
from typing import Literal

import pytest
from pydantic import ConfigDict, ValidationError

from archetype.canonical import NonCanonicalValueError
from archetype.world import Component, ComponentValue, CreateWorld, Despawn, Spawn, Update
from archetype.world.components import MAX_DATA_DEPTH, component_data, live_component
from archetype.world.operations import Operation, operation_components
from tests.component_modules.alpha import Health, Position
from tests.component_modules.coercing import Counter, Label, Loose, Ratio, Tree


def wire(component_type, data) -> dict:
    return {"name": component_type.__name__, "fingerprint": component_type.component_fingerprint(), "data": data}


def nested(depth: int):
    """`depth` levels of lists around 1."""
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


NON_CANONICAL_DATA = [
    ({"x": math.nan, "y": 0}, "$.x", "NaN"),
    ({"x": math.inf, "y": 0}, "$.x", "Infinity"),
    ({"x": -math.inf, "y": 0}, "$.x", "-Infinity"),
    ({"x": float("1e400"), "y": 0}, "$.x", "Infinity"),
    ({"x": [1, {"deep": math.nan}], "y": 0}, '$.x[1].deep', "NaN"),
    ({"x": "\udfff", "y": 0}, "$.x", "lone surrogate"),
    ({"x": 1, "\ud800": 0}, '$["\\ud800"]', "lone surrogate"),
    ({"x": 2**53, "y": 0}, "$.x", "outside"),
    ({"x": -(2**53), "y": 0}, "$.x", "outside"),
    ({"x": {1, 2}, "y": 0}, "$.x", "not JSON data"),
    ({"x": b"raw", "y": 0}, "$.x", "not JSON data"),
    ({"x": nested(MAX_DATA_DEPTH), "y": 0}, "$.x", "nested deeper than 32"),
    ({"x": nested(500), "y": 0}, "$.x", "nested deeper than 32"),
    ({"x": nested(100_000), "y": 0}, "$.x", "nested deeper than 32"),
]


@pytest.mark.parametrize("data,path,reason", NON_CANONICAL_DATA)
def test_a_wire_value_with_non_canonical_data_is_refused_with_its_type_and_path(data, path, reason):
    with pytest.raises(ValidationError) as refused:
        ComponentValue.model_validate(wire(Position, data))
    (error,) = refused.value.errors()
    assert error["type"] == "non_canonical_value" and error["loc"] == ("data",)
    assert error["ctx"]["path"].startswith(path) and reason in error["ctx"]["reason"]


def test_data_at_the_depth_limit_is_canonical():
    value = ComponentValue.model_validate(wire(Loose, {"value": nested(MAX_DATA_DEPTH - 1)}))
    assert live_component(value).value == nested(MAX_DATA_DEPTH - 1)


def test_component_floats_are_finite():
    for bad in (math.nan, math.inf, -math.inf, float("1e400"), "NaN", "Infinity", "-inf"):
        with pytest.raises(ValidationError, match="finite"):
            Position(x=bad, y=0)


def test_a_non_finite_float_that_slipped_into_a_component_is_refused_never_written_as_null():
    for sneaked in (Position.model_construct(x=math.nan, y=0.0), Position(x=1, y=2).model_copy(update={"y": -math.inf}),
                    Loose(value=[math.nan]), Loose(value={"k": math.inf})):  # fmt: skip
        with pytest.raises(NonCanonicalValueError, match="finite"):
            ComponentValue.from_component(sneaked)
        with pytest.raises(NonCanonicalValueError):
            component_data(sneaked)
        with pytest.raises(ValidationError, match="non_canonical_value"):
            Spawn(world_id="w", components=[sneaked])  # the operation model says which value, with its type


def test_nan_null_and_infinity_are_never_the_same_value():
    assert ComponentValue.from_component(Loose(value=None)).data == {"value": None}
    for bad in (math.nan, -math.inf):
        with pytest.raises(NonCanonicalValueError):
            ComponentValue.from_component(Loose(value=bad))


def test_a_component_cannot_opt_into_writing_non_finite_floats_as_null():
    with pytest.raises(TypeError, match="ser_json_inf_nan"):

        class Lossy(Component):
            model_config = ConfigDict(ser_json_inf_nan="null")
            x: float


@pytest.mark.parametrize(
    "component_type,data,reason",
    [
        (Counter, {"n": 1e18}, "outside"),  # canonical on the wire (a float), a huge integer live
        (Counter, {"n": float(2**53)}, "outside"),
        (Ratio, {"inverse": 0.0}, "Infinity"),  # a validator made an infinity
        (Label, {"text": "mangle"}, "lone surrogate"),  # a validator made a lone surrogate
        (Tree, {"depth": MAX_DATA_DEPTH + 5}, "nested deeper than 32"),  # a validator nested it
    ],
)
def test_the_live_value_is_checked_not_only_the_wire_data(component_type, data, reason):
    value = ComponentValue.model_validate(wire(component_type, data))  # the wire data itself is fine
    with pytest.raises(NonCanonicalValueError, match=reason):
        live_component(value)
    op = Spawn(world_id="w", components=[value])
    with pytest.raises(NonCanonicalValueError, match=reason):
        operation_components(op)  # materialization: a ValueError, so that command alone is rejected


def test_live_values_that_are_canonical_pass():
    values = [ComponentValue.model_validate(wire(t, d)) for t, d in
              [(Counter, {"n": 3.0}), (Ratio, {"inverse": 4}), (Label, {"text": "fine"}), (Tree, {"depth": 3})]]  # fmt: skip
    assert [type(c) for c in operation_components(Spawn(world_id="w", components=values))] == [Counter, Ratio, Label, Tree]
    assert operation_components(Spawn(world_id="w", components=values))[0].n == 3


def test_operation_strings_must_be_valid_unicode():
    with pytest.raises(ValidationError):
        CreateWorld(name="arena\udfff")
    assert CreateWorld(name="ar\u00e8ne \U0001f3df").name == "ar\u00e8ne \U0001f3df"

    class Note(Operation):  # a plain `str` field: pydantic alone would keep the surrogate
        operation: Literal["note"] = "note"
        text: str

    with pytest.raises(ValidationError, match="non_canonical_value") as refused:
        Note(text="a\udfff")
    assert refused.value.errors()[0]["ctx"]["path"] == "$.text"
    assert Note(text="\u00e9").text == "\u00e9"


def test_entity_ids_reach_the_safe_bound_inclusive():
    assert Despawn(world_id="w", entity_id=2**53 - 1).entity_id == 2**53 - 1
    for bad in (0, 2**53, 2**60):
        with pytest.raises(ValidationError):
            Update(world_id="w", entity_id=bad, components=[Health(hp=1)])
