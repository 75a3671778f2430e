"""`components.exactly_typed`, the one test both of admission's "an exact-typed input skips
pydantic" short cuts make (`validates_as_given` of a component's data, `scheduler.identity_of` of an
authority's answer), held to pydantic's verdicts: whatever it accepts, a model of those fields
validates, lax and strict, keeping every value as it is (same value, same type)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ConfigDict, create_model

from archetype.world.components import exactly_typed

TYPES = (str, int, float, bool)
NAMES = ("a", "b", "c")


class Text(str):
    pass


class Big(int):
    pass


values = st.one_of(
    st.text(max_size=3), st.integers(), st.floats(), st.booleans(), st.none(),
    st.sampled_from([Text("t"), Big(2), "\udfff", b"x", [1], {"a": 1}, 1.0, 1, "1", True]),
)  # fmt: skip
field_types = st.dictionaries(st.sampled_from(NAMES), st.sampled_from(TYPES), min_size=1)


EXACT = {str: st.text(max_size=3), int: st.integers(), float: st.floats(), bool: st.booleans()}


@st.composite
def inputs(draw: st.DrawFn) -> tuple[dict[str, type], Any]:
    fields = draw(field_types)
    kind = draw(st.sampled_from(["fitting", "fitting", "any", "other"]))
    if kind == "fitting":  # each field's own type, or (now and then) anything
        return fields, {name: draw(st.one_of(EXACT[t], EXACT[t], values)) for name, t in fields.items()}
    if kind == "any":
        return fields, draw(st.dictionaries(st.sampled_from(NAMES), values))
    return fields, draw(st.sampled_from([None, [], "a", [("a", 1)]]))


@settings(max_examples=1500, deadline=None)
@given(inputs())
def test_what_it_accepts_validation_keeps_as_it_is(given_input: tuple[dict[str, type], Any]) -> None:
    fields, data = given_input
    if not exactly_typed(data, fields):
        return
    for config in (ConfigDict(extra="forbid"), ConfigDict(extra="forbid", strict=True)):
        model = create_model("Fields", __config__=config, **{name: (kind, ...) for name, kind in fields.items()})  # type: ignore[call-overload]
        made = model.model_validate(data).__dict__
        assert made == data or any(value != value for value in data.values())  # (NaN is itself, not equal)
        assert {name: type(value) for name, value in made.items()} == {name: type(value) for name, value in data.items()}


def test_it_accepts_exactly_the_fields_types() -> None:
    """Else the property above would hold trivially."""
    fields = {"a": str, "b": int, "c": float}
    assert exactly_typed({"a": "x", "b": 1, "c": 1.5}, fields)
    assert exactly_typed({"c": 1.5, "a": "x", "b": 1}, fields)  # key order is not the fields'
    for refused in ({"a": "x", "b": 1}, {"a": "x", "b": 1, "c": 1.5, "d": 1}, {"a": Text("x"), "b": 1, "c": 1.5},
                    {"a": "x", "b": True, "c": 1.5}, {"a": "x", "b": 1, "c": 1}, {"a": "x", "b": Big(1), "c": 1.5},
                    [("a", "x")], None):  # fmt: skip
        assert not exactly_typed(refused, fields)
