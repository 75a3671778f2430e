"""The admission validator (archetype.world.component_schema): the JSON Schema subset pydantic
writes for components, checked without the classes. Its promise, tested against pydantic itself:
data it accepts builds the live class (so an edge never admits what a runner will reject, formats
aside), and the data of every live value passes it."""

from __future__ import annotations

import enum
import itertools
from typing import Annotated, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from archetype.world import Component
from archetype.world.component_schema import (
    _CHECKS,
    ANNOTATIONS,
    KEYWORDS,
    REF_KEYS,
    VALUE_KEYS,
    SchemaMismatchError,
    UnsupportedSchemaError,
    check_record,
    component_occurrences,
    data_validator,
    json_equal,
    occurrences,
    validate_data,
)
from archetype.world.components import canonical_prefixed_schema, component_data


class Color(enum.Enum):
    red = "red"
    blue = "blue"


class Part(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    label: str = Field(min_length=1, max_length=5)
    mass: float = Field(gt=0)


class Node(BaseModel):
    model_config = ConfigDict(frozen=True)  # open: extra keys allowed (ignored by pydantic)

    value: int
    children: list[Node] = []


class Machine(Component):
    code: Annotated[str, Field(pattern=r"^[A-Z]{2}\d$")]
    level: int = Field(default=1, ge=1, le=9)
    step: float = Field(default=0.5, multiple_of=0.5)
    parts: list[Part] = Field(default_factory=list, max_length=3)
    spare: Part | None = None
    color: Color = Color.red
    mode: Literal["on", "off"] = "off"
    pair: tuple[int, str] = (0, "")
    weights: dict[str, float] = Field(default_factory=dict)
    tags: set[int] = Field(default_factory=set)
    tree: Node | None = None
    anything: object = None
    flag: bool = False


SCHEMA = canonical_prefixed_schema(Machine)


def refused(data: dict) -> str:
    with pytest.raises(SchemaMismatchError) as caught:
        validate_data(SCHEMA, data)
    return str(caught.value)


def test_every_keyword_is_either_checked_or_an_annotation():
    assert KEYWORDS - ANNOTATIONS == set(_CHECKS)


def test_a_real_component_schema_is_recordable():
    check_record("Machine", Machine.component_fingerprint(), SCHEMA)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"code": 12}, "$.code: expected string, got integer"),
        ({"code": "ab1"}, "$.code: does not match"),
        ({}, "$: missing required field 'code'"),
        ({"code": "AB1", "nope": 1}, "$.nope: Machine has no field 'nope'"),
        ({"code": "AB1", "level": 0}, "$.level: 0 breaks minimum 1"),
        ({"code": "AB1", "level": 2.5}, "$.level: expected integer, got number"),
        ({"code": "AB1", "level": True}, "$.level: expected integer, got boolean"),
        ({"code": "AB1", "step": 0.3}, "$.step: 0.3 breaks multipleOf 0.5"),
        ({"code": "AB1", "parts": [{"label": "a", "mass": 1}] * 4}, "$.parts: has 4 items, at most 3 allowed"),
        ({"code": "AB1", "parts": [{"label": "", "mass": 1}]}, "$.parts[0].label: has 0 characters, at least 1"),
        ({"code": "AB1", "parts": [{"label": "a", "mass": 1, "x": 0}]}, "$.parts[0].x: unexpected field 'x'"),
        ({"code": "AB1", "spare": {"label": "a", "mass": 0}}, "$.spare.mass: 0 breaks exclusiveMinimum 0"),
        ({"code": "AB1", "color": "green"}, "$.color: is not one of"),
        ({"code": "AB1", "mode": "maybe"}, "$.mode: is not one of ['on', 'off']"),
        ({"code": "AB1", "pair": [1, 2]}, "$.pair[1]: expected string, got integer"),
        ({"code": "AB1", "pair": [1, "a", 3]}, "$.pair: has 3 items, at most 2 allowed"),
        ({"code": "AB1", "weights": {"a": "heavy"}}, "$.weights.a: expected number, got string"),
        ({"code": "AB1", "tags": [1, 1]}, "$.tags[1]: repeats an earlier item"),
        (
            {"code": "AB1", "tree": {"value": 1, "children": [{"value": "x"}]}},
            "$.tree.children[0].value: expected integer",
        ),
        ({"code": "AB1", "flag": 1}, "$.flag: expected boolean, got integer"),
    ],
)
def test_data_that_does_not_fit_is_refused_with_its_path(data, message):
    assert refused(data).startswith(message)


def test_json_numbers_not_python_ones():
    validate_data(SCHEMA, {"code": "AB1", "level": 3.0})  # an integral float is an integer in JSON
    assert json_equal(1, 1.0) and not json_equal(True, 1) and not json_equal([0], [False])


@pytest.mark.parametrize(
    "node",
    [{"not": {}}, {"if": {}}, {"patternProperties": {}}, {"$ref": "#/definitions/X"}, {"$ref": "#/$defs/Missing"},
     {"type": "decimal"}, {"anyOf": []}, {"minItems": -1}, {"pattern": "("}],
)  # fmt: skip
def test_schemas_outside_the_subset_are_refused(node):
    from archetype.canonical import digest

    schema = {"component": "Odd", "properties": {"odd__a": node}, "required": [], "defs": {}}
    with pytest.raises(UnsupportedSchemaError):
        check_record("Odd", digest(schema), schema)


def test_a_reference_loop_that_consumes_no_data_is_refused_not_recursed():
    schema = {"component": "Loop", "properties": {"loop__a": {"$ref": "#/$defs/A"}}, "required": [],
              "defs": {"A": {"$ref": "#/$defs/A"}}}  # fmt: skip
    with pytest.raises(SchemaMismatchError, match="refers to itself"):
        validate_data(schema, {"a": 1})


def test_component_values_and_references_are_found_in_document_order():
    payload = {"operation": "x", "components": [{"name": "A", "fingerprint": "a", "data": {"name": "B", "fingerprint": "b"}}],
               "component_types": [{"name": "C", "fingerprint": "c"}]}  # fmt: skip
    found = component_occurrences(payload)
    assert [(path, name) for path, name, _, _ in found] == [("$.components[0]", "A"), ("$.component_types[0]", "C")]
    assert component_occurrences(5) == component_occurrences([1, "a", [None]]) == []  # scalars name nothing


def _found_by_key_sets(value, where="$"):
    """`occurrences` by its definition: a dict whose key set is exactly VALUE_KEYS or REF_KEYS, with
    string name and fingerprint, is an occurrence (not searched further); any other container's
    items are searched in document order."""
    if isinstance(value, dict):
        keys = value.keys()
        if (keys == VALUE_KEYS or keys == REF_KEYS) and isinstance(value["name"], str) and isinstance(value["fingerprint"], str):
            return [(where, value["name"], value["fingerprint"], value.get("data"))]
        return [found for key, item in value.items() for found in _found_by_key_sets(item, (where, key))]
    if isinstance(value, list):
        return [found for index, item in enumerate(value) for found in _found_by_key_sets(item, (where, index))]
    return []


# objects near a component's shape: every subset of its keys and one more, names of other types
_NEAR_KEYS = st.sampled_from(["name", "fingerprint", "data", "extra"])
_NEAR_VALUES = st.none() | st.integers(0, 3) | st.sampled_from(["A", "b" * 8, ""])


_NEAR = st.dictionaries(_NEAR_KEYS, _NEAR_VALUES, min_size=2)  # the shapes around a component's own


@given(st.recursive(_NEAR_VALUES | _NEAR, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_NEAR_KEYS, inner, max_size=4),
                    max_leaves=30))  # fmt: skip
@settings(max_examples=600, deadline=None)
def test_occurrences_are_the_objects_of_exactly_a_components_keys(document):
    assert occurrences(document) == _found_by_key_sets(document)


_COMPONENT_KEYS = ["name", "fingerprint", "data", "extra"]


@pytest.mark.parametrize("keys", [keys for size in range(5) for keys in itertools.combinations(_COMPONENT_KEYS, size)])
@pytest.mark.parametrize("name", ["A", 1, None])
def test_every_key_set_around_a_components_is_told_apart(keys, name):
    node = {key: name if key == "name" else "x" for key in keys}
    document = {"components": [node, {"inner": node}]}
    assert occurrences(document) == _found_by_key_sets(document)


KEYS = st.sampled_from(["label", "mass", "value", "children", "a"])
SCALARS = st.none() | st.booleans() | st.integers(-20, 20) | st.floats(-20, 20, allow_nan=False)
json_values = st.recursive(
    SCALARS | st.sampled_from(["AB1", "", "red", "on", "a"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=10,
)
field_data = st.fixed_dictionaries(
    {"code": st.sampled_from(["AB1", "ab", "ZZ9"]) | json_values},
    optional={name: json_values for name in Machine.model_fields if name != "code"},
)


@given(data=field_data)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_what_the_validator_admits_the_class_builds(data):
    try:
        validate_data(SCHEMA, data)
    except SchemaMismatchError:
        return
    Machine.model_validate(data)  # never raises: the edge admits nothing a runner will reject


@given(machine=st.builds(Machine, code=st.sampled_from(["AB1", "QQ7"]), level=st.integers(1, 9)))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_data_of_every_live_value_fits(machine):
    try:
        data = component_data(machine)
    except ValueError:  # hypothesis may build values without a canonical form; those never reach admission
        return
    validate_data(SCHEMA, data)


def test_pydantic_and_the_validator_agree_on_the_listed_refusals():
    """The refusals above are refusals of the class too (lax pydantic coerces `1` to a bool only)."""
    for data in ({"code": 12}, {"code": "AB1", "level": 2.5}, {"code": "AB1", "parts": [{"label": "", "mass": 1}]}):
        with pytest.raises(ValidationError):
            Machine.model_validate(data)


def _verdict(check, data):
    try:
        check(data)
    except SchemaMismatchError as exc:
        return exc.path, exc.reason
    return None


COMPILED = data_validator(SCHEMA)


@given(data=field_data)
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_compiled_validator_answers_what_validate_data_answers(data):
    """Admission's compiled check (data_validator) admits exactly what validate_data admits and
    refuses with its very path and message."""
    assert _verdict(COMPILED, data) == _verdict(lambda d: validate_data(SCHEMA, d), data)


LOOPING = {"component": "Loop", "properties": {"loop__a": {"$ref": "#/$defs/A"}, "loop__t": {"$ref": "#/$defs/T"}},
           "required": [], "defs": {"A": {"$ref": "#/$defs/A"},
                                    "T": {"type": "object", "properties": {"next": {"$ref": "#/$defs/T"}},
                                          "required": ["v"]}}}  # fmt: skip
# 70 schemas entered at one position, no loop: past validate_data's chain limit (64)
DEEP = {"component": "Deep", "properties": {"deep__a": {"$ref": "#/$defs/D0"}}, "required": [],
        "defs": {**{f"D{i}": {"$ref": f"#/$defs/D{i + 1}"} for i in range(70)}, "D70": {"type": "integer"}}}
ONE_OF = {"component": "Pick", "properties": {"pick__a": {"oneOf": [{"type": "integer"}, {"type": "number"}]},
                                              "pick__b": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
          "required": ["pick__a"], "defs": {}}  # fmt: skip


@pytest.mark.parametrize(("schema", "data"), [
    (LOOPING, {"a": 1}), (LOOPING, {"t": {"v": 1, "next": {"v": 2, "next": {"x": 0}}}}), (LOOPING, {"t": {"v": 1}}),
    (DEEP, {"a": 1}), (ONE_OF, {"a": 1}), (ONE_OF, {"a": 1.5}), (ONE_OF, {"a": 1.5, "b": None}), (ONE_OF, {"a": "x"}),
    (ONE_OF, {"b": 2}), (SCHEMA, {"code": "AB1", "parts": [{"label": "x", "mass": 1}] * 4}), (SCHEMA, [1]),
])  # fmt: skip
def test_the_compiled_validator_agrees_on_loops_deep_chains_and_one_of(schema, data):
    assert _verdict(data_validator(schema), data) == _verdict(lambda d: validate_data(schema, d), data)
