"""Contracts of the exact OperationRegistry, the operation models, DurableOptions and the dispatcher."""

import functools
import gc
import math
import warnings
from typing import Literal

import pytest
from pydantic import ValidationError

from archetype.canonical import NonCanonicalValueError
from archetype.commands import (
    ActorCtx,
    CommandDispatcher,
    DurableOperation,
    DurableOptions,
    InvalidCommandError,
    InvalidComponentDataError,
    NotDurableError,
    OperationRegistry,
    OperationSpec,
    OperationUnavailableError,
    PermissionDeniedError,
    Role,
    UnregisteredOperationError,
    WorldNotFoundError,
    default_registry,
)
from archetype.commands.registry import NonCanonicalCommandError
from archetype.world import (
    AddComponents,
    ComponentValue,
    CreateWorld,
    Despawn,
    DestroyWorld,
    QueryComponents,
    RemoveComponents,
    ReserveEntityIds,
    Spawn,
    SpawnReserved,
    Step,
    Update,
)
from archetype.world.operations import PORTABLE_MUTATIONS, Operation
from tests.component_modules.alpha import Health, Position

ALL_MODELS = [Spawn, SpawnReserved, Despawn, Update, AddComponents, RemoveComponents,
              CreateWorld, DestroyWorld, Step, QueryComponents, ReserveEntityIds]  # fmt: skip


async def _noop(ctx, op):
    return "handled"


def spec(model, **overrides):
    fields = dict(permission=Role.player, untrusted=True, world_key=lambda op: op.world_id)
    return OperationSpec(model, overrides.pop("handler", _noop), **{**fields, **overrides})


# -- models --
@pytest.mark.parametrize("model", ALL_MODELS)
def test_models_are_frozen_closed_and_exactly_tagged(model):
    assert model.model_config["frozen"] and model.model_config["extra"] == "forbid"
    assert model.model_fields["operation"].annotation.__origin__ is Literal
    for field in ("tick", "scheduled_tick", "priority", "max_attempts", "attempts"):
        assert field not in model.model_fields


def test_operation_names_are_exact_and_unique():
    names = [m.model_fields["operation"].default for m in ALL_MODELS]
    assert names == ["spawn", "spawn_reserved", "despawn", "update", "add_components", "remove_components",
                     "create_world", "destroy_world", "step", "query_components", "reserve_entity_ids"]  # fmt: skip


def test_unknown_fields_and_wrong_discriminators_are_refused():
    with pytest.raises(ValidationError):
        Despawn(world_id="w", entity_id=1, tick=3)
    with pytest.raises(ValidationError):
        Despawn(world_id="w", entity_id=1, operation="update")
    with pytest.raises(ValidationError):
        Despawn(world_id="w", entity_id=True)  # booleans are not entity ids


def test_spawn_from_components_takes_instances():
    op = Spawn.from_components(world_id="w", components=[Position(x=1, y=2)])
    assert op.components[0].affinity is Position
    assert op.components[0].data == {"x": 1.0, "y": 2.0}


# -- DurableOptions --
@pytest.mark.parametrize(
    "options",
    [dict(tick=-1), dict(tick=True), dict(tick=0, priority=False), dict(tick=0, max_attempts=0),
     dict(tick=0, max_attempts=True), dict(tick=2**53), dict(tick=2**53 + 1), dict(tick="3"), dict(tick=0, extra=1)],  # fmt: skip
)
def test_durable_options_refuse_bad_values(options):
    with pytest.raises(ValidationError):
        DurableOptions(**options)


def test_durable_options_defaults():
    assert DurableOptions(tick=0) == DurableOptions(tick=0, priority=0, max_attempts=3)


def test_the_tick_bound_is_javascripts_safe_integer_inclusive():
    assert DurableOptions(tick=2**53 - 1).tick == 9007199254740991


# -- registry --
def test_default_registry_makes_exactly_the_six_portable_mutations_durable():
    registry = default_registry()
    durable = {s.model for s in registry if s.durable is not None}
    assert durable == set(PORTABLE_MUTATIONS)


def test_resolution_is_by_exact_type_without_mro_fallback():
    class MySpawn(Spawn):
        pass

    registry = default_registry()
    op = MySpawn(world_id="w", components=[Health(hp=1)])
    with pytest.raises(UnregisteredOperationError):
        registry.resolve(op)


def test_duplicate_names_or_models_fail_registration():
    registry = OperationRegistry()
    registry.register(spec(Despawn))
    with pytest.raises(ValueError, match="already registered"):
        registry.register(spec(Despawn))

    class OtherDespawn(Operation):
        operation: Literal["despawn"] = "despawn"
        world_id: str

    with pytest.raises(ValueError, match="already registered"):
        registry.register(spec(OtherDespawn))


@pytest.mark.parametrize("model", [CreateWorld, DestroyWorld, Step, QueryComponents, ReserveEntityIds])
def test_durable_registration_outside_the_portable_mutations_is_refused(model):
    registry = OperationRegistry()
    with pytest.raises(ValueError, match="cannot be durable"):
        registry.register(spec(model, durable=DurableOperation(model.model_validate, lambda w, op: None)))


def test_a_durable_registration_needs_a_world_key():
    with pytest.raises(ValueError, match="world-key"):
        OperationRegistry().register(spec(Despawn, world_key=None, durable=DurableOperation(Despawn.model_validate, lambda w, op: None)))


def test_durable_decoder_must_return_the_exact_model():
    class Looser(Despawn):
        pass

    bad = spec(Despawn, durable=DurableOperation(lambda data: Looser(**data), lambda w, op: None))
    payload = default_registry().resolve(Despawn(world_id="w", entity_id=1)).payload_of(Despawn(world_id="w", entity_id=1))
    with pytest.raises(InvalidCommandError, match="returned"):
        bad.decode_exact(payload)
    with pytest.raises(InvalidCommandError, match="returned"):  # admission decodes as materialization will
        bad.payload_of(Despawn(world_id="w", entity_id=1))


def test_durable_decoder_must_round_trip_byte_for_byte():
    shifty = spec(Despawn, durable=DurableOperation(lambda data: Despawn(world_id=data["world_id"], entity_id=2), lambda w, op: None))
    good = default_registry().resolve(Despawn(world_id="w", entity_id=1))
    payload = good.payload_of(Despawn(world_id="w", entity_id=1))
    with pytest.raises(InvalidCommandError, match="round-trip"):
        shifty.decode_exact(payload)
    with pytest.raises(InvalidCommandError, match="round-trip"):  # admission decodes as materialization will
        shifty.payload_of(Despawn(world_id="w", entity_id=1))
    assert good.decode_exact(payload) == Despawn(world_id="w", entity_id=1)


def test_payload_of_refuses_a_subclass_instance():
    class Sub(Despawn):
        pass

    with pytest.raises(UnregisteredOperationError):
        default_registry().resolve(Despawn(world_id="w", entity_id=1)).payload_of(Sub(world_id="w", entity_id=1))


def test_summaries_are_bounded():
    registry = default_registry()
    op = Spawn(world_id="w", components=[Health(hp=i) for i in range(200)])
    assert len(registry.resolve(op).summary(op)) <= 200
    long = spec(Despawn, summarize=lambda op: "x" * 10_000)
    assert len(long.summary(Despawn(world_id="w", entity_id=1))) == 200


# -- dispatcher order: exact registration -> role -> availability -> handler --
class ExplodingWorlds:
    """Any world lookup fails loudly: proves authorization happens before it."""

    async def get(self, world_id):
        raise AssertionError("the world was looked up before authorization")


def dispatcher(registry=None):
    registry = registry or default_registry()
    return CommandDispatcher(registry, scheduler=None, worlds=ExplodingWorlds())


VIEWER = ActorCtx(principal="vic", roles={Role.viewer})
PLAYER = ActorCtx(principal="pat", roles={Role.player})
ADMIN = ActorCtx(principal="ada", roles={Role.admin})


def test_roles_are_ranked():
    assert ADMIN.has(Role.viewer) and ADMIN.has(Role.operator)
    assert PLAYER.has(Role.viewer) and not PLAYER.has(Role.operator)
    assert not ActorCtx(principal="nobody").has(Role.viewer)


async def test_unregistered_models_fail_first():
    class Stranger(Operation):
        operation: Literal["stranger"] = "stranger"

    with pytest.raises(UnregisteredOperationError):
        await dispatcher().apply_as(VIEWER, Stranger())


async def test_role_denial_comes_before_any_world_lookup():
    with pytest.raises(PermissionDeniedError):
        await dispatcher().apply_as(VIEWER, Despawn(world_id="maybe-missing", entity_id=1))
    with pytest.raises(PermissionDeniedError):
        await dispatcher().defer_as(VIEWER, Despawn(world_id="maybe-missing", entity_id=1), DurableOptions(tick=0))
    with pytest.raises(PermissionDeniedError):
        await dispatcher().apply_as(PLAYER, DestroyWorld(world_id="maybe-missing"))


async def test_trusted_only_operations_are_unavailable_to_actors_even_with_the_role():
    op = SpawnReserved(world_id="w", entity_id=1, components=[Health(hp=1)])
    with pytest.raises(OperationUnavailableError):
        await dispatcher().defer_as(ADMIN, op, DurableOptions(tick=0))
    with pytest.raises(OperationUnavailableError):
        await dispatcher().apply_as(ADMIN, ReserveEntityIds(world_id="w", count=1))


async def test_untrusted_only_operations_are_unavailable_to_trusted_callers():
    registry = OperationRegistry()
    registry.register(spec(Despawn, trusted=False))
    with pytest.raises(OperationUnavailableError):
        await dispatcher(registry).apply(Despawn(world_id="w", entity_id=1))
    assert await dispatcher(registry).apply_as(PLAYER, Despawn(world_id="w", entity_id=1)) == "handled"


async def test_direct_only_models_cannot_be_deferred():
    with pytest.raises(NotDurableError):
        await dispatcher().defer(Step(world_id="w"), DurableOptions(tick=0))
    with pytest.raises(NotDurableError):
        await dispatcher().defer_as(ADMIN, CreateWorld(name="x"), DurableOptions(tick=0))


async def test_the_handler_receives_the_actor():
    seen = []

    async def handler(ctx, op):
        seen.append(ctx.actor)

    registry = OperationRegistry()
    registry.register(spec(Despawn, handler=handler))
    await dispatcher(registry).apply_as(PLAYER, Despawn(world_id="w", entity_id=1))
    await dispatcher(registry).apply(Despawn(world_id="w", entity_id=1))
    assert seen == [PLAYER, None]


async def test_an_authorised_call_reaches_the_world_lookup(runtime):
    with pytest.raises(WorldNotFoundError):
        await runtime.dispatcher.apply_as(VIEWER, QueryComponents(world_id="nowhere", component_types=[Health]))


# -- durable functions are synchronous --
async def _async_materialize(world, op):
    world.touched = True


async def _async_decode(data):
    return Despawn(**data)


class _AsyncCallable:
    async def __call__(self, world, op):
        return None


async def _async_generator(world, op):
    yield None


@pytest.mark.parametrize(
    "decode,materialize",
    [
        (Despawn.model_validate, _async_materialize),
        (Despawn.model_validate, functools.partial(_async_materialize)),
        (Despawn.model_validate, _AsyncCallable()),
        (Despawn.model_validate, _async_generator),
        (_async_decode, lambda world, op: None),
    ],
)
def test_coroutine_functions_are_refused_at_registration(decode, materialize):
    with pytest.raises(TypeError, match="synchronous"):
        OperationRegistry().register(spec(Despawn, durable=DurableOperation(decode, materialize)))


def test_a_registration_needs_a_real_durable_operation():
    class Impostor:
        decode, materialize = staticmethod(Despawn.model_validate), staticmethod(lambda world, op: None)

    with pytest.raises(TypeError, match="DurableOperation"):
        OperationRegistry().register(spec(Despawn, durable=Impostor()))


def test_a_materializer_returning_an_awaitable_fails_with_type_error_and_runs_nothing():
    class World:
        touched = False

    world = World()
    durable = DurableOperation(Despawn.model_validate, lambda w, op: _async_materialize(w, op))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the coroutine is closed, not left "never awaited"
        with pytest.raises(TypeError, match="awaitable"):
            durable.materialize(world, Despawn(world_id="w", entity_id=1))
        gc.collect()
    assert not world.touched


def test_a_synchronous_materializer_is_called_as_given():
    calls = []
    durable = DurableOperation(Despawn.model_validate, lambda w, op: calls.append((w, op)) or "result")
    assert durable.materialize("world", "op") == "result" and calls == [("world", "op")]
    assert DurableOperation(durable.decode, durable.materialize).materialize is durable.materialize  # wrapped once


# -- payload_of: admission's check of the complete operation --
def test_payload_of_refuses_non_canonical_values_that_bypassed_validation():
    good = Update(world_id="w", entity_id=1, components=[Position(x=1, y=2)])
    registered = default_registry().resolve(good)
    for bad in (math.nan, math.inf, -math.inf, "\udfff", 2**53, {1, 2}, b"x", object()):
        op = Update(world_id="w", entity_id=1, components=[Position(x=1, y=2)])
        op.components[0].data["x"] = bad  # the data dict is the one mutable thing in a frozen operation
        with pytest.raises(NonCanonicalCommandError) as refused:
            registered.payload_of(op)
        assert isinstance(refused.value, InvalidCommandError) and isinstance(refused.value, NonCanonicalValueError)
        assert refused.value.code == "non_canonical_value" and refused.value.path == "$.components[0].data.x"


def test_payload_of_refuses_constructed_operations_that_do_not_validate():
    registry = default_registry()
    despawn = registry.resolve(Despawn(world_id="w", entity_id=1))
    with pytest.raises(InvalidCommandError, match="discriminator"):
        despawn.payload_of(Despawn.model_construct(operation="update", world_id="w", entity_id=1))
    for fields in (dict(world_id="w", entity_id=0), dict(world_id="w", entity_id=2**53), dict(world_id="no spaces", entity_id=1),
                   dict(world_id="w", entity_id=True)):  # fmt: skip
        with pytest.raises(InvalidCommandError):
            despawn.payload_of(Despawn.model_construct(**fields))
    with pytest.raises(NonCanonicalCommandError):
        despawn.payload_of(Despawn.model_construct(world_id="w\udfff", entity_id=1))


def test_payload_of_builds_component_values_live_where_their_class_is_loaded():
    from tests.component_modules.coercing import Counter

    value = ComponentValue(name="Counter", fingerprint=Counter.component_fingerprint(), data={"n": 1e18})
    spawn = default_registry().resolve(Spawn(world_id="w", components=[Health(hp=1)]))
    with pytest.raises(NonCanonicalCommandError, match=r"\$\.components\[1\]\.data\.n: integer 1000000000000000000 is outside"):
        spawn.payload_of(Spawn(world_id="w", components=[Health(hp=1), value]))
    misfit = ComponentValue(name="Health", fingerprint=Health.component_fingerprint(), data={"hp": "lots"})
    with pytest.raises(InvalidComponentDataError, match=r"^\$\.components\[0\]\.data\.hp: does not validate as Health") as refused:
        spawn.payload_of(Spawn(world_id="w", components=[misfit]))
    assert not isinstance(refused.value, NonCanonicalValueError)
    unknown = ComponentValue(name="Elsewhere", fingerprint="e" * 64, data={"n": 1e18})  # an edge without the class
    assert spawn.payload_of(Spawn(world_id="w", components=[unknown])).startswith('{"components":[{"data":{"n":1e+18}')


def test_payload_of_is_the_same_bytes_as_before_for_canonical_operations():
    op = Update(world_id="w", entity_id=1, components=[Position(x=1, y=2.5)])
    assert default_registry().resolve(op).payload_of(op) == (
        '{"components":[{"data":{"x":1.0,"y":2.5},"fingerprint":"' + Position.component_fingerprint() + '",'
        '"name":"Position"}],"entity_id":1,"operation":"update","world_id":"w"}'
    )
