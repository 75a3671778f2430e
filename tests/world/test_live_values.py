"""Admission's check of a component value without building it (`components.validates_as_given`,
used by `OperationSpec._check_live` and `check_live_together`) against the check it skips, pydantic's
`model_validate` and the canonical check: the same acceptance and the same refusal (class, code,
message, path) for generated data, hostile values included, on classes it may and may not claim;
and the text it writes of a value it takes (`text_as_given`, the payload encoder's) against the
canonical encoder's."""

from __future__ import annotations

import math
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import AliasChoices, ConfigDict, Field, field_validator

from archetype.canonical import canonical_json
from archetype.commands import registry
from archetype.commands.families import default_registry
from archetype.world.components import Component, ComponentValue, component_data, text_as_given, validates_as_given
from tests.component_modules.alpha import Health
from tests.component_modules.floats import Point, Wild


class Strict(Component):
    model_config = ConfigDict(strict=True)
    x: float


class Loose(Component):
    model_config = ConfigDict(extra="allow")
    x: float


class Aliased(Component):
    x: float = Field(alias="y")


class Chosen(Component):
    x: float = Field(validation_alias=AliasChoices("y", "x"))


class Generated(Component):
    model_config = ConfigDict(alias_generator=str.upper)
    x: float


class Constrained(Component):
    x: float = Field(gt=0)


class Checked(Component):
    x: float

    @field_validator("x")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value < 0:
            raise ValueError("negative")
        return value


class Accented(Component):
    """Fields out of sorted order, one of them not ASCII: written sorted, and escaped."""

    zeta: float
    é: float
    alpha: float = 2.5


CLAIMED = [Point, Strict, Loose, Accented]  # the classes it may vouch for
CLASSES = [*CLAIMED, Wild, Aliased, Chosen, Generated, Constrained, Checked, Health]


class Real(float):
    pass


values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**1100, True, False, None, "1.5", "nan", "x", b"1", Real(1.5), Real("nan"), [1.0], {"x": 1.0}]),
)
data = st.one_of(
    st.dictionaries(st.sampled_from(["x", "y", "X", "z", "hp"]), values, max_size=3),
    st.sampled_from([None, [], "x", 1.0, [("x", 1.0)]]),
)


def outcome(check: Any) -> tuple[Any, ...]:
    try:
        check()
        return ("ok",)
    except Exception as exc:
        return ("refused", type(exc), str(exc), getattr(exc, "code", None), getattr(exc, "path", None))


SPEC = default_registry().named("spawn")


def _never(cls: Any, data: Any) -> bool:
    return False


@settings(max_examples=1500, deadline=None)
@given(st.sampled_from(CLASSES), data)
def test_a_value_checked_as_given_gets_pydantics_verdict(cls: type[Component], given_data: Any) -> None:
    value = [(0, cls.__name__, cls, given_data)]
    fast = outcome(lambda: SPEC._check_live(value))
    fast_together = outcome(lambda: registry.check_live_together(value))[:2]
    with mock.patch.object(registry, "validates_as_given", _never):
        assert fast == outcome(lambda: SPEC._check_live(value))
        assert fast_together == outcome(lambda: registry.check_live_together(value))[:2]
    if validates_as_given(cls, given_data):
        assert component_data(cls.model_validate(given_data)) == given_data


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(CLASSES), data), min_size=1, max_size=4))
def test_a_batch_checked_as_given_gets_pydantics_verdict(items: list[tuple[type[Component], Any]]) -> None:
    batch = [(i, cls.__name__, cls, given_data) for i, (cls, given_data) in enumerate(items)]
    fast = outcome(lambda: registry.check_live_together(batch))[:2]
    with mock.patch.object(registry, "validates_as_given", _never):
        assert fast == outcome(lambda: registry.check_live_together(batch))[:2]


@pytest.mark.parametrize("cls", CLASSES)
def test_it_vouches_only_for_plain_float_classes_given_exactly_their_fields(cls: type[Component]) -> None:
    """Else the properties above would hold trivially (or it would vouch for a class whose
    validation runs code, renames a field or constrains a value)."""
    exact = dict.fromkeys(cls.model_fields, 1.5)
    assert validates_as_given(cls, exact) is (cls in CLAIMED)
    assert not validates_as_given(cls, {**exact, "z": 1.0})
    assert not validates_as_given(cls, dict.fromkeys(cls.model_fields, 1))
    assert not validates_as_given(cls, dict.fromkeys(cls.model_fields, math.inf))
    assert not validates_as_given(cls, {name: Real(1.5) for name in cls.model_fields})


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(CLAIMED), st.data())
def test_the_text_of_a_value_taken_as_given_is_the_canonical_encoders(cls: type[Component], draw: st.DataObject) -> None:
    names = draw.draw(st.permutations(list(cls.model_fields)))  # any key order
    given_data = {name: draw.draw(st.floats(allow_nan=False, allow_infinity=False)) for name in names}
    value = ComponentValue.from_component(cls.model_validate(given_data))
    assert text_as_given(cls, given_data) == canonical_json(value.model_dump(mode="json"))
