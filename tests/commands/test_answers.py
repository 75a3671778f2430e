"""An authority's answer made into CommandIdentity (`scheduler.identity_of`: an answer without a
`world_id` of its own validated with it added; a batch's are validated as one list), held to the
constructor's verdicts: the same instance (fields, fields set, equality, hash, dump, frozen) or the same
refusal (class, errors), for generated answers, hostile ones included."""

from __future__ import annotations

import enum
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from archetype.commands.scheduler import CommandIdentity, identity_of


class Text(str):
    pass


class Big(int):
    pass


class Flag(enum.IntEnum):
    ONE = 1


texts = st.one_of(st.text(max_size=4), st.sampled_from([Text("c"), "\udfff", "0" * 64]))
integers = st.one_of(st.integers(min_value=-(2**70), max_value=2**70), st.sampled_from([Big(3), Flag.ONE, True]))
scalars = st.one_of(texts, integers, st.booleans(), st.none(), st.floats(), st.sampled_from([1.0, "1", b"c", [1], {"a": 1}]))
FIELDS = {"command_id": texts, "sequence": integers, "digest": texts, "replayed": st.booleans()}


@st.composite
def answers(draw: st.DrawFn) -> Any:
    answer = {name: draw(st.one_of(strategy, strategy, scalars)) for name, strategy in FIELDS.items()}
    kind = draw(st.sampled_from(["plain", "plain", "missing", "extra", "world", "other"]))
    if kind == "missing":
        answer.pop(draw(st.sampled_from(sorted(answer))))
    elif kind == "extra":
        answer["extra"] = 1
    elif kind == "world":
        answer["world_id"] = "w"
    elif kind == "other":
        return draw(st.sampled_from([None, [], "answer", [("command_id", "c")]]))
    return answer


world_ids = st.one_of(st.just("w"), st.sampled_from([Text("w"), "", 7, None]))


def _made(make: Any) -> tuple[Any, ...]:
    try:
        made = make()
    except ValidationError as exc:
        return ("refused", ValidationError, exc.errors(include_url=False))
    except Exception as exc:
        return ("refused", type(exc), str(exc))
    identities = made if isinstance(made, list) else [made]
    return ("made", [_shape(identity) for identity in identities])


def _shape(identity: CommandIdentity) -> tuple[Any, ...]:
    assert type(identity) is CommandIdentity
    with pytest.raises(ValidationError):
        identity.sequence = 2  # type: ignore[misc]  # frozen
    return (identity, hash(identity), identity.model_dump(), _json(identity), repr(identity),
            identity.model_fields_set, identity.__pydantic_extra__, identity.__pydantic_private__,
            [(name, type(value)) for name, value in identity.__dict__.items()])  # fmt: skip


def _json(identity: CommandIdentity) -> str:
    try:
        return identity.model_dump_json()
    except Exception as exc:  # a lone surrogate has no UTF-8
        return type(exc).__name__


@settings(max_examples=1000, deadline=None)
@given(world_ids, answers())
def test_one_answer_is_what_validation_makes_of_it(world_id: Any, answer: Any) -> None:
    assert _made(lambda: identity_of(world_id, answer)) == _made(lambda: CommandIdentity(world_id=world_id, **answer))


def test_an_ordinary_answer_is_validated_with_its_world_added() -> None:
    """Else the property above would hold trivially (every answer given to the constructor)."""
    answer = {"command_id": "c", "sequence": 3, "digest": "0" * 64, "replayed": False}
    made = identity_of("w", answer)
    assert made == CommandIdentity(world_id="w", **answer) and answer == {**answer}  # the caller's dict as it was
    made.model_fields_set.add("x")  # each instance its own set, as validation gives it
    assert identity_of("w", answer).model_fields_set == set(CommandIdentity.model_fields)
    init = CommandIdentity.__init__
    try:
        CommandIdentity.__init__ = None  # type: ignore[assignment,method-assign]  # the constructor now fails
        identity_of("w", answer)
    finally:
        CommandIdentity.__init__ = init  # type: ignore[method-assign]
