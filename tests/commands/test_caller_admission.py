"""The caller's short cuts of durable admission (dispatcher.defer, scheduler._admit) decide what
the long way decided: a single `defer` takes and refuses what a DeferredItem took and refused, in
the same order; the schemas of every component type a command names are recorded, however many
were recorded before; and every answer of the authority is validated, one or a batch."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from archetype.commands import ActorCtx, DurableOptions, Role
from archetype.commands.dispatcher import CommandDispatcher
from archetype.commands.errors import NotDurableError, PermissionDeniedError, UnregisteredOperationError
from archetype.commands.families import default_registry
from archetype.commands.scheduler import CommandScheduler, DeferredItem
from archetype.world import Component, Spawn, SpawnReserved, Step

VIEWER = ActorCtx(principal="vic", roles=frozenset({Role.viewer}))


class Mass(Component):
    kilograms: float


class Charge(Component):
    coulombs: float


class Answering:
    """Answers admission at once (`answer` shapes each answer); keeps what it was sent."""

    def __init__(self, answer: Any = None) -> None:
        self.answer = answer or (
            lambda command, i: {"command_id": command["command_id"], "sequence": i, "digest": "0" * 64, "replayed": False}
        )
        self.admitted: list[dict[str, Any]] = []
        self.recorded: list[str] = []

    async def admit(self, world_id: str, commands: list[dict[str, Any]], quota: int | None = None) -> list[Any]:
        self.admitted.extend(commands)
        return [self.answer(command, i) for i, command in enumerate(commands)]

    async def record_components(self, world_id: str, components: list[dict[str, Any]]) -> int:
        self.recorded.extend(c["name"] for c in components)
        return len(components)


def dispatcher(authority: Answering) -> CommandDispatcher:
    registry = default_registry()
    return CommandDispatcher(registry, CommandScheduler(registry, authority), worlds=None)  # type: ignore[arg-type]


def spawn(*components: Component) -> Spawn:
    return Spawn(world_id="w1", components=components)


class Options(DurableOptions):
    """A subclass: not exactly DurableOptions, so the single admission takes the long way."""


class Key(str):
    pass


@pytest.mark.parametrize("options", [DurableOptions(tick=4, priority=2), {"tick": 4, "priority": 2}, Options(tick=4, priority=2)])
@pytest.mark.parametrize("command_id", ["k1", Key("k1")])
async def test_a_single_defer_admits_what_a_deferred_item_admits(options, command_id):
    alone, as_batch = Answering(), Answering()
    await dispatcher(alone).defer(spawn(Mass(kilograms=1.0)), options, command_id=command_id)
    await dispatcher(as_batch).defer_batch([DeferredItem(op=spawn(Mass(kilograms=1.0)), options=options, command_id=command_id)])
    assert alone.admitted == as_batch.admitted
    assert alone.admitted[0]["scheduled_tick"] == 4 and alone.admitted[0]["priority"] == 2


@pytest.mark.parametrize(
    ("options", "command_id"), [({"tick": -1}, None), ({"tick": True}, None), (None, None), (DurableOptions(tick=0), 5)]
)
async def test_a_single_defer_refuses_what_a_deferred_item_refuses_before_the_role(options, command_id):
    with pytest.raises(pydantic.ValidationError):
        DeferredItem(op=None, options=options, command_id=command_id)
    authority = Answering()
    with pytest.raises(pydantic.ValidationError):  # not PermissionDeniedError: the item is checked first
        await dispatcher(authority).defer_as(VIEWER, spawn(Mass(kilograms=1.0)), options, command_id=command_id)
    with pytest.raises(PermissionDeniedError):
        await dispatcher(authority).defer_as(VIEWER, spawn(Mass(kilograms=1.0)), DurableOptions(tick=0))
    assert authority.admitted == []


async def test_every_component_type_a_command_names_is_recorded_however_many_were_before():
    authority = Answering()
    admissions = dispatcher(authority)
    await admissions.defer(spawn(Mass(kilograms=1.0)), DurableOptions(tick=0))
    await admissions.defer(spawn(Mass(kilograms=2.0)), DurableOptions(tick=0))
    assert authority.recorded == ["Mass"]  # once
    await admissions.defer(spawn(Mass(kilograms=3.0), Charge(coulombs=1.0)), DurableOptions(tick=0))
    assert authority.recorded == ["Mass", "Charge"]
    await admissions.defer_batch([
        DeferredItem(op=spawn(Mass(kilograms=4.0)), options=DurableOptions(tick=0)),
        DeferredItem(op=spawn(Charge(coulombs=2.0)), options=DurableOptions(tick=0)),
    ])  # fmt: skip
    assert authority.recorded == ["Mass", "Charge"]


@pytest.mark.parametrize("count", [1, 3])
@pytest.mark.parametrize("bad", [{"sequence": "first"}, {"digest": None}, {"replayed": "maybe"}, {"surplus": 1}])
async def test_every_answer_is_validated_alone_or_in_a_batch(count, bad):
    def answer(command: dict[str, Any], i: int) -> dict[str, Any]:
        fine = {"command_id": command["command_id"], "sequence": i, "digest": "0" * 64, "replayed": False}
        return {**fine, **bad} if i == count - 1 else fine

    items = [DeferredItem(op=spawn(Mass(kilograms=float(i))), options=DurableOptions(tick=0)) for i in range(count)]
    with pytest.raises(pydantic.ValidationError):
        await dispatcher(Answering(answer)).defer_batch(items)


PLAYER = ActorCtx(principal="pat", roles=frozenset({Role.player}))


def reserved(entity_id: int) -> SpawnReserved:
    return SpawnReserved(world_id="w1", entity_id=entity_id, components=[Mass(kilograms=1.0)])


@pytest.mark.parametrize(
    ("actor", "ops", "refusal"),
    [
        (PLAYER, [spawn(Mass(kilograms=1.0)), reserved(1)], PermissionDeniedError),  # spawn_reserved needs admin
        (PLAYER, [spawn(Mass(kilograms=1.0)), spawn(Mass(kilograms=2.0)), reserved(1), reserved(2)], PermissionDeniedError),
        (PLAYER, [spawn(Mass(kilograms=1.0)), Step(world_id="w1")], NotDurableError),
        (PLAYER, [Step(world_id="w1"), reserved(1)], NotDurableError),  # the first refusal in batch order
        (VIEWER, [spawn(Mass(kilograms=1.0)), reserved(1)], PermissionDeniedError),
        (PLAYER, [spawn(Mass(kilograms=1.0)), "not an operation"], UnregisteredOperationError),
        (None, [spawn(Mass(kilograms=1.0)), Step(world_id="w1")], NotDurableError),
    ],
)
async def test_a_batch_authorizes_every_operation_in_it_before_anything_is_admitted(actor, ops, refusal):
    """Every operation type of a batch is authorized (the dispatcher asks once per type), not only
    the first: a later item the actor may not defer refuses the whole batch."""
    authority = Answering()
    items = [DeferredItem(op=op, options=DurableOptions(tick=0), command_id=f"c{i}") for i, op in enumerate(ops)]
    admissions = dispatcher(authority)
    with pytest.raises(refusal):
        await (admissions.defer_batch(items) if actor is None else admissions.defer_batch_as(actor, items))
    assert authority.admitted == []
