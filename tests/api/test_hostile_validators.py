"""A component class's validator is the module author's code, run at admission: whatever it raises
(an exception of any type but SystemExit and KeyboardInterrupt, one whose text cannot be read, a
message of megabytes) refuses the command with a typed 4xx and a stable code, and changes nothing,
through HTTP and the direct API alike (docs/errors.md)."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import field_validator

from archetype.commands import DeferredItem, DurableOperation, DurableOptions, InvalidCommandError
from archetype.runtime import Runtime
from archetype.world import Component, ComponentValue, Despawn, Spawn, Update
from tests.api.conftest import PLAYER
from tests.commands.test_registry_contracts import spec


class Unreadable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


class UnreadableValueError(ValueError):
    def __str__(self) -> str:
        raise RuntimeError("no text")


class Escape(BaseException):
    """Neither an Exception nor an interpreter's exit: a module may define one."""


HOSTILE: list[BaseException] = [
    RuntimeError("boom"),
    ZeroDivisionError("division by zero"),
    AttributeError("no such thing"),
    NotImplementedError(),
    RecursionError("too deep"),
    StopIteration(),
    OSError(28, "No space left on device"),
    KeyError("k"),
    TypeError("wrong"),
    Unreadable(),
    UnreadableValueError(),
    ValueError("x" * 5_000_000),
    RuntimeError("y" * 5_000_000),
    ValueError("a\u202eb\x00c"),
    Escape("out"),
    GeneratorExit(),
    asyncio.CancelledError(),
]
IDS = [f"{i}-{type(exc).__name__}" for i, exc in enumerate(HOSTILE)]


class Hostile(Component):
    """Raises `HOSTILE[which]` as its validator, for `which` >= 0."""

    which: int

    @field_validator("which")
    @classmethod
    def _raise(cls, which: int) -> int:
        if which >= 0:
            raise HOSTILE[which]
        return which


def hostile(which: int) -> dict:
    return ComponentValue(name="Hostile", fingerprint=Hostile.component_fingerprint(), data={"which": which}).model_dump(mode="json")


def refusal_is_typed(status: int, body: dict) -> None:
    assert 400 <= status < 500, body
    assert body["code"] in ("invalid_command", "invalid_component_data"), body
    assert len(body["message"]) <= 500 and "\x00" not in body["message"]  # error_text's bounds


@pytest.mark.parametrize("which", range(len(HOSTILE)), ids=IDS)
async def test_a_hostile_validator_is_refused_over_http(client, world, snapshot, which):
    before = snapshot()
    spawn = {"type": "spawn", "tick": 0, "components": [hostile(which)]}
    update = {"type": "update", "tick": 0, "entity_id": 1, "components": [hostile(which)]}
    for path, body in [
        (f"/worlds/{world}/commands", spawn),
        (f"/worlds/{world}/commands", update),
        (f"/worlds/{world}/commands:batch", {"commands": [update, {**update, "components": [hostile(-1)]}]}),
        (f"/worlds/{world}/commands:batch", {"commands": [{**update, "components": [hostile(-1)]}, spawn]}),
    ]:
        answer = await client.post(path, json=body, headers=PLAYER)
        refusal_is_typed(answer.status_code, answer.json())
    assert snapshot() == before


@pytest.mark.parametrize("which", range(len(HOSTILE)), ids=IDS)
async def test_a_hostile_validator_is_refused_by_the_direct_api(authority, world, snapshot, which):
    rt = Runtime(authority, owner="direct")
    before = snapshot()
    at = DurableOptions(tick=0)
    value = ComponentValue.model_validate(hostile(which))
    fine = ComponentValue.model_validate(hostile(-1))
    attempts = [
        rt.dispatcher.defer(Update(world_id=world, entity_id=1, components=[value]), at),
        rt.dispatcher.defer_spawn(Spawn(world_id=world, components=[value]), at),
        rt.dispatcher.defer_batch([DeferredItem(op=Update(world_id=world, entity_id=1, components=[fine]), options=at),
                                   DeferredItem(op=Update(world_id=world, entity_id=1, components=[value]), options=at)]),  # fmt: skip
    ]
    for attempt in attempts:
        with pytest.raises(InvalidCommandError) as refused:
            await attempt
        refusal_is_typed(refused.value.http_status, {"code": refused.value.code, "message": refused.value.message})
    assert snapshot() == before


@pytest.mark.parametrize("which", range(len(HOSTILE)), ids=IDS)
def test_a_hostile_operation_decoder_is_refused_at_admission(which):
    """A registered operation's decoder (its model's validators) runs at admission too: the same rule."""

    def decode(data: dict) -> Despawn:
        raise HOSTILE[which]

    registration = spec(Despawn, durable=DurableOperation(decode, lambda world, op: None))
    with pytest.raises(InvalidCommandError) as refused:
        registration.payload_of(Despawn(world_id="w1", entity_id=1))
    refusal_is_typed(refused.value.http_status, {"code": refused.value.code, "message": refused.value.message})
