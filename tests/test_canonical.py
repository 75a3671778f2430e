import hashlib
import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from archetype.canonical import (
    MAX_DEPTH,
    MAX_SAFE_INTEGER,
    NonCanonicalValueError,
    canonical_json,
    check_canonical,
    digest,
    loads,
    nesting_exceeds,
    parse_json,
    sha256_hex,
)

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


# -- the bounds: JavaScript's safe integers, inclusive --
def test_the_integer_bound_is_javascripts_safe_range_inclusive():
    assert MAX_SAFE_INTEGER == 2**53 - 1 == 9007199254740991
    assert canonical_json([2**53 - 1, -(2**53 - 1)]) == "[9007199254740991,-9007199254740991]"
    for bad in (2**53, -(2**53), 10**5000):  # a huge one must not fail while being described
        with pytest.raises(NonCanonicalValueError, match=r"outside \+/-\(2\*\*53-1\)"):
            canonical_json({"n": bad})


# -- valid Unicode only --
@pytest.mark.parametrize("text", ["\udfff", "\ud800", "a\udc00b", "\ud83d"])  # lone surrogates
def test_lone_surrogates_are_refused_in_values_and_keys(text):
    with pytest.raises(NonCanonicalValueError, match="lone surrogate"):
        canonical_json({"s": text})
    with pytest.raises(NonCanonicalValueError, match="lone surrogate") as refused:
        canonical_json({"outer": {text: 1}})
    assert str(refused.value).encode("utf-8")  # the message names the key escaped: it is valid Unicode itself


def test_astral_and_non_ascii_text_is_canonical():
    value = {"\u00e9\U0001f600": ["\U0010ffff", "\u4e2d"]}
    text = canonical_json(value)
    assert text.isascii() and json.loads(text) == value and parse_json(text) == value


# -- nesting --
def nested(depth: int, leaf=1):
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def test_nesting_is_bounded_without_recursion_errors():
    assert MAX_DEPTH == 64
    assert canonical_json(nested(64)) == "[" * 64 + "1" + "]" * 64
    for depth in (65, 500, 100_000):
        with pytest.raises(NonCanonicalValueError, match="nested deeper than 64"):
            canonical_json(nested(depth))
    cycle: list = []
    cycle.append(cycle)
    with pytest.raises(NonCanonicalValueError, match="nested deeper"):
        canonical_json(cycle)
    with pytest.raises(NonCanonicalValueError, match="nested deeper than 3"):
        check_canonical({"a": {"b": {"c": {}}}}, max_depth=3)


# -- strict parsing --
@pytest.mark.parametrize(
    "text,reason",
    [
        ('{"x": NaN}', "NaN is not a finite"),
        ('{"x": Infinity}', "Infinity is not a finite"),
        ('{"x": -Infinity}', "-Infinity is not a finite"),
        ('{"x": 1e400}', "Infinity is not a finite"),
        ('{"x": -1e400}', "-Infinity is not a finite"),
        ('{"x": "\\udfff"}', "lone surrogate"),
        ('{"\\ud800": 1}', "lone surrogate"),
        ('{"x": 1, "x": 2}', "appears more than once"),
        ('{"x": ' + "9" * 5000 + "}", "too many digits"),
        ('{"x": 9007199254740992}', "outside"),
        ("[" * 65 + "]" * 65, "nested deeper than 64"),
        ("[" * 200_000 + "]" * 200_000, "nested deeper than 64"),
        ("[" * 200_000, "nested deeper than 64"),  # not even JSON, and still no RecursionError
        ("[[]," * 50_000 + "[" * 70 + "]" * 70 + "]" * 50_000, "nested deeper than 64"),
    ],
)
def test_parse_json_refuses_what_pythons_json_would_accept(text, reason):
    with pytest.raises(NonCanonicalValueError, match=reason.replace("(", r"\(").replace("+", r"\+")):
        parse_json(text)
    with pytest.raises(NonCanonicalValueError):
        parse_json(text.encode("utf-8"))


def test_parse_json_refuses_raw_surrogate_bytes_and_reports_syntax_errors_as_such():
    with pytest.raises(NonCanonicalValueError, match="lone surrogate"):
        parse_json(b'{"x": "\xed\xbf\xbf"}')  # an encoded surrogate, which Python's json lets through
    for text in ("{", '{"a": 1,}', "", "[1 2]"):
        with pytest.raises(json.JSONDecodeError):
            parse_json(text)


def test_parse_json_paths_and_options():
    with pytest.raises(NonCanonicalValueError) as refused:
        parse_json('{"commands": [{"components": [{"data": {"x": NaN}}]}]}')
    assert refused.value.path == "$.commands[0].components[0].data.x"
    assert parse_json('{"tick": 9007199254740992}', integers=False) == {"tick": 2**53}
    assert parse_json('{"s": "[[[[", "t": "\\"]]]"}', max_depth=1) == {"s": "[[[[", "t": '"]]]'}  # brackets in strings
    assert parse_json("[" * 64 + "]" * 64) == nested(63, leaf=[])


# -- properties: anything either round-trips canonically or is refused with the typed error --
json_ish_floats = st.floats()  # NaN and both infinities included
any_text = st.text(st.characters(codec=None, categories=None, exclude_categories=()), max_size=6)  # surrogates too
json_ish_scalars = (
    st.none() | st.booleans() | st.integers() | st.integers(-(2**60), 2**60) | json_ish_floats | any_text | st.text(max_size=6)
)
json_ish = st.recursive(
    json_ish_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=25,
)


def deep(draw_depth: int, leaf):
    return nested(draw_depth, leaf)


anything = json_ish | st.builds(deep, st.integers(0, 120), json_ish_scalars) | st.sampled_from(
    [object(), {1: "x"}, {1, 2}, b"bytes", math.nan, {"k": (1, [math.inf])}]
)


def _depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, (list, tuple)):
        return 1 + max(map(_depth, value), default=0)
    return 0


@given(anything)
def test_any_value_round_trips_canonically_or_is_refused(value):
    try:
        text = canonical_json(value)
    except NonCanonicalValueError as refused:
        assert refused.path.startswith("$") and str(refused).encode("utf-8")
        return
    assert text.isascii() and _depth(value) <= MAX_DEPTH
    assert canonical_json(parse_json(text)) == text
    assert canonical_json(json.loads(text)) == text


@given(anything, st.booleans())
def test_any_json_text_parses_to_a_canonical_value_or_is_refused(value, ascii_only):
    try:
        text = json.dumps(value, allow_nan=True, ensure_ascii=ascii_only)
    except (TypeError, ValueError, RecursionError, UnicodeEncodeError):
        return  # not even Python's json can write it
    for form in (text, text.encode("utf-8", "surrogatepass")):
        try:
            parsed = parse_json(form)
        except NonCanonicalValueError as refused:
            assert str(refused).encode("utf-8")
            continue
        assert canonical_json(json.loads(canonical_json(parsed))) == canonical_json(parsed)


@given(st.builds(deep, st.integers(0, 150), st.just(1)) | json_ish, st.booleans())
def test_the_nesting_scan_agrees_with_the_structure(value, ascii_only):
    try:
        text = json.dumps(value, allow_nan=True, ensure_ascii=ascii_only)
    except (ValueError, UnicodeEncodeError):
        return
    assert nesting_exceeds(text, 64) == (_depth(value) > 64)
    assert nesting_exceeds(text, 3) == (_depth(value) > 3)


@given(st.binary(max_size=64))
def test_arbitrary_bytes_are_parsed_or_refused_never_crash(raw):
    try:
        parse_json(raw)
    except (NonCanonicalValueError, json.JSONDecodeError, UnicodeDecodeError):
        pass


def _outcome(parse: Any, text: str | bytes) -> Any:
    try:
        return parse(text)
    except ValueError as exc:
        return type(exc)


@given(st.dictionaries(st.text(max_size=5), st.integers(-9, 9) | st.text(max_size=5), max_size=3),
       st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"]),
       st.booleans())  # fmt: skip
def test_parse_json_reads_text_as_json_loads_does(value, encoding, ensure_ascii):
    """parse_json keeps a decoder of its own rather than build one per call as json.loads does:
    bytes in any encoding json.loads detects, and a str opening with a byte order mark, read alike."""
    text = json.dumps(value, ensure_ascii=ensure_ascii)
    if any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        return  # lone surrogates: refused by parse_json alone (above)
    for form in (text.encode(encoding), text.encode(encoding).decode("latin-1"), "\ufeff" + text):
        assert _outcome(parse_json, form) == _outcome(json.loads, form)


@given(st.dictionaries(st.text(max_size=5), st.integers(-9, 9), max_size=3) | st.lists(st.integers(-9, 9), max_size=3),
       st.sampled_from(["", " ", "\n\t"]), st.sampled_from(["", " ", "\r\n", "x", "{}", "]"]), st.integers(0, 3),
       st.sampled_from(["utf-8", "utf-16-le", "utf-32-be"]))  # fmt: skip
def test_parse_json_reads_a_value_with_anything_around_it_as_json_loads_does(value, before, after, cut, encoding):
    """parse_json scans the usual text (a value alone) without the decoder's `decode`: whitespace
    around it, extra data or a cut text read as json.loads reads them, its errors' messages too."""
    text = before + json.dumps(value) + after
    raw = text[: len(text) - cut].encode(encoding)

    def outcome(parse: Any) -> Any:
        try:
            return parse(raw)
        except ValueError as exc:
            return type(exc), str(exc)

    assert outcome(parse_json) == outcome(json.loads)


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                    max_leaves=8),
       st.sampled_from(["", " ", "\ufeff"]), st.sampled_from(["", "\n", "x", "]"]), st.integers(0, 2),
       st.sampled_from([None, "utf-8", "utf-16-le"]))  # fmt: skip
def test_loads_answers_what_json_loads_answers(value, before, after, cut, encoding):
    """canonical.loads (a stored payload's parse) scans a value alone without `decode`: any JSON,
    NaN and infinities included, with anything around it or cut short, as text or bytes, and what
    is not text at all, answered as json.loads answers it, its errors' messages too."""
    text = before + json.dumps(value) + after
    text = text[: len(text) - cut]

    def outcome(parse: Any, argument: Any) -> Any:
        try:
            return "value", json.dumps(parse(argument))
        except (ValueError, TypeError) as exc:
            return type(exc), str(exc)

    for argument in (text if encoding is None else text.encode(encoding, "surrogatepass"), None, 5, [text]):
        assert outcome(loads, argument) == outcome(json.loads, argument)


@given(st.lists(st.text(st.characters(max_codepoint=127)), min_size=1, max_size=4))
def test_sha256_hex_is_sha256_of_each_text_alone(texts):
    """Each digest is of its own text only (the prebuilt hasher is copied, never fed twice)."""
    for text in texts:
        assert sha256_hex(text) == hashlib.sha256(text.encode("ascii")).hexdigest()
    assert sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"  # FIPS 180-2's example


def test_sha256_hex_refuses_text_that_is_not_ascii():
    with pytest.raises(UnicodeEncodeError):
        sha256_hex("caf\u00e9")
