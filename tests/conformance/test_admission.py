"""Admission and identity (spec: "Admission and identity")."""

import math

import pytest
from pydantic import ValidationError

from archetype.canonical import NonCanonicalValueError
from archetype.commands import (
    ActorCtx,
    AmbiguousCommandError,
    CommandConflictError,
    DeferredItem,
    DurableOperation,
    InvalidCommandError,
    NotDurableError,
    UnregisteredOperationError,
    WorldClosingError,
    WorldNotFoundError,
)
from archetype.commands.identity import command_digest
from archetype.commands.options import Role
from archetype.commands.registry import NonCanonicalCommandError
from archetype.world import ComponentValue, CreateWorld, Despawn, DestroyWorld, Spawn, Step, Update
from tests.component_modules.alpha import Health, Position
from tests.component_modules.coercing import Counter, Label, Loose, Ratio, Tree
from tests.conformance.helpers import at, outbox, records, step
from tests.support.faults import AuthoritySeam, answer_lost

PLAYER = ActorCtx(principal="pat", roles={Role.player})


async def test_a_persisted_row_holds_everything_the_spec_lists(rt, world_id, authority):
    identity = await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=5), at(3, priority=2, max_attempts=4),
                                         command_id="cmd-1")  # fmt: skip
    row = await authority.command(world_id=world_id, command_id="cmd-1")
    assert row["command_id"] == "cmd-1" and row["schema_version"] == 1
    assert row["world_id"] == world_id and row["scheduled_tick"] == 3
    assert row["priority"] == 2 and row["sequence"] == identity.sequence == 1
    assert row["operation"] == "despawn"
    assert row["payload"] == '{"entity_id":5,"operation":"despawn","world_id":"w-conf"}'
    assert row["digest"] == identity.digest == command_digest(row)
    assert row["principal"] is None and row["origin"] == "local"
    assert row["max_attempts"] == 4 and row["attempts"] == 0
    assert row["reserved_entity_id"] is None and row["status"] == "PENDING"


async def test_generated_command_ids_are_unique(rt, world_id):
    a = await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=5), at(0))
    b = await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=5), at(0))
    assert a.command_id != b.command_id and b.sequence == a.sequence + 1


async def test_sequences_are_per_world_and_monotonic(rt, world_id):
    other = await rt.dispatcher.apply(CreateWorld(name="other", world_id="w-other"))
    seqs = [(await rt.dispatcher.defer(Despawn(world_id=w, entity_id=1), at(0))).sequence
            for w in (world_id, other, world_id, other, world_id)]  # fmt: skip
    assert seqs == [1, 1, 2, 2, 3]


async def test_identical_replay_returns_the_existing_identity_from_any_runtime(rt, make_runtime, world_id):
    op = Update(world_id=world_id, entity_id=1, components=[Health(hp=3)])
    first = await rt.dispatcher.defer(op, at(2), command_id="same")
    again = await make_runtime("runner-b").dispatcher.defer(op, at(2), command_id="same")
    assert again.replayed and not first.replayed
    assert (again.sequence, again.digest) == (first.sequence, first.digest)
    assert [e["event_type"] for e in await outbox(rt.authority, world_id)] == ["admitted"]


@pytest.mark.parametrize(
    "change",
    [
        dict(op=Despawn(world_id="w-conf", entity_id=2)),
        dict(options=at(3)),
        dict(options=at(2, priority=1)),
        dict(options=at(2, max_attempts=9)),
    ],
)
async def test_reusing_a_command_id_with_different_content_is_a_conflict(rt, world_id, change):
    base = dict(op=Despawn(world_id=world_id, entity_id=1), options=at(2))
    await rt.dispatcher.defer(base["op"], base["options"], command_id="k")
    changed = {**base, **change}
    with pytest.raises(CommandConflictError):
        await rt.dispatcher.defer(changed["op"], changed["options"], command_id="k")


async def test_a_conflict_survives_a_lost_answer_of_the_first_persistence(rt, world_id, authority):
    rt.scheduler.authority = answer_lost(authority, "admit")
    with pytest.raises(ConnectionResetError):
        await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0), command_id="k")
    rt.scheduler.authority = authority
    with pytest.raises(CommandConflictError):
        await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=2), at(0), command_id="k")
    assert (await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0), command_id="k")).replayed


async def test_a_batch_is_all_or_nothing(rt, world_id, authority):
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0), command_id="taken")
    batch = [
        DeferredItem(op=Despawn(world_id=world_id, entity_id=2), options=at(0), command_id="new-1"),
        DeferredItem(op=Despawn(world_id=world_id, entity_id=9), options=at(0), command_id="taken"),  # conflicts
    ]
    with pytest.raises(CommandConflictError):
        await rt.dispatcher.defer_batch(batch)
    assert await authority.command(world_id=world_id, command_id="new-1") is None
    assert len(await outbox(authority, world_id)) == 1


async def test_a_batch_admits_in_order_and_replays_whole(rt, world_id):
    batch = [DeferredItem(op=Despawn(world_id=world_id, entity_id=i), options=at(0), command_id=f"b{i}") for i in range(1, 6)]
    first = await rt.dispatcher.defer_batch(batch)
    assert [i.sequence for i in first] == [1, 2, 3, 4, 5]
    again = await rt.dispatcher.defer_batch(batch)
    assert all(i.replayed for i in again) and [i.sequence for i in again] == [1, 2, 3, 4, 5]


async def test_a_batch_cannot_span_worlds_or_be_empty_or_repeat_an_id(rt, world_id, authority):
    other = await rt.dispatcher.apply(CreateWorld(name="other", world_id="w-other"))
    with pytest.raises(InvalidCommandError, match="span"):
        await rt.dispatcher.defer_batch([
            DeferredItem(op=Despawn(world_id=world_id, entity_id=1), options=at(0)),
            DeferredItem(op=Despawn(world_id=other, entity_id=1), options=at(0)),
        ])  # fmt: skip
    with pytest.raises(InvalidCommandError):
        await rt.dispatcher.defer_batch([])
    with pytest.raises(InvalidCommandError, match="twice"):
        await rt.dispatcher.defer_batch([
            DeferredItem(op=Despawn(world_id=world_id, entity_id=1), options=at(0), command_id="x"),
            DeferredItem(op=Despawn(world_id=world_id, entity_id=2), options=at(0), command_id="x"),
        ])  # fmt: skip
    assert await outbox(authority, world_id) == []


async def test_unregistered_direct_only_and_invalid_commands_fail_before_the_catalog_is_touched(rt, world_id, authority):
    from typing import Literal

    from archetype.world.operations import Operation

    class Stranger(Operation):
        operation: Literal["stranger"] = "stranger"
        world_id: str

    counting = AuthoritySeam(authority)
    rt.scheduler.authority = counting
    bad = [
        (UnregisteredOperationError, Stranger(world_id=world_id), at(0), None),
        (NotDurableError, Step(world_id=world_id), at(0), None),
        (NotDurableError, DestroyWorld(world_id=world_id), at(0), None),
        (InvalidCommandError, Despawn(world_id=world_id, entity_id=1), at(0), "bad id with spaces"),
    ]
    for error, op, options, command_id in bad:
        with pytest.raises(error):
            await rt.dispatcher.defer(op, options, command_id=command_id)
    with pytest.raises(ValueError):
        await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), {"tick": True})
    assert counting.calls == []


async def test_admission_fails_closed_unless_the_world_is_active(rt, world_id):
    with pytest.raises(WorldNotFoundError):
        await rt.dispatcher.defer(Despawn(world_id="w-missing", entity_id=1), at(0))
    await rt.dispatcher.apply(DestroyWorld(world_id=world_id))
    with pytest.raises(WorldClosingError):
        await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0))


async def test_component_values_are_stored_by_name_and_fingerprint(rt, world_id, authority):
    await rt.dispatcher.defer(Update(world_id=world_id, entity_id=1, components=[Position(x=1, y=2)]), at(0), command_id="u")
    row = await authority.command(world_id=world_id, command_id="u")
    fingerprint = Position.component_fingerprint()
    assert row["payload"] == (
        '{"components":[{"data":{"x":1.0,"y":2.0},"fingerprint":"' + fingerprint + '","name":"Position"}],'
        '"entity_id":1,"operation":"update","world_id":"w-conf"}'
    )


# -- canonical values (spec: "Live Python capabilities, non-canonical values, and operation/
#    discriminator mismatches fail before admission"; docs/components.md "Canonical values") --
def _nested(depth: int):
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


NON_CANONICAL = {
    "nan": math.nan,
    "infinity": math.inf,
    "-infinity": -math.inf,
    "1e400": float("1e400"),
    "surrogate": "\udfff",
    "huge-int": 2**53,
    "depth-500": _nested(500),
    "set": {1, 2},
    "live-object": object(),
}


def _smuggled(op, bad):
    """`op` with `bad` slipped into its first value's data after validation (the data dict is mutable)."""
    op.components[0].data["x"] = bad
    return op


def _spawn(world_id):
    return Spawn(world_id=world_id, components=[Position(x=1, y=2)])


async def _nothing_persisted(rt, authority, world_id):
    assert await rt.scheduler.history(world_id) == []
    assert await outbox(authority, world_id) == []


@pytest.mark.parametrize("kind", sorted(NON_CANONICAL))
async def test_non_canonical_values_fail_before_the_catalog_is_touched(rt, world_id, authority, kind):
    bad = NON_CANONICAL[kind]
    counting = AuthoritySeam(authority)
    rt.scheduler.authority = counting
    update = lambda: _smuggled(Update(world_id=world_id, entity_id=1, components=[Position(x=1, y=2)]), bad)  # noqa: E731
    attempts = [
        rt.dispatcher.defer(update(), at(0), command_id="one"),
        rt.dispatcher.defer_as(PLAYER, update(), at(0)),
        rt.dispatcher.defer_spawn(_smuggled(_spawn(world_id), bad), at(0), command_id="spawn"),
        rt.dispatcher.defer_spawn_as(PLAYER, _smuggled(_spawn(world_id), bad), at(0)),
        rt.dispatcher.defer_batch([DeferredItem(op=Despawn(world_id=world_id, entity_id=1), options=at(0), command_id="fine"),
                                   DeferredItem(op=update(), options=at(0), command_id="bad")]),  # fmt: skip
    ]
    for attempt in attempts:
        with pytest.raises(NonCanonicalCommandError) as refused:
            await attempt
        assert isinstance(refused.value, InvalidCommandError) and isinstance(refused.value, NonCanonicalValueError)
        assert refused.value.code == "non_canonical_value" and refused.value.path.startswith("$.components[0].data.x")
    assert counting.calls == []
    rt.scheduler.authority = authority
    await _nothing_persisted(rt, authority, world_id)


@pytest.mark.parametrize("bad", [math.nan, math.inf, "\udfff", {"\ud800": 1}, _nested(500), 2**53])
async def test_a_component_value_with_non_canonical_data_cannot_even_be_built(world_id, bad):
    with pytest.raises(ValidationError, match="non_canonical_value"):
        ComponentValue(name="Loose", fingerprint=Loose.component_fingerprint(), data={"value": bad})
    with pytest.raises(ValidationError, match="non_canonical_value"):
        Spawn(world_id=world_id, components=[Loose.model_construct(value=bad)])


async def test_nan_null_and_negative_infinity_are_not_one_command(rt, world_id, authority):
    null = await rt.dispatcher.defer(Update(world_id=world_id, entity_id=1, components=[Loose(value=None)]), at(0), command_id="k")
    for bad in (math.nan, -math.inf):
        op = Update(world_id=world_id, entity_id=1, components=[Loose(value=None)])
        op.components[0].data["value"] = bad
        with pytest.raises(NonCanonicalCommandError):
            await rt.dispatcher.defer(op, at(0), command_id="k")  # refused: not a replay of the null one
    row = await authority.command(world_id=world_id, command_id="k")
    assert '"data":{"value":null}' in row["payload"] and row["digest"] == null.digest
    assert [e["event_type"] for e in await outbox(authority, world_id)] == ["admitted"]


@pytest.mark.parametrize(
    "component_type,data,reason",
    [
        (Counter, {"n": 1e18}, "outside"),  # a float on the wire, an integer beyond 2**53-1 live
        (Ratio, {"inverse": 0}, "Infinity"),  # the class's validator makes an infinity
        (Label, {"text": "mangle"}, "lone surrogate"),  # ... a lone surrogate
        (Tree, {"depth": 40}, "nested deeper"),  # ... nesting beyond the data limit
    ],
)
async def test_a_live_value_without_a_canonical_form_is_refused_at_admission(rt, world_id, authority, component_type, data, reason):
    value = ComponentValue(name=component_type.__name__, fingerprint=component_type.component_fingerprint(), data=data)
    counting = AuthoritySeam(authority)
    rt.scheduler.authority = counting
    with pytest.raises(NonCanonicalCommandError, match=reason):
        await rt.dispatcher.defer(Update(world_id=world_id, entity_id=1, components=[value]), at(0))
    with pytest.raises(NonCanonicalCommandError, match=reason):
        await rt.dispatcher.defer_spawn(Spawn(world_id=world_id, components=[value]), at(0))
    assert counting.calls == []
    rt.scheduler.authority = authority
    await _nothing_persisted(rt, authority, world_id)


async def test_data_that_does_not_validate_as_its_loaded_class_is_refused_at_admission(rt, world_id, authority):
    misfit = ComponentValue(name="Health", fingerprint=Health.component_fingerprint(), data={"hp": "plenty"})
    with pytest.raises(InvalidCommandError, match="does not validate as Health"):
        await rt.dispatcher.defer(Update(world_id=world_id, entity_id=1, components=[misfit]), at(0))
    await _nothing_persisted(rt, authority, world_id)


async def test_the_safe_integer_bound_is_inclusive_on_every_authority(rt, world_id, authority):
    last = 2**53 - 1
    identity = await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=last), at(last, priority=-(2**31)), command_id="edge")
    row = await authority.command(world_id=world_id, command_id="edge")
    assert row["scheduled_tick"] == last and isinstance(row["scheduled_tick"], int)
    assert row["payload"] == '{"entity_id":9007199254740991,"operation":"despawn","world_id":"w-conf"}'
    assert row["digest"] == identity.digest == command_digest(row)
    (record,) = await rt.scheduler.history(world_id)
    assert record.operation_model == Despawn(world_id=world_id, entity_id=last) and record.problem is None
    # the bound as a bound parameter of a read (on the Durable Object, a Python int this large
    # crosses into JavaScript as a BigInt, which its SQL refuses: durable_world.ffi.sql_binding)
    assert await authority.history(world_id, after_sequence=last) == []
    assert await authority.read_outbox(world_id, after_seq=last) == []
    assert await authority.manifests(world_id, after_tick=last) == []
    assert (await authority.load_state(world_id, after_entity_id=last))["entities"] == []
    with pytest.raises(ValidationError):
        at(2**53)
    with pytest.raises(ValidationError):
        Despawn(world_id=world_id, entity_id=2**53)


# -- materialization keeps the same rules (a value admitted where its class was not loaded) --
async def test_a_live_value_without_a_canonical_form_rejects_only_its_command_when_materialized(rt, world_id, authority, monkeypatch):
    from archetype.world import components as registry_of_classes

    value = ComponentValue(name="Counter", fingerprint=Counter.component_fingerprint(), data={"n": 1e18})
    await rt.scheduler.record_components(world_id, [Counter])  # the runners recorded it: 1e18 fits `integer`
    with monkeypatch.context() as edge:  # an edge that admits for runners does not load the runners' classes
        edge.delitem(registry_of_classes._LOADED, ("Counter", Counter.component_fingerprint()))
        await rt.dispatcher.defer(Spawn(world_id=world_id, components=[value]), at(0), command_id="poison")
    await rt.dispatcher.defer(Spawn(world_id=world_id, components=[Health(hp=1)]), at(0), command_id="fine")
    assert await step(rt, world_id) == 1  # the tick publishes: nothing non-canonical reached its write-set
    result = await records(rt, world_id)
    assert (result["poison"].status, result["fine"].status) == ("REJECTED", "APPLIED")
    assert "NonCanonicalValueError" in result["poison"].last_error and "outside" in result["poison"].last_error


async def test_a_materializer_that_returns_an_awaitable_is_rejected_not_applied(rt, world_id, authority):
    spec = rt.registry.resolve(Despawn(world_id=world_id, entity_id=1))
    ran = []

    async def later(world, op):
        ran.append(op)

    object.__setattr__(spec, "durable", DurableOperation(spec.durable.decode, lambda world, op: later(world, op)))
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0), command_id="async")
    await step(rt, world_id)
    (record,) = await rt.scheduler.history(world_id)
    assert record.status == "REJECTED" and "TypeError" in record.last_error and "awaitable" in record.last_error
    assert ran == []
    with pytest.raises(TypeError, match="synchronous"):
        DurableOperation(spec.durable.decode, later)


@pytest.mark.parametrize("command_id", ["trailing-newline\n", "\nleading", "tab\tinside", "x" * 129, ""])
async def test_a_command_id_must_match_its_pattern_whole(rt, world_id, authority, command_id):
    before = await authority.world_info(world_id)
    with pytest.raises(InvalidCommandError, match="must match"):
        await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(0), command_id=command_id)
    with pytest.raises(InvalidCommandError, match="must match"):  # refused before any reservation is written
        await rt.dispatcher.defer_spawn(Spawn(world_id=world_id, components=[Health(hp=1)]), at(0), command_id=command_id)
    assert await authority.world_info(world_id) == before and await authority.history(world_id) == []


async def test_each_principal_has_its_own_command_ids(rt, world_id, authority):
    quinn = ActorCtx(principal="quinn", roles={Role.player})
    mine = await rt.dispatcher.defer_as(PLAYER, Despawn(world_id=world_id, entity_id=1), at(0), command_id="k")
    theirs = await rt.dispatcher.defer_as(quinn, Despawn(world_id=world_id, entity_id=2), at(1), command_id="k")
    trusted = await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=3), at(2), command_id="k")
    assert len({mine.sequence, theirs.sequence, trusted.sequence}) == 3
    assert (await rt.dispatcher.defer_as(quinn, Despawn(world_id=world_id, entity_id=2), at(1), command_id="k")).replayed
    with pytest.raises(CommandConflictError):  # a conflict only within one's own scope
        await rt.dispatcher.defer_as(quinn, Despawn(world_id=world_id, entity_id=9), at(1), command_id="k")
    assert '"entity_id":2' in (await authority.command(world_id, "k", scope="quinn"))["payload"]
    assert [r["principal"] for r in await authority.history(world_id, scope="quinn")] == ["quinn"]
    assert [r["principal"] for r in await authority.history(world_id, scope="")] == [None]
    assert len(await authority.history(world_id)) == 3


async def test_without_a_scope_a_command_id_names_the_one_command_of_any_scope(rt, world_id, authority):
    """docs/ledger.md, "Isolation": `command(scope=None)` is the one command of that id in any
    scope, None when there is none, `AmbiguousCommandError` (naming the principals) when several."""
    quinn = ActorCtx(principal="quinn", roles={Role.player})
    await rt.dispatcher.defer_as(PLAYER, Despawn(world_id=world_id, entity_id=1), at(0), command_id="pats")
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=3), at(2), command_id="trusted")
    assert (await authority.command(world_id, "pats", scope=None))["principal"] == "pat"
    assert (await authority.command(world_id, "trusted", scope=None))["principal"] is None
    assert await authority.command(world_id, "nobodys", scope=None) is None
    await rt.dispatcher.defer_as(quinn, Despawn(world_id=world_id, entity_id=2), at(1), command_id="pats")
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=4), at(1), command_id="pats")
    with pytest.raises(AmbiguousCommandError) as ambiguous:
        await authority.command(world_id, "pats", scope=None)
    assert all(name in ambiguous.value.message for name in ("'pat'", "'quinn'", "trusted callers"))
    with pytest.raises(WorldNotFoundError):
        await authority.command("no-such-world", "pats", scope=None)


async def test_the_quota_counts_each_command_at_the_tick_it_runs_at(make_runtime, world_id, authority):
    """A target tick already past runs at the next tick, so that is the tick its quota counts:
    many past targets cannot carry more than the quota into one tick. A spawn's reservation checks
    the same count (a spawn over it reserves nothing); replays are never charged."""
    from archetype.commands import QuotaExceededError

    runner = make_runtime("runner")
    for _ in range(5):
        await step(runner, world_id)  # the tick head is 4: every target up to 5 runs at tick 5
    gateway = make_runtime("gateway")
    gateway.scheduler.quota = 2
    await gateway.dispatcher.defer_as(PLAYER, Despawn(world_id=world_id, entity_id=1), at(0), command_id="a")
    await gateway.dispatcher.defer_as(PLAYER, Despawn(world_id=world_id, entity_id=1), at(3), command_id="b")
    await gateway.dispatcher.defer_as(PLAYER, Despawn(world_id=world_id, entity_id=1), at(0), command_id="a")  # a replay
    before = await authority.world_info(world_id)
    for target in (1, 4, 5):
        with pytest.raises(QuotaExceededError, match="running at tick 5"):
            await gateway.dispatcher.defer_as(PLAYER, Despawn(world_id=world_id, entity_id=1), at(target), command_id=f"c{target}")
        with pytest.raises(QuotaExceededError, match="running at tick 5"):
            await gateway.dispatcher.defer_spawn_as(PLAYER, Spawn(world_id=world_id, components=[Health(hp=1)]), at(target),
                                                    command_id=f"s{target}")  # fmt: skip
    assert await authority.world_info(world_id) == before  # nothing admitted, no entity id reserved
    await gateway.dispatcher.defer_as(PLAYER, Despawn(world_id=world_id, entity_id=1), at(6), command_id="next")
    assert await step(runner, world_id) == 0  # tick 5 runs `a` and `b` (rejected: no entity 1)
    # the head is 5 now: a past target runs at tick 6, which holds `next` already
    await gateway.dispatcher.defer_as(PLAYER, Despawn(world_id=world_id, entity_id=1), at(2), command_id="d")
    with pytest.raises(QuotaExceededError, match="running at tick 6"):
        await gateway.dispatcher.defer_as(PLAYER, Despawn(world_id=world_id, entity_id=1), at(0), command_id="e")
