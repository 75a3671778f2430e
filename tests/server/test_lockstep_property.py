"""A property of lockstep worlds (docs/ledger.md, *Tick modes*), for any plan of passes of the
runner loop, clock jumps, slow processors, failing ticks, restarts and crashes of the runner:

- no gap: the world's manifests are every tick from 0 to its head, and its processor ran once
  in each (a counter it keeps equals the ticks run);
- a command scheduled for tick t runs in tick t (in the next tick when t had already run);
- the interval paces: each tick is due at least one interval after the one before;
- a pause is not made up: a pass runs no more ticks than the time it covers, the lag the world had
  before it and one pause threshold allow, so a restart after a minute runs one tick, not 600.

`serve`'s own runner loop (WorldRunner) drives a local catalog on a ManualClock that the processor
moves to be slow; a restart is a new runtime and runner on the catalog, a crash a runner whose
process vanished mid-tick (nothing closed, its leases left behind). The real-process version, with
`serve` restarted and remote runners SIGKILLed, is tests/crash/test_lockstep_restarts.py.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from archetype.commands import DurableOptions
from archetype.commands.clock import PAUSE_MS
from archetype.commands.port import ManualClock
from archetype.metrics import Metrics
from archetype.runtime import Runtime
from archetype.world import AsyncWorld, CreateWorld, Spawn
from archetype.world_runner import WorldRunner
from tests.component_modules.alpha import Health, Position

WORLD = "sim"
INTERVAL_MS = 100


class Crash(BaseException):
    """The runner's process is gone mid-tick (as SIGKILL would leave it: nothing closed)."""


class Sim:
    """One example: a catalog, the runner stepping it, and what the processor should do next."""

    def __init__(self, directory: Path) -> None:
        self.directory, self.clock = directory, ManualClock()
        self.work_ms = 0  # how far each tick moves the clock: a slow processor
        self.fail_next = self.crash_next = False
        self.rt: Runtime | None = None
        self.runner: WorldRunner | None = None
        self.markers: dict[str, int] = {}  # command id -> the tick it must run in
        self.pass_started_ms = 0

    def count(self, world: AsyncWorld, tick: int, entity_id: int, components: tuple) -> None:
        (health,) = components
        self.clock.advance(self.work_ms)
        if self.crash_next:
            self.crash_next = False
            raise Crash()
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("a processor's bug, fixed at once")
        world.update(entity_id, [Health(hp=health.hp + 1)])

    async def start(self) -> None:
        self.rt = await Runtime.open_local(self.directory, clock=self.clock, audit=None, owner="runner")
        self.rt.worlds.on_load.append(lambda world: world.add_processor(self.count, Health))
        self.runner = WorldRunner(self.rt, self.rt.authority, Metrics(), tick_rate=10, clock=self.clock)  # type: ignore[arg-type]
        self.runner.ticking.add(WORLD)  # as its sweep finds it: the modules give it a processor

    async def run_pass(self) -> None:
        assert self.runner is not None
        self.runner.passes += 1
        self.pass_started_ms = self.clock.now_ms()
        try:
            await self.runner.run_pass(asyncio.Event())
        except Crash:  # gone: nothing given back, its leases are taken over by the next one
            assert self.rt is not None
            await self.rt.authority.close()  # its connection, as the kernel would close it
            await self.start()


OPS = st.one_of(
    st.tuples(st.just("pass")),
    st.tuples(st.just("advance"), st.sampled_from((1, 50, 99, 100, 101, 250, 999, 1_000, 1_101, 2_500, 60_000))),
    st.tuples(st.just("work"), st.sampled_from((0, 0, 30, 100, 250, 1_000))),
    st.tuples(st.just("admit"), st.integers(0, 4)),
    st.tuples(st.just("fail")),
    st.tuples(st.just("crash")),
    st.tuples(st.just("restart")),
)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=st.lists(OPS, min_size=1, max_size=40))
def test_a_lockstep_world_never_skips_a_tick_whatever_its_runners_go_through(plan):
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(run_plan(Path(directory), plan))


async def run_plan(directory: Path, plan: list[tuple]) -> None:
    sim = Sim(directory)
    await sim.start()
    assert sim.rt is not None
    await sim.rt.dispatcher.apply(CreateWorld(name=WORLD, world_id=WORLD, tick_interval_ms=INTERVAL_MS))
    counter = Spawn(world_id=WORLD, components=[Health(hp=0)])  # counted from tick 0 on
    await sim.rt.dispatcher.defer(counter, DurableOptions(tick=0), command_id="counter")
    seen = await sim.rt.authority.world_info(WORLD)
    try:
        for op in plan:
            if op[0] == "pass":
                await sim.run_pass()
            elif op[0] == "advance":
                sim.clock.advance(op[1])
            elif op[0] == "work":
                sim.work_ms = op[1]
            elif op[0] == "admit":
                head = (await sim.rt.authority.world_info(WORLD))["tick_head"]
                command_id = f"marker-{len(sim.markers)}"
                op_ = Spawn(world_id=WORLD, components=[Position(x=len(sim.markers), y=0)])
                await sim.rt.dispatcher.defer(op_, DurableOptions(tick=max(head + op[1], 0)), command_id=command_id)
                sim.markers[command_id] = max(head + op[1], head + 1)  # a past tick: the next one
            elif op[0] == "fail":
                sim.fail_next = True
            elif op[0] == "crash":
                sim.crash_next = True
            elif op[0] == "restart":
                await sim.rt.close()
                await sim.start()
            seen = await check(sim, seen, op)
        # drain: fast ticks, the clock on, until every marker ran
        sim.work_ms, sim.fail_next, sim.crash_next = 0, False, False
        for _ in range(200):
            if not await open_commands(sim):
                break
            sim.clock.advance(INTERVAL_MS)
            await asyncio.sleep(0.11)  # a failed tick's backoff (real time) may hold the world
            await sim.run_pass()
            seen = await check(sim, seen, ("drain",))
        assert not await open_commands(sim), "the markers never ran"
        history = {c.command_id: c for c in await sim.rt.scheduler.history(WORLD, limit=1_000)}
        assert {c: history[c].applied_tick for c in sim.markers} == sim.markers, "a command ran in another tick"
    finally:
        if sim.rt is not None:
            await sim.rt.close()


async def open_commands(sim: Sim) -> bool:
    assert sim.rt is not None
    return any(c.status.value in ("PENDING", "LEASED", "RETRYABLE") for c in await sim.rt.scheduler.history(WORLD, limit=1_000))


async def check(sim: Sim, before: dict, op: tuple) -> dict:
    assert sim.rt is not None
    info = await sim.rt.authority.world_info(WORLD)
    head = info["tick_head"]
    ticks = [m["tick"] for m in await sim.rt.authority.manifests(WORLD, limit=10_000)]
    assert ticks == list(range(head + 1)), f"after {op}: a gap in the manifests {ticks}"
    entities = (await sim.rt.authority.load_state(WORLD))["entities"]
    if head >= 0:
        counter = next(e for e in entities if '"Health"' in e["components"])
        assert f'"hp":{head + 1}' in counter["components"], f"after {op}: the processor did not run once a tick"
    ran = head - before["tick_head"]
    if ran > 0:
        # paced: each tick due at least an interval after the one before, and never after it published
        assert info["clock_ms"] - before["clock_ms"] >= ran * INTERVAL_MS, f"after {op}: ticks closer than the interval"
        assert 0 <= info["tick_lag_ms"]
        if op[0] in ("pass", "drain"):  # no pause made up: the time the pass took, the lag it started with, one pause
            took = sim.clock.now_ms() - sim.pass_started_ms  # the processors' work
            allowed = 1 + (took + before["tick_lag_ms"] + max(INTERVAL_MS, PAUSE_MS)) // INTERVAL_MS
            assert ran <= allowed, f"a pass ran {ran} ticks; at most {allowed} were due without making up a pause"
    return info
