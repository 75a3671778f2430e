"""Edge-hosted worlds: the real WorldObject, in the stand-in runtime, steps its world from its
alarm with the runner's WorldHost and CommandScheduler, by its tick mode (docs/ledger.md, "Tick
modes"); idle worlds set no alarm; a repeated or crashed alarm never repeats a tick; a lockstep
world behind its schedule catches up in one alarm, and makes up no pause; a remote runner is
refused the writer of an edge-hosted world; and an edge-hosted world matches a `serve`-hosted one
byte for byte, in both tick modes, on the stand-in's SQL engine and on the real Durable Object SQL
engine."""

from __future__ import annotations

import asyncio
import logging
import types
from contextlib import asynccontextmanager

import pytest

from archetype.canonical import canonical_json
from archetype.commands import DurableOptions, WorldEdgeHostedError
from archetype.commands.port import ManualClock
from archetype.metrics import Metrics
from archetype.modules import set_up_modules
from archetype.runtime import Runtime
from archetype.world import CreateWorld, Despawn, Spawn
from archetype.world_runner import WorldRunner
from durable_world import DurableObjectAuthority
from durable_world.edge import TICK_INTERVAL_MS
from durable_world.world_object import DELIVERY_DELAY_MS
from tests.component_modules.alpha import Position
from tests.durable_object.edge_scenario import (
    PARITY_WORLD,
    create,
    hosted_snapshot,
    later,
    scripted,
    serve_hosted_snapshot,
    spawn_mover,
)
from tests.server import game
from tests.support.durable_object_standin import FakeQueue, world_namespace
from tests.support.workerd.engine import workerd_sql_engines

pytestmark = pytest.mark.timeout(60)

EDGE = "edge-w"
# a module hosting every world at the edge, with no processors: its worlds tick only for commands
IDLE = types.ModuleType("idle_game")
IDLE.edge_hosted = lambda world_id: True  # type: ignore[attr-defined]
MODES = pytest.mark.parametrize("mode", ["lockstep", "realtime"])


@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def queue():
    return FakeQueue()


def namespace_of(tmp_path, clock, queue, *modules):
    return world_namespace(tmp_path / "objects", clock, queue=queue, modules=modules)


@pytest.fixture
def namespace(tmp_path, clock, queue):
    ns = namespace_of(tmp_path, clock, queue, game)
    yield ns
    ns.close()


@pytest.fixture
def admitter(namespace):
    """Admission only (the Worker's path): a runtime over the Durable Object authority that never steps."""
    return Runtime(DurableObjectAuthority(namespace), owner="gateway")


async def positions(authority, world_id):
    page = await authority.load_state(world_id)
    return {e["entity_id"]: e["components"] for e in page["entities"]}


class Died(BaseException):
    """The object's isolate dying in a handler: nothing in the handler catches it."""


def settled(manifest):
    return [s["command_id"] for s in manifest["settlements"]]


@MODES
async def test_the_alarm_steps_the_world_through_several_ticks(namespace, admitter, clock, mode):
    authority = admitter.authority
    await create(admitter, "edge", EDGE, mode)
    # processors run every tick: creation arms the first tick
    assert namespace.alarm_time(EDGE) == clock.now_ms() + TICK_INTERVAL_MS
    mover = await spawn_mover(admitter, EDGE, "spawn-1")
    for expected_tick in range(3):
        clock.advance(TICK_INTERVAL_MS)
        assert await namespace.run_alarm(EDGE)
        assert (await authority.world_info(EDGE))["tick_head"] == expected_tick
        assert namespace.alarm_time(EDGE) == clock.now_ms() + TICK_INTERVAL_MS  # re-armed for the next tick
    # spawned at tick 0 (the processor moves it that tick too), moved by (1, 2) on each of 3 ticks
    assert '"x":3.0' in (await positions(authority, EDGE))[mover] and '"y":6.0' in (await positions(authority, EDGE))[mover]
    assert (await admitter.scheduler.command(EDGE, "spawn-1")).status == "APPLIED"


@MODES
async def test_an_idle_world_sets_no_alarm_and_an_admission_re_arms_it(tmp_path, clock, queue, mode):
    ns = namespace_of(tmp_path, clock, queue, IDLE)
    try:
        rt = Runtime(DurableObjectAuthority(ns), owner="gateway")
        world = "w-idle"
        await create(rt, "idle", world, mode)
        assert ns.alarm_time(world) is None  # no processors, no command: an idle world costs nothing
        await ns.storage(world).setAlarm(clock.now_ms() + 60_000)  # something later is armed
        await rt.dispatcher.defer(Despawn(world_id=world, entity_id=5), DurableOptions(tick=0), command_id="d-1")
        assert ns.alarm_time(world) == clock.now_ms() + TICK_INTERVAL_MS  # the command is due sooner: re-armed
        clock.advance(TICK_INTERVAL_MS)
        assert await ns.run_alarm(world)
        assert (await rt.scheduler.command(world, "d-1")).status == "REJECTED"  # no entity 5: settled, once
        assert [m["event_type"] for m in queue.messages] == ["admitted", "rejected"]  # audit shared the alarm
        assert ns.alarm_time(world) is None  # nothing open, nothing unsent: idle again
    finally:
        ns.close()


async def test_an_idle_realtime_world_sleeps_until_a_later_command_is_due_and_steps_straight_to_its_tick(
        tmp_path, clock, queue):  # fmt: skip
    ns = namespace_of(tmp_path, clock, queue, IDLE)
    try:
        rt = Runtime(DurableObjectAuthority(ns), owner="gateway")
        world = "w-later"
        await create(rt, "idle", world, "realtime")
        created = clock.now_ms()
        await rt.dispatcher.defer(Despawn(world_id=world, entity_id=5), DurableOptions(tick=4), command_id="d-4")
        assert ns.alarm_time(world) == created + DELIVERY_DELAY_MS  # the admitted event's delivery comes first
        clock.advance(2 * TICK_INTERVAL_MS)
        ns.evict(world)  # an evicted object reads the same clock from the ledger
        assert await ns.run_alarm(world)  # delivers; the tick is not due: nothing is stepped
        assert (await rt.authority.world_info(world))["tick_head"] == -1
        # the clock started at creation (tick -1): tick 4 is due five intervals on, and not before
        assert ns.alarm_time(world) == created + 5 * TICK_INTERVAL_MS
        clock.advance(3 * TICK_INTERVAL_MS)
        assert await ns.run_alarm(world)
        assert [m["tick"] for m in await rt.authority.manifests(world)] == [4]  # ticks 0..3 coalesced
        assert (await rt.scheduler.command(world, "d-4")).status == "REJECTED"
        assert ns.alarm_time(world) is None  # nothing open, nothing unsent: idle again
    finally:
        ns.close()


@MODES
async def test_a_repeated_alarm_never_repeats_a_tick(namespace, admitter, clock, mode):
    await create(admitter, "edge", EDGE, mode)
    await spawn_mover(admitter, EDGE, "spawn-1")
    instance = namespace.instance(EDGE)
    clock.advance(TICK_INTERVAL_MS)
    await instance.alarm({"retryCount": 0, "isRetry": False})
    await instance.alarm({"retryCount": 1, "isRetry": True})  # the runtime delivered it again
    assert [m["tick"] for m in await admitter.authority.manifests(EDGE)] == [0]
    clock.advance(TICK_INTERVAL_MS)
    await instance.alarm({"retryCount": 0, "isRetry": False})
    await instance.alarm({"retryCount": 1, "isRetry": True})
    manifests = await admitter.authority.manifests(EDGE)
    assert [m["tick"] for m in manifests] == [0, 1]
    assert len({m["commit_token"] for m in manifests}) == 2
    assert [settled(m) for m in manifests] == [["spawn-1"], []]


@MODES
async def test_a_crash_between_publish_and_re_arm_runs_the_next_tick_not_the_same_one(namespace, admitter, clock, mode):
    await create(admitter, "edge", EDGE, mode)
    mover = await spawn_mover(admitter, EDGE, "spawn-1")
    storage = namespace.storage(EDGE)
    real_set_alarm = storage.setAlarm
    armed = []

    async def die_on_re_arm(at, options=None):
        armed.append(at)
        if len(armed) == 2:  # the first is the fallback the handler arms before its work
            storage.setAlarm = real_set_alarm
            raise Died("the object died after its tick published")
        await real_set_alarm(at, options)

    storage.setAlarm = die_on_re_arm
    clock.advance(TICK_INTERVAL_MS)
    with pytest.raises(Died):
        await namespace.run_alarm(EDGE)
    assert (await admitter.authority.world_info(EDGE))["tick_head"] == 0  # tick 0 published
    assert namespace.alarm_time(EDGE) == armed[0]  # the fallback armed before the tick fires
    namespace.evict(EDGE)  # the retry finds a fresh object: it reloads the world from the ledger
    assert await namespace.run_alarm(EDGE)  # the retry, at once: tick 1 is not due yet
    assert [m["tick"] for m in await admitter.authority.manifests(EDGE)] == [0]
    clock.advance(TICK_INTERVAL_MS)
    assert await namespace.run_alarm(EDGE)
    manifests = await admitter.authority.manifests(EDGE)
    assert [(m["tick"], settled(m)) for m in manifests] == [(0, ["spawn-1"]), (1, [])]
    assert '"x":2.0' in (await positions(admitter.authority, EDGE))[mover]  # moved on ticks 0 and 1, no more


async def test_a_call_served_while_the_alarm_handler_awaits_keeps_the_alarm_it_armed(tmp_path, clock):
    """workerd lets a call in while the handler awaits the queue (the stand-in's gate would not: the
    queue makes the call itself here): an admission into the idle world, then, arms its tick, and
    the handler's own re-arm, computed before it, must not clear that."""
    admissions = []

    class Interleaving(FakeQueue):
        async def sendBatch(self, messages, options=None):
            await super().sendBatch(messages, options)
            while admissions:
                await admissions.pop()()

    ns = namespace_of(tmp_path, clock, Interleaving(), IDLE)
    try:
        rt = Runtime(DurableObjectAuthority(ns), owner="gateway")
        world = await rt.dispatcher.apply(CreateWorld(name="idle", world_id="w-between", tick_mode="realtime",
                                                        tick_interval_ms=TICK_INTERVAL_MS))  # fmt: skip
        created = clock.now_ms()
        await rt.dispatcher.defer(Despawn(world_id=world, entity_id=5), DurableOptions(tick=0), command_id="d-0")
        payload = canonical_json({"entity_id": 6, "operation": "despawn", "world_id": world})
        row = {"command_id": "d-5", "schema_version": 1, "scheduled_tick": 5, "priority": 0, "operation": "despawn",
               "payload": payload, "principal": None, "origin": "gateway", "max_attempts": 3,
               "reserved_entity_id": None, "request_digest": None}  # fmt: skip
        admissions.append(lambda: ns.instance(world).admit({"world_id": world, "commands": [row]}))
        clock.advance(TICK_INTERVAL_MS)
        assert await ns.run_alarm(world)  # steps d-0; its delivery lets the admission of d-5 in
        assert (await rt.scheduler.command(world, "d-5")).status == "PENDING"
        assert ns.alarm_time(world) == created + 6 * TICK_INTERVAL_MS  # tick 5 of the idle world's clock
        clock.advance(5 * TICK_INTERVAL_MS)
        assert await ns.run_alarm(world)
        assert (await rt.scheduler.command(world, "d-5")).status == "REJECTED"  # stepped: no entity 6
    finally:
        ns.close()


def flaky_module(failing: list[str]) -> types.ModuleType:
    """Every world at the edge, with a processor that raises while `failing` holds an error."""

    def flaky(world, tick, entity_id, components):
        if failing:
            raise RuntimeError(failing[0])

    hooked = types.ModuleType("flaky_game")
    hooked.edge_hosted = lambda world_id: True  # type: ignore[attr-defined]
    hooked.setup = lambda rt: rt.worlds.on_load.append(lambda w: w.add_processor(flaky, Position))  # type: ignore[attr-defined]
    return hooked


@asynccontextmanager
async def flaky_world(tmp_path, clock, queue, world, mode, failing: list[str]):
    """(namespace, gateway runtime) of an edge-hosted `world` whose processor raises while `failing`
    holds an error, with a spawn `s-1` due at tick 0."""
    ns = namespace_of(tmp_path, clock, queue, flaky_module(failing))
    try:
        rt = Runtime(DurableObjectAuthority(ns), owner="gateway")
        await create(rt, "flaky", world, mode)
        await rt.dispatcher.defer_spawn(Spawn(world_id=world, components=[Position(x=0, y=0)]), DurableOptions(tick=0),
                                        command_id="s-1")  # fmt: skip
        yield ns, rt
    finally:
        ns.close()


@pytest.mark.parametrize(("mode", "ticks"), [("realtime", [1]), ("lockstep", [0, 1])])
async def test_a_failing_tick_is_retried_from_the_published_state(tmp_path, clock, queue, mode, ticks):
    """The clock went on meanwhile: a realtime world coalesces tick 0; a lockstep one runs it on the
    retry, and tick 1 (due by then too) back to back."""
    failing = ["the processor's bug"]
    world = "w-flaky"
    async with flaky_world(tmp_path, clock, queue, world, mode, failing) as (ns, rt):
        clock.advance(TICK_INTERVAL_MS)
        assert await ns.run_alarm(world)  # the processor raises: the tick is discarded whole ...
        assert (await rt.authority.world_info(world))["tick_head"] == -1
        assert ns.alarm_time(world) is not None  # ... and the alarm re-armed, not spent
        failing.clear()
        clock.advance(TICK_INTERVAL_MS)
        assert await ns.run_alarm(world)
        assert [m["tick"] for m in await rt.authority.manifests(world)] == ticks
        assert (await rt.scheduler.command(world, "s-1")).status == "APPLIED"


@MODES
async def test_a_tick_that_keeps_failing_backs_off_as_on_a_runner_and_the_world_says_so(tmp_path, clock, queue, caplog, mode):
    """The runner's rule (docs/ledger.md, "World health"): each retry waits 0.1 s * 2^(attempts-1),
    at most 30 s, on the ledger's clock; the world is STALLED, with its error and attempts, until a
    tick publishes; the stall logs one line when it starts (then at most one every 30 s) and one when
    it ends; and the next stall backs off from the first delay again."""
    failing = ["the processor's bug"]
    world = "w-failing"
    async with flaky_world(tmp_path, clock, queue, world, mode, failing) as (ns, rt):
        clock.advance(TICK_INTERVAL_MS)
        started = clock.now_ms()

        async def failed_alarm() -> int:
            """Fire the alarm (its tick fails); answer the pause until the next one."""
            assert await ns.run_alarm(world)
            return ns.alarm_time(world) - clock.now_ms()

        with caplog.at_level(logging.WARNING, logger="archetype.worlds"):
            pauses = []
            for _ in range(11):
                pauses.append(await failed_alarm())
                clock.advance(pauses[-1] if len(pauses) < 11 else 1)  # the last pause: 1 ms into it
            # the backoff in milliseconds, its end rounded up to the alarm's whole milliseconds
            assert pauses == pytest.approx([min(30_000, 100 * 2**n) for n in range(11)], abs=1)
            info = await rt.authority.world_info(world)
            assert (info["health"], info["failed_attempts"]) == ("STALLED", 11)
            assert "the processor's bug" in info["health_error"]
            assert (await rt.authority.world_info(world))["tick_head"] == -1
            # an alarm that comes within the backoff (armed by an admission) does not try the tick
            await rt.dispatcher.defer(Despawn(world_id=world, entity_id=99), DurableOptions(tick=0), command_id="d-99")
            assert ns.alarm_time(world) <= clock.now_ms() + DELIVERY_DELAY_MS
            assert await ns.run_alarm(world)
            assert (await rt.authority.world_info(world))["failed_attempts"] == 11
            # an operator's retry is tried by the alarm its call arms (the host asks the ledger at most
            # once a second, RETRY_CHECK_S), with the backoff from its first delay
            clock.advance(1_000)
            await rt.authority.retry_world(world)
            assert ns.alarm_time(world) <= clock.now_ms()
            assert await failed_alarm() == pytest.approx(100, abs=1)
            failing.clear()
            clock.advance(100)
            assert await ns.run_alarm(world)  # fixed: the retry publishes
            info = await rt.authority.world_info(world)
            assert (info["health"], info["failed_attempts"], info["tick_head"] >= 0) == ("ACTIVE", 0, True)
            assert (await rt.scheduler.command(world, "s-1")).status == "APPLIED"
            assert ns.alarm_time(world) <= clock.now_ms() + TICK_INTERVAL_MS  # back on the world's clock
        lines = [r for r in caplog.records if r.name == "archetype.worlds" and "w-failing" in r.getMessage()]
        assert [r.levelno for r in lines if "failed" in r.getMessage() and "still" not in r.getMessage()
                and "recovered" not in r.getMessage()] == [logging.ERROR]  # fmt: skip
        assert len([r for r in lines if "recovered" in r.getMessage()]) == 1
        assert len([r for r in lines if "still" in r.getMessage()]) <= (clock.now_ms() - started) // 30_000 + 1
        failing.append("broken again")
        clock.advance(TICK_INTERVAL_MS)
        assert await failed_alarm() == pytest.approx(100, abs=1)  # a new stall starts from the first delay


async def test_a_remote_runner_is_refused_an_edge_hosted_world_and_the_edge_leaves_runner_worlds(namespace, admitter):
    authority = admitter.authority
    await admitter.dispatcher.apply(CreateWorld(name="edge", world_id=EDGE))
    await admitter.dispatcher.apply(CreateWorld(name="runner", world_id="w-runner"))
    epoch = (await authority.world_info(EDGE))["writer_epoch"]
    runner = Runtime(authority, owner="cpython-runner")
    with pytest.raises(WorldEdgeHostedError):
        await runner.worlds.step(EDGE)
    leased = Runtime(authority, owner="leased-runner", world_lease_ms=10_000)  # a runner under world leases
    with pytest.raises(WorldEdgeHostedError):  # never claims an edge-hosted world: the object hosts it
        await leased.worlds.step(EDGE)
    info = await authority.world_info(EDGE)
    assert (info["writer_epoch"], info["host_owner"]) == (epoch, None)  # refused before anything changed

    await spawn_mover(admitter, "w-runner", "spawn-r")  # arms audit delivery only
    assert await namespace.run_alarm("w-runner")
    assert (await authority.world_info("w-runner"))["tick_head"] == -1  # the object never steps it
    set_up_modules(runner, [game])
    await runner.worlds.step("w-runner")  # ... its runner does
    assert (await authority.world_info("w-runner"))["tick_head"] == 0


async def test_a_runner_logs_an_edge_hosted_world_once_and_leaves_it_alone_until_the_next_sweep(
        namespace, admitter, clock, caplog):  # fmt: skip
    """`archetype runner` against a deployment with edge-hosted worlds: it used to try every pass
    and log a `world_edge_hosted` warning each time."""
    caplog.set_level(logging.INFO, logger="archetype.serve")
    await admitter.dispatcher.apply(CreateWorld(name="edge", world_id=EDGE))
    await spawn_mover(admitter, EDGE, "later", tick=1_000)  # open: the world is in the due index
    runtime = Runtime(DurableObjectAuthority(namespace), owner="remote-runner")
    set_up_modules(runtime, [game])
    runner = WorldRunner(runtime, runtime.authority, Metrics(), tick_rate=1, clock=clock)  # type: ignore[arg-type]
    asked = []
    acquire = runtime.authority.acquire_writer

    async def counted(world_id, *args, **kwargs):
        asked.append(world_id)
        return await acquire(world_id, *args, **kwargs)

    runtime.authority.acquire_writer = counted  # type: ignore[method-assign]
    stop = asyncio.Event()
    for sweep in range(2):
        await runner.sweep(stop)
        for _ in range(5):
            clock.advance(1_000_000)  # every pass finds the command due
            await runner.run_pass(stop)
        assert asked.count(EDGE) == sweep + 1  # once per sweep, not once per pass
    lines = [r for r in caplog.records if EDGE in r.getMessage()]
    assert [(r.levelname, "Durable Object" in r.getMessage()) for r in lines] == [("INFO", True)]


@MODES
@pytest.mark.parametrize("engine", ["standin", "workerd"])
async def test_an_edge_hosted_world_matches_a_serve_hosted_one_byte_for_byte(tmp_path, engine, mode):
    """On the stand-in's SQL engine and on the real Durable Object SQL engine (workerd)."""
    served = await serve_hosted_snapshot(tmp_path / "serve", tick_mode=mode)
    clock, queue = ManualClock(), FakeQueue()
    sql_engine = workerd_sql_engines() if engine == "workerd" else None
    ns = world_namespace(tmp_path / "objects", clock, queue=queue, modules=(game,), sql_engine=sql_engine)
    try:
        edge = Runtime(DurableObjectAuthority(ns), owner="gateway")
        await scripted(edge, PARITY_WORLD, lambda: ns.run_alarm(PARITY_WORLD), clock, mode)
        assert (await edge.authority.world_info(PARITY_WORLD))["tick_head"] == 3
        assert queue.messages  # the alarms delivered the audit stream
        assert await hosted_snapshot(edge.authority, PARITY_WORLD, queue.messages) == served
    finally:
        ns.close()


@MODES
@pytest.mark.parametrize("engine", ["standin", "workerd"])
@pytest.mark.parametrize("module", [game, IDLE], ids=["processors", "no-processors"])
async def test_commands_due_ticks_later_match_serve_byte_for_byte_across_a_restart(tmp_path, engine, module, mode):
    """A command due three and six ticks on, with and without processors, the object evicted and
    `serve` restarted between; the edge's alarms fire early too (the stand-in fires whatever is
    set when asked), which steps nothing. Without processors a realtime world runs the commands'
    ticks only; a lockstep one every tick up to the last command's."""
    world_id = "edge-later"
    served = await serve_hosted_snapshot(tmp_path / "serve", world_id, later, module, mode)
    clock, queue = ManualClock(), FakeQueue()
    sql_engine = workerd_sql_engines() if engine == "workerd" else None
    ns = world_namespace(tmp_path / "objects", clock, queue=queue, modules=(module,), sql_engine=sql_engine)
    try:

        async def alarm(restart: bool = False) -> None:
            if restart:
                ns.evict(world_id)
            await ns.run_alarm(world_id)

        edge = Runtime(DurableObjectAuthority(ns), owner="gateway")
        await later(edge, world_id, alarm, clock, mode)
        ticks = [m["tick"] for m in await edge.authority.manifests(world_id)]
        assert ticks == (list(range(10)) if module is game else [0, 3, 6] if mode == "realtime" else list(range(7)))
        assert await hosted_snapshot(edge.authority, world_id, queue.messages) == served
    finally:
        ns.close()


async def test_an_idle_lockstep_world_runs_every_tick_up_to_a_later_command_then_sleeps(tmp_path, clock, queue):
    ns = namespace_of(tmp_path, clock, queue, IDLE)
    try:
        rt = Runtime(DurableObjectAuthority(ns), owner="gateway")
        world = "w-steps"
        await create(rt, "idle", world, "lockstep")
        created = clock.now_ms()
        await rt.dispatcher.defer(Despawn(world_id=world, entity_id=5), DurableOptions(tick=3), command_id="d-3")
        alarms = []
        for _ in range(4):
            clock.advance(TICK_INTERVAL_MS)
            assert await ns.run_alarm(world)
            alarms.append(ns.alarm_time(world))
        manifests = await rt.authority.manifests(world)
        assert [(m["tick"], settled(m)) for m in manifests] == [(0, []), (1, []), (2, []), (3, ["d-3"])]  # the empty ones too
        # one tick an interval, each armed for the next; then nothing open, nothing unsent: idle
        assert alarms == [created + 2 * TICK_INTERVAL_MS, created + 3 * TICK_INTERVAL_MS, created + 4 * TICK_INTERVAL_MS, None]
    finally:
        ns.close()


async def test_a_lockstep_world_behind_its_schedule_catches_up_in_one_alarm_and_makes_up_no_pause(tmp_path, clock, queue):
    """Tick 0 takes two and a half intervals: the alarm runs ticks 1 and 2 (both due meanwhile) back
    to back, and tick 2's lag says how late it was. After an hour of nothing (a pause), one tick
    runs, due when it ran, and the next one interval later: the hour is not run as ticks."""
    slow = [int(2.5 * TICK_INTERVAL_MS)]

    def work(world, tick, entity_id, components):
        if slow:
            clock.advance(slow.pop())

    hooked = types.ModuleType("slow_game")
    hooked.edge_hosted = lambda world_id: True  # type: ignore[attr-defined]
    hooked.setup = lambda rt: rt.worlds.on_load.append(lambda w: w.add_processor(work, Position))  # type: ignore[attr-defined]
    ns = namespace_of(tmp_path, clock, queue, hooked)
    try:
        rt = Runtime(DurableObjectAuthority(ns), owner="gateway")
        world = "w-slow"
        await create(rt, "slow", world, "lockstep")
        created = clock.now_ms()
        await rt.dispatcher.defer_spawn(Spawn(world_id=world, components=[Position(x=0, y=0)]), DurableOptions(tick=0),
                                        command_id="s-1")  # fmt: skip
        clock.advance(TICK_INTERVAL_MS)
        assert await ns.run_alarm(world)
        info = await rt.authority.world_info(world)
        assert [m["tick"] for m in await rt.authority.manifests(world)] == [0, 1, 2]
        assert (info["clock_ms"] - created, info["tick_lag_ms"]) == (3 * TICK_INTERVAL_MS, TICK_INTERVAL_MS // 2)
        assert ns.alarm_time(world) == created + 4 * TICK_INTERVAL_MS  # back on schedule
        clock.advance(3_600_000)
        assert await ns.run_alarm(world)
        info = await rt.authority.world_info(world)
        assert (info["tick_head"], info["clock_ms"], info["tick_lag_ms"]) == (3, clock.now_ms(), 0)
        assert ns.alarm_time(world) == clock.now_ms() + TICK_INTERVAL_MS
    finally:
        ns.close()
