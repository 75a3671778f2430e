"""A command's digest is the SHA-256 of the canonical JSON of its identity fields, whichever way
the text is built: the direct writing for plain rows gives the very bytes of `canonical_json`, and
anything else goes through (and is refused by) the generic canonical path."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from archetype.canonical import MAX_SAFE_INTEGER, NonCanonicalValueError, canonical_json, sha256_hex
from archetype.commands.identity import IDENTITY_FIELDS, _identity_text, command_digest

texts = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(['a"b', "a\\b", "\x00\x1f", "é", "𝄞"])
integers = st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER) | st.sampled_from([0, -1, MAX_SAFE_INTEGER])
rows = st.fixed_dictionaries({
    "command_id": texts, "schema_version": integers, "world_id": texts, "scheduled_tick": integers,
    "priority": integers, "max_attempts": integers, "operation": texts, "payload": texts,
    "principal": st.none() | texts, "origin": st.just("local"),
})  # fmt: skip


@given(rows)
def test_the_digest_is_over_the_canonical_identity_text(row):
    identity = {field: row[field] for field in IDENTITY_FIELDS}
    assert command_digest(row) == sha256_hex(canonical_json(identity))
    text = _identity_text(row)
    assert text is None or text == canonical_json(identity)


def test_plain_rows_are_written_directly():
    row = {"command_id": 'c"1', "schema_version": 1, "world_id": "w", "scheduled_tick": 7, "priority": -2,
           "max_attempts": 3, "operation": "spawn", "payload": '{"a":[1.5,"x\\n"]}', "principal": None}  # fmt: skip
    assert _identity_text(row) == canonical_json({field: row[field] for field in IDENTITY_FIELDS})


@pytest.mark.parametrize(("field", "value"), [
    ("scheduled_tick", MAX_SAFE_INTEGER + 1), ("priority", True), ("payload", "\ud800"), ("principal", "\udfff"),
    ("max_attempts", 1.0),
])  # fmt: skip
def test_anything_else_takes_the_generic_path(field, value):
    row = {"command_id": "c", "schema_version": 1, "world_id": "w", "scheduled_tick": 7, "priority": 0,
           "max_attempts": 3, "operation": "spawn", "payload": "{}", "principal": None, field: value}  # fmt: skip
    assert _identity_text(row) is None
    identity = {f: row[f] for f in IDENTITY_FIELDS}
    try:
        expected = sha256_hex(canonical_json(identity))
    except NonCanonicalValueError:
        with pytest.raises(NonCanonicalValueError):
            command_digest(row)
    else:
        assert command_digest(row) == expected
