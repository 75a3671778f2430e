"""GetAuditHistory: registered, direct-only, viewer role, every filter, deterministic order,
reads only the projection, and a typed error when the runtime has no audit log."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from archetype.commands import (
    ActorCtx,
    AuditUnavailableError,
    CommandStatus,
    GetAuditHistory,
    NotDurableError,
    PermissionDeniedError,
    Role,
)
from archetype.commands.errors import error_class
from archetype.runtime import Runtime
from tests.audit.conftest import populate

pytestmark = pytest.mark.timeout(120)

VIEWER = ActorCtx(principal="val", roles=frozenset({Role.viewer}))
OPERATOR = ActorCtx(principal="olive", roles=frozenset({Role.operator}))


async def events(rt, actor=OPERATOR, **filters):
    return [(e.command_id, e.event_type) for e in await rt.dispatcher.apply_as(actor, GetAuditHistory(**filters))]


@pytest.fixture
async def projected(rt, clock):
    await populate(rt, clock)
    await rt.audit.project_once()
    return rt


async def test_history_is_the_world_in_event_sequence_order(projected):
    history = await projected.dispatcher.apply(GetAuditHistory(world_id="w1"))
    assert [e.event_seq for e in history] == [1, 2, 3, 4, 5]
    assert [(e.command_id, e.event_type, e.status) for e in history] == [
        ("a", "admitted", CommandStatus.PENDING),
        ("b", "admitted", CommandStatus.PENDING),
        ("a", "applied", CommandStatus.APPLIED),
        ("b", "rejected", CommandStatus.REJECTED),
        ("c", "admitted", CommandStatus.PENDING),
    ]
    assert history == await projected.dispatcher.apply(GetAuditHistory(world_id="w1"))  # deterministic
    assert "does not exist" in history[3].payload and history[0].origin == "local"


async def test_every_filter_narrows_the_history(projected):
    assert await events(projected, world_id="w2") == [("a", "admitted")]
    assert await events(projected, world_id="w1", tick_from=1) == [("b", "admitted"), ("b", "rejected"), ("c", "admitted")]
    assert await events(projected, world_id="w1", tick_to=0) == [("a", "admitted"), ("a", "applied")]
    assert await events(projected, world_id="w1", tick_from=1, tick_to=1) == [("b", "admitted"), ("b", "rejected")]
    assert await events(projected, world_id="w1", tick_from=2, tick_to=4) == []
    assert await events(projected, world_id="w1", principal="alice") == [("a", "admitted"), ("a", "applied")]
    assert await events(projected, world_id="w1", command_id="b") == [("b", "admitted"), ("b", "rejected")]
    assert await events(projected, world_id="w1", status=CommandStatus.PENDING) == [
        ("a", "admitted"), ("b", "admitted"), ("c", "admitted"),
    ]  # fmt: skip
    assert await events(projected, world_id="w1", status="REJECTED", principal="bob", command_id="b") == [("b", "rejected")]
    assert await events(projected, world_id="w1", limit=2) == [("a", "admitted"), ("b", "admitted")]
    assert await events(projected, world_id="w1", after_event_seq=2, limit=2) == [("a", "applied"), ("b", "rejected")]
    assert await events(projected, world_id="nope") == []


async def test_below_operator_a_principal_reads_only_its_own_events(projected):
    alice = ActorCtx(principal="alice", roles=frozenset({Role.player}))
    assert await events(projected, alice, world_id="w1") == [("a", "admitted"), ("a", "applied")]
    assert await events(projected, VIEWER, world_id="w1") == []
    with pytest.raises(PermissionDeniedError):
        await events(projected, alice, world_id="w1", principal="bob")


async def test_history_reads_only_the_projection(rt, clock):
    await populate(rt, clock)
    assert await rt.dispatcher.apply(GetAuditHistory(world_id="w1")) == []  # the ledger has them; the projection not yet
    assert len(await rt.scheduler.history("w1")) == 3
    await rt.audit.project_world("w1")
    assert len(await rt.dispatcher.apply(GetAuditHistory(world_id="w1"))) == 5


async def test_it_is_a_viewer_operation_and_never_durable(projected):
    with pytest.raises(PermissionDeniedError):
        await projected.dispatcher.apply_as(ActorCtx(principal="anon"), GetAuditHistory(world_id="w1"))
    spec = projected.registry.resolve(GetAuditHistory(world_id="w1"))
    assert (spec.permission, spec.durable, spec.name) == (Role.viewer, None, "get_audit_history")
    from archetype.commands import DurableOptions

    with pytest.raises(NotDurableError):
        await projected.dispatcher.defer(GetAuditHistory(world_id="w1"), DurableOptions(tick=0))


async def test_without_an_audit_log_it_fails_with_a_typed_error(tmp_path):
    async with await Runtime.open_local(tmp_path, audit=None) as rt:
        with pytest.raises(AuditUnavailableError) as raised:
            await rt.dispatcher.apply(GetAuditHistory(world_id="w1"))
    assert raised.value.code == "audit_unavailable" and error_class("audit_unavailable") is AuditUnavailableError


@pytest.mark.parametrize(
    "fields",
    [{"world_id": "w1", "tick_from": 3, "tick_to": 2}, {"world_id": "w1", "limit": 0}, {"world_id": "w1", "tick_from": True},
     {"world_id": "w 1"}, {"world_id": "w1", "status": "DONE"}, {"world_id": "w1", "surprise": 1}],
)  # fmt: skip
def test_bad_queries_are_refused_before_any_read(fields):
    with pytest.raises(ValidationError):
        GetAuditHistory(**fields)
