"""Who asked (docs/ledger.md, "Who asked"): every event a ledger call made by an operator or an
admin writes names that principal in its payload's `actor` (null for an in-process call without
one): a retry's `world_retry_requested`, a redrive's `redriven`, a destroy's cancellations, a
fork's `world_forked` on both worlds. A table, held to the ledger calls operators and admins may
make (the runner protocol's roles), so that a call added there must say whom its events name."""

from __future__ import annotations

import inspect
import json

import pytest

from archetype.api.runner_protocol import LEDGER_ROUTE_ROLES
from archetype.commands import Role
from archetype.commands.ledger import Ledger
from archetype.world import Despawn
from tests.conformance.helpers import at, dead_letter, failing_processor, outbox, probe, step


async def retry_world(rt, authority, world_id, actor):
    await rt.dispatcher.defer(probe(world_id, "a"), at(0), command_id="a")
    await failing_processor(rt, world_id, 1)
    with pytest.raises(RuntimeError):
        await step(rt, world_id)
    return lambda: authority.retry_world(world_id, actor)


async def redrive(rt, authority, world_id, actor):
    await dead_letter(rt, world_id, "d")
    return lambda: authority.redrive(world_id, "d", "", None, actor)


async def destroy(rt, authority, world_id, actor):
    for tick in (3, 5):
        await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(tick), command_id=f"open-{tick}")
    return lambda: authority.destroy(world_id, actor)


async def fork_world(rt, authority, world_id, actor):
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), at(3), command_id="open")
    return lambda: authority.fork_world(world_id, -1, "w-asked", "asked", True, actor)


# each operator's call: how to set its world up and make it, and (world, event type) of every event it writes
OPERATOR_CALLS = {
    "retry_world": (retry_world, [("w-conf", "world_retry_requested")]),
    "redrive": (redrive, [("w-conf", "redriven")]),
    "destroy": (destroy, [("w-conf", "cancelled"), ("w-conf", "cancelled")]),
    # a fork's copies of the open commands are `admitted` again in the fork: the commands' own events, no one's call
    "fork_world": (fork_world, [("w-conf", "world_forked"), ("w-asked", "world_forked"), ("w-asked", "admitted")]),
}
# The other ledger calls of the operator and admin roles, and why their events name no actor.
NO_ACTOR = {
    # a runner's own doing (its token is an operator's): hosting, ticks, their health and migrations
    **dict.fromkeys(("register_runner", "leave_runner", "live_runners", "hosted_worlds", "acquire_writer", "claim_world",
                     "renew_world", "release_world", "reserve_entity_ids", "lease", "guard", "publish",
                     "record_tick_failure", "release", "record_components", "migrate_components"), "a runner's"),  # fmt: skip
    # an admission's events name the command's principal, which the row carries
    **dict.fromkeys(("create_world", "reserve_spawn", "admit"), "admission"),
    "prune": "writes no event",
}


def test_every_call_of_an_operator_or_admin_says_whom_its_events_name():
    calls = {m for m, role in LEDGER_ROUTE_ROLES.items() if role in (Role.operator, Role.admin)}
    assert calls == set(OPERATOR_CALLS) | set(NO_ACTOR), "a ledger call of an operator or admin is in neither table"
    for method in OPERATOR_CALLS:
        assert "actor" in inspect.signature(getattr(Ledger, method)).parameters, method


@pytest.mark.parametrize("actor", ["ops Café", None], ids=["operator", "in-process"])
@pytest.mark.parametrize("method", sorted(OPERATOR_CALLS))
async def test_each_event_an_operators_call_writes_names_the_actor(rt, authority, world_id, method, actor):
    set_up, written = OPERATOR_CALLS[method]
    call = await set_up(rt, authority, world_id, actor)
    worlds = sorted({w for w, _ in written})
    before = {w: len(await outbox(authority, w)) if w == world_id else 0 for w in worlds}
    await call()
    events = [(w, e) for w in worlds for e in (await outbox(authority, w))[before[w]:]]
    assert sorted((w, e["event_type"]) for w, e in events) == sorted(written)
    for w, event in events:
        payload = json.loads(event["payload"])
        if event["event_type"] == "admitted":
            assert "actor" not in payload, event
        else:
            assert "actor" in payload and payload["actor"] == actor, (w, event)
