"""`checked_command_id` accepts and refuses exactly what COMMAND_ID_PATTERN does, on generated
keys: its short cut for an exact `str` (asked of the characters as sets) included."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from archetype.commands.errors import InvalidCommandError
from archetype.commands.identity import COMMAND_ID_PATTERN
from archetype.commands.scheduler import checked_command_id, checked_command_ids


class Text(str):
    pass


alphabet = st.sampled_from("aZ09_.:-\n é\x00/")
keys = st.one_of(
    st.text(alphabet, max_size=6),
    st.text(alphabet, min_size=126, max_size=130),
    st.text(max_size=4),
    st.from_regex(COMMAND_ID_PATTERN, fullmatch=True),
    st.sampled_from(["a\n", "\na", "a" * 128, "a" * 129, "", "-a", "a-", "ａ", "٣", Text("a"), Text("-")]),
)


def _verdict(key: Any) -> Any:
    try:
        return ("ok", checked_command_id(key))
    except InvalidCommandError as exc:
        return ("refused", str(exc))


@settings(max_examples=1500, deadline=None)
@given(keys)
def test_a_key_is_accepted_exactly_when_the_pattern_matches_it(key: Any) -> None:
    expected = ("ok", key) if COMMAND_ID_PATTERN.fullmatch(key) else (
        "refused", f"command id {key!r} must match {COMMAND_ID_PATTERN.pattern}")  # fmt: skip
    assert _verdict(key) == expected


def test_keys_that_are_not_strings_are_refused_and_none_makes_one() -> None:
    for key in (7, b"a", ["a"]):
        assert _verdict(key)[0] == "refused"
    made = checked_command_id(None)
    assert COMMAND_ID_PATTERN.fullmatch(made) and made != checked_command_id(None)


def _verdicts(keys: list[Any]) -> Any:
    try:
        return ("ok", checked_command_ids(keys))
    except InvalidCommandError as exc:
        return ("refused", str(exc))


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.one_of(keys, st.sampled_from(["a\nb", "a\n\nb", "a-\n-b"])), min_size=1, max_size=6))
def test_a_batchs_keys_are_checked_as_each_would_be(batch: list[Any]) -> None:
    """The batch's check at once (the keys joined with newlines) accepts a batch exactly when every
    key is accepted alone, and refuses with the first key's refusal: a key holding a newline, an
    empty one, one past 128 characters, a `str` subclass included."""
    expected: Any = ("ok", batch)
    for key in batch:
        verdict = _verdict(key)
        if verdict[0] == "refused":
            expected = verdict
            break
    found = _verdicts(batch)
    assert found == expected
    if found[0] == "ok":
        assert [type(key) for key in found[1]] == [type(key) for key in batch]
