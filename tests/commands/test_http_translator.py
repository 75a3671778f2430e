"""translate (archetype.commands.http_translator) keeps the DurableOptions it built: a kept one is
the value a fresh validation gives, and whatever a fresh validation refuses is still refused."""

from __future__ import annotations

import contextlib

import pytest
from pydantic import ValidationError

from archetype.commands import http_translator
from archetype.commands.http_translator import OPTIONS_KEPT, SubmitCommandRequest, durable_options, translate
from archetype.commands.options import DurableOptions


def request(**fields: object) -> SubmitCommandRequest:
    return SubmitCommandRequest.model_validate({"type": "despawn", "tick": 5, "priority": 0, "max_attempts": 3,
                                                "entity_id": 1, **fields})  # fmt: skip


def test_translated_options_are_the_requests_and_shared_by_requests_for_one_tick():
    first, second = translate("w1", request()), translate("w1", request(entity_id=2))
    assert first.options == DurableOptions(tick=5, priority=0, max_attempts=3)
    assert second.options is first.options  # built once
    other = translate("w1", request(tick=6, priority=-2, max_attempts=9)).options
    assert other == DurableOptions(tick=6, priority=-2, max_attempts=9)


@pytest.mark.parametrize(
    ("tick", "priority", "max_attempts"), [(True, 0, 3), (1, False, 3), (1, 0, True), (-1, 0, 3), (1, 0, 0)]
)
def test_what_validation_refuses_is_refused_though_an_equal_key_is_kept(tick, priority, max_attempts):
    with contextlib.suppress(ValidationError):  # the equal key of exact ints kept first (True == 1)
        durable_options(int(tick), int(priority), int(max_attempts))
    with pytest.raises(ValidationError):
        durable_options(tick, priority, max_attempts)


def test_the_options_kept_are_bounded():
    for tick in range(OPTIONS_KEPT + 10):
        assert durable_options(tick, 0, 3).tick == tick
    assert 0 < len(http_translator._OPTIONS) <= OPTIONS_KEPT
