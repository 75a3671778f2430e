"""Every ledger method, called through a Durable Object host, leaves the object's alarm armed for
what the call did, even with an alarm set for later: a call that appended an outbox event arms
delivery (within DELIVERY_DELAY_MS), a call that made a command of an edge-hosted world due sooner
arms its step by the time it is due; and the alarm, fired, does it (the events reach the queue, the
command is settled).

Without an audit queue bound, events need no alarm, but a due command still does (the table runs
both ways on the stand-in: with a queue, the delivery alarm also wakes a world for its tick).

`ROWS` has one row per method of `LEDGER_METHODS` and `CATALOG_METHODS` (a method without one fails the table's test):
on which world it is called (an idle edge-hosted world, a runner-hosted one, none), how to put that
world where the method does its writing (`prepare`), the call itself, and what the call does
(`effect`), which the test observes, never assumes: the ledger's watermark (`event`: it appended
events) and next due tick (`due`: a command became due sooner). A method that starts appending
events or opening commands fails its row until the row says so, and with it the arming check.

A `Host` is the object's runtime: the stand-in (tests/durable_object/test_arming.py) or workerd
(tests/workerd/test_edge_alarms.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from archetype.commands.authority import Authority
from archetype.commands.port import ManualClock
from archetype.commands.scheduler import schema_row
from archetype.runtime import Runtime
from durable_world.world_object import DELIVERY_DELAY_MS
from tests.component_modules.alpha import Health, Position
from tests.conformance.test_component_schemas import raw_spawn, value
from tests.server.game import IDLE_PREFIX

OWNER, LEASE_MS = "runner-x", 60_000
FIRES = 8  # alarms fired at most to serve what a call left: delivery, then the ticks up to the due one
LATER_MS = 86_400_000  # an alarm set before the call, far ahead (for a step due tomorrow): the call brings it forward


@dataclass
class Host:
    """An object runtime under test: its authority on `clock`, and its alarms (each world's object)."""

    authority: Authority
    clock: ManualClock
    tick_interval_ms: int
    alarm_at: Callable[[str], Awaitable[int | None]]
    set_alarm: Callable[[str, int], Awaitable[None]]
    fire: Callable[[str], Awaitable[bool]]
    queue: bool = True  # an audit queue is bound (without one, events wait for a projector to read them)


@dataclass
class Case:
    host: Host
    world_id: str
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def authority(self) -> Authority:
        return self.host.authority

    async def admitted(self, command_id: str = "c-1", tick: int = 0, max_attempts: int = 3) -> int:
        await self.authority.record_components(self.world_id, [schema_row(Position)])
        row = {**raw_spawn(self.world_id, command_id, value(Position, x=1.0, y=2.0)), "scheduled_tick": tick,
               "max_attempts": max_attempts}  # fmt: skip
        (admitted,) = await self.authority.admit(self.world_id, [row])  # type: ignore[list-item]
        return admitted["sequence"]

    async def writer(self) -> int:
        self.state["epoch"] = (await self.authority.acquire_writer(self.world_id))["writer_epoch"]
        return self.state["epoch"]

    async def leased(self, session: str = "s-a") -> None:
        await self.authority.lease(self.world_id, OWNER, session, self.state["epoch"], 0, 10, LEASE_MS)

    async def guarded(self, command_id: str = "c-1") -> None:
        """`command_id`, with one attempt, leased and guarded by session s-a of a runner writing at
        the world's epoch, which dies there: the next lease by another session charges it."""
        sequence = await self.admitted(command_id, max_attempts=1)
        self.state["epoch"] = (await self.authority.world_info(self.world_id))["writer_epoch"]
        await self.leased("s-a")
        await self.authority.guard(self.world_id, OWNER, "s-a", self.state["epoch"], sequence)

    async def dead_letter(self, command_id: str) -> None:
        """`command_id` crashed its runner on its only attempt (how a runner that held this world,
        before its module declared it edge-hosted, left it)."""
        await self.guarded(command_id)
        await self.leased("s-b")


Step = Callable[[Case], Awaitable[Any]]


async def nothing(case: Case) -> None:
    return None


def rpc(method: str, **arguments: Any) -> Step:
    """Call `method` with these arguments (and the case's world_id, unless None is given)."""

    async def call(case: Case) -> Any:
        found = {"world_id": case.world_id, **arguments}
        return await case.authority.rpc(method, {k: v for k, v in found.items() if v is not None})

    return call


@dataclass(frozen=True)
class Row:
    world: str  # "edge": an idle edge-hosted world; "runner": a runner-hosted one; "new": created by the call; "none"
    call: Step
    prepare: Step = nothing
    effect: frozenset[str] = frozenset()


def effect(*names: str) -> frozenset[str]:
    return frozenset(names)


async def _claimed(case: Case) -> None:
    case.state["epoch"] = (await case.authority.claim_world(case.world_id, OWNER, LEASE_MS))["writer_epoch"]


async def _leased(case: Case) -> None:
    case.state["sequence"] = await case.admitted()
    await case.writer()
    await case.leased()


async def _registered(case: Case) -> None:
    await case.authority.register_runner("arming-runner", "i-1", LEASE_MS)


async def _both_schemas(case: Case) -> None:
    await case.authority.record_components(case.world_id, [schema_row(Position), schema_row(Health)])
    await case.writer()


async def _stalled(case: Case) -> None:
    await case.authority.record_tick_failure(case.world_id, OWNER, "s-a", await case.writer(), 0, "the tick failed")


async def _step(case: Case) -> None:
    await Runtime(case.authority, owner=OWNER, lease_ms=LEASE_MS).worlds.step(case.world_id)


def _with(step: Callable[[Case, dict[str, Any]], Awaitable[Any]]) -> Step:
    async def call(case: Case) -> Any:
        return await step(case, case.state)

    return call


ROWS: dict[str, Row] = {
    # reads
    "world_info": Row("edge", rpc("world_info")),
    "list_worlds": Row("edge", rpc("list_worlds", world_id=None)),
    "live_runners": Row("none", rpc("live_runners", world_id=None), _registered),
    "hosted_worlds": Row("runner", rpc("hosted_worlds", world_id=None, owner=OWNER), _claimed),
    "pending_worlds": Row("edge", rpc("pending_worlds", world_id=None), lambda case: case.admitted()),
    "load_state": Row("edge", rpc("load_state")),
    "read_state": Row("edge", rpc("read_state")),
    "command": Row("edge", rpc("command", command_id="c-1"), lambda case: case.admitted()),
    "commands_by_id": Row("edge", rpc("commands_by_id", command_ids=["c-1"]), lambda case: case.admitted()),
    "history": Row("edge", rpc("history"), lambda case: case.admitted()),
    "manifests": Row("edge", rpc("manifests")),
    "read_outbox": Row("edge", rpc("read_outbox"), lambda case: case.admitted()),
    "read_outbox_columns": Row("edge", rpc("read_outbox_columns"), lambda case: case.admitted()),
    "watermark": Row("edge", rpc("watermark")),
    "next_due_tick": Row("edge", rpc("next_due_tick"), lambda case: case.admitted()),
    "components": Row("edge", rpc("components")),
    # worlds, writers and runners
    "create_world": Row("new", rpc("create_world", name="arming")),
    "acquire_writer": Row("runner", rpc("acquire_writer")),
    "claim_world": Row("runner", rpc("claim_world", owner=OWNER, lease_ms=LEASE_MS)),
    "renew_world": Row("runner", _with(lambda case, s: case.authority.renew_world(case.world_id, OWNER, s["epoch"],
                                                                                  LEASE_MS)), _claimed),  # fmt: skip
    "release_world": Row("runner", _with(lambda case, s: case.authority.release_world(case.world_id, OWNER, s["epoch"])),
                         _claimed),  # fmt: skip
    "register_runner": Row("none", rpc("register_runner", world_id=None, runner_id="arming-runner", instance="i-1",
                                       lease_ms=LEASE_MS)),  # fmt: skip
    "leave_runner": Row("none", rpc("leave_runner", world_id=None, runner_id="arming-runner", instance="i-1"),
                        _registered),  # fmt: skip
    # admission
    "reserve_entity_ids": Row("edge", rpc("reserve_entity_ids", count=3)),
    "reserve_spawn": Row("edge", rpc("reserve_spawn", command_id="s-1", principal="pat", request_digest="d" * 64,
                                     scheduled_tick=0)),  # fmt: skip
    "admit": Row("edge", lambda case: case.admitted(tick=2), effect=effect("event", "due")),
    "record_components": Row("edge", rpc("record_components", components=[schema_row(Position)])),
    # the writer's calls
    "lease": Row("runner", lambda case: case.leased("s-b"), lambda case: case.guarded(), effect("event")),  # a crash charged
    "guard": Row("runner", _with(lambda case, s: case.authority.guard(case.world_id, OWNER, "s-a", s["epoch"],
                                                                      s["sequence"])), _leased),  # fmt: skip
    "publish": Row("runner", _step, lambda case: case.admitted(), effect("event")),
    "record_tick_failure": Row("runner", _with(lambda case, s: case.authority.record_tick_failure(
        case.world_id, OWNER, "s-a", s["epoch"], 0, "the tick failed")), lambda case: case.writer(), effect("event")),  # fmt: skip
    "release": Row("runner", _with(lambda case, s: case.authority.release(case.world_id, OWNER, "s-a", s["epoch"])),
                   _leased),  # fmt: skip
    "migrate_components": Row("runner", _with(lambda case, s: case.authority.migrate_components(
        case.world_id, s["epoch"], {"name": "Position", "from_fingerprint": Health.component_fingerprint(),
                                    "to_fingerprint": Position.component_fingerprint()}, [], [])),
        _both_schemas, effect("event")),  # fmt: skip
    # operators
    "redrive": Row("edge", rpc("redrive", command_id="d-1"), lambda case: case.dead_letter("d-1"), effect("event", "due")),
    "retry_world": Row("runner", rpc("retry_world"), _stalled, effect("event")),  # world_retry_requested
    "destroy": Row("edge", rpc("destroy"), lambda case: case.admitted(), effect("event")),
    # the source's world_forked event (the fork's object arms its own: tests/durable_object/test_fork_copy.py)
    "fork_world": Row("edge", lambda case: case.authority.fork_world(case.world_id, -1, f"{case.world_id}-fork", "arming",
                                                                     with_open_commands=True),
                      lambda case: case.admitted(), effect("event")),  # fmt: skip
    # the projector and retention
    "acknowledge_outbox": Row("edge", rpc("acknowledge_outbox", up_to_seq=1), lambda case: case.admitted()),
    "prune": Row("edge", rpc("prune", keep_ticks=1, idempotency_window_ms=0)),
}


class Observed(Authority):
    """The host's authority, noting what each call did to its world and checking the alarm after it."""

    def __init__(self, case: Case) -> None:
        self.case = case
        self.calls: list[tuple[str, frozenset[str]]] = []
        self.armed_for: set[str] = set()

    async def rpc(self, method: str, arguments: dict[str, Any]) -> Any:
        inner, world_id = self.case.authority, self.case.world_id
        exists = method != "create_world" and self.case.state.get("world") is not None
        before = await _ledger_marks(inner, world_id) if exists else (0, None)
        result = await inner.rpc(method, arguments)
        if self.case.state.get("world") is None:
            self.calls.append((method, frozenset()))
            return result
        after = await _ledger_marks(inner, world_id)
        seen = set()
        if after[0] > before[0]:
            seen.add("event")
        if after[1] is not None and (before[1] is None or after[1] < before[1]):
            seen.add("due")
        self.calls.append((method, frozenset(seen)))
        host = self.case.host
        alarm = await host.alarm_at(world_id)
        if "event" in seen and host.queue:
            assert alarm is not None and alarm <= host.clock.now_ms() + DELIVERY_DELAY_MS, (
                f"{method} appended an outbox event and left the alarm at {alarm}"
            )
            self.armed_for.add("event")
        if "due" in seen and self.case.state["world"] == "edge":
            # an idle world's clock starts at its creation, at tick -1 (docs/ledger.md, "Idle worlds")
            due_at = (await inner.world_info(world_id))["created_at"] + (after[1] + 1) * host.tick_interval_ms
            assert alarm is not None and alarm <= due_at, (
                f"{method} made tick {after[1]} of an idle edge-hosted world due at {due_at} and left the alarm at {alarm}"
            )
            self.armed_for.add("due")
        return result


async def _ledger_marks(authority: Authority, world_id: str) -> tuple[int, int | None]:
    """(the last outbox event ever written, the world's next due tick)."""
    return (await authority.watermark(world_id))["committed_seq"], await authority.next_due_tick(world_id)


async def run_row(host: Host, method: str, world_id: str) -> None:
    """Prepare the world, set its alarm a day ahead, make the row's call through `Observed` (which
    checks the alarm after each ledger call), then fire the alarm until it served what the call left."""
    row = ROWS[method]
    world_id = f"{IDLE_PREFIX}{world_id}" if row.world in ("edge", "new") else world_id
    case = Case(host, world_id)
    if row.world in ("edge", "runner"):
        await host.authority.create_world(world_id, f"arming {method}")
        case.state["world"] = row.world
    await row.prepare(case)
    if row.world in ("edge", "runner"):
        await _serve_events_only(case)
        await host.set_alarm(world_id, host.clock.now_ms() + LATER_MS)
    observed = Observed(case)
    if row.world == "new":
        case.state["world"] = "edge"
    await row.call(_observing(case, observed))
    mine = [seen for called, seen in observed.calls if called == method]
    assert mine, f"the {method} row never called {method}: {[called for called, _ in observed.calls]}"
    assert frozenset().union(*mine) == row.effect, f"{method} did {set().union(*mine)}; its row says {set(row.effect)}"
    if case.state.get("world") in ("edge", "runner"):
        await _served(case, observed.armed_for)


def _observing(case: Case, observed: Observed) -> Case:
    """The case, calling through `observed`."""
    watched = Case(case.host, case.world_id, case.state)
    watched.host = dataclasses.replace(case.host, authority=observed)
    return watched


async def _serve_events_only(case: Case) -> None:
    """Acknowledge what the preparation appended, so the call's own events are what is left unsent."""
    watermark = await case.authority.watermark(case.world_id)
    if watermark["pending"]:
        await case.authority.acknowledge_outbox(case.world_id, watermark["committed_seq"])


async def _served(case: Case, armed_for: set[str]) -> None:
    """Fire the world's alarm (the clock moved on past the due tick) until nothing is left unsent
    and, on an edge-hosted world, no command is open; the alarm must have served it."""
    host, world_id = case.host, case.world_id
    if not armed_for:
        return
    if "due" in armed_for:
        due = await host.authority.next_due_tick(world_id)
        assert due is not None
        host.clock.advance((due + 2) * host.tick_interval_ms)
    else:
        host.clock.advance(DELIVERY_DELAY_MS)
    for _ in range(FIRES):
        if not await host.fire(world_id):
            break
        if "due" in armed_for:  # a lockstep world runs its next tick a tick interval after the last one ran
            host.clock.advance(host.tick_interval_ms)
    if host.queue:
        assert (await host.authority.watermark(world_id))["pending"] == 0, "the alarm left events unsent"
    if "due" in armed_for:
        assert await host.authority.next_due_tick(world_id) is None, "the alarm never stepped the due command"
