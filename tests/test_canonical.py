import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from archetype.canonical import MAX_SAFE_INTEGER, NonCanonicalValueError, canonical_json, digest

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5), max_leaves=30
)


@given(json_values)
def test_canonical_json_round_trips_byte_for_byte(value):
    text = canonical_json(value)
    assert canonical_json(json.loads(text)) == text


@given(json_values)
def test_canonical_json_is_ascii_compact_and_sorted(value):
    text = canonical_json(value)
    assert text.isascii()
    if isinstance(value, dict):
        assert list(json.loads(text)) == sorted(value)


@given(st.dictionaries(st.text(), json_scalars, max_size=8))
def test_digest_does_not_depend_on_key_order(mapping):
    reordered = dict(reversed(list(mapping.items())))
    assert digest(mapping) == digest(reordered)


@given(json_values, json_values)
def test_digest_distinguishes_different_values(a, b):
    if canonical_json(a) != canonical_json(b):
        assert digest(a) != digest(b)


def test_digest_is_stable_across_releases():
    # A stored digest must never change meaning: pin one.
    assert digest({"b": [1, 2.5, None], "a": "\u00e9"}) == digest(json.loads('{"a":"\\u00e9","b":[1,2.5,null]}'))
    assert canonical_json({"b": [1, 2.5, None], "a": "\u00e9"}) == '{"a":"\\u00e9","b":[1,2.5,null]}'


@pytest.mark.parametrize(
    "bad",
    [
        math.nan,
        math.inf,
        -math.inf,
        MAX_SAFE_INTEGER + 1,
        -MAX_SAFE_INTEGER - 1,
        {1: "non-string key"},
        {"f": lambda: None},
        object(),
        {1, 2},
        b"bytes",
    ],
)
def test_non_canonical_values_are_refused(bad):
    with pytest.raises(NonCanonicalValueError):
        canonical_json(bad)


def test_refusal_names_the_path():
    with pytest.raises(NonCanonicalValueError, match=r"\$\.outer\[1\]"):
        canonical_json({"outer": [1, math.nan]})
