"""Idle worlds cost nothing: `archetype serve`'s runner steps only the worlds that have work
(docs/ledger.md, *Idle worlds*)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import types
from collections import Counter

from archetype.commands import DurableOptions
from archetype.commands.clock import TickClock
from archetype.commands.port import ManualClock
from archetype.metrics import Metrics
from archetype.runtime import Runtime
from archetype.world import CreateWorld, Spawn
from archetype.world_runner import WorldRunner
from local_catalog import CATALOG_FILE, open_local_authority
from tests.component_modules.alpha import Health

TICK_RATE = 50.0
INTERVAL_MS = 20  # the worlds' own: the runner's passes are as fine


def catalog_rows(path) -> dict[str, int]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("ticks", "commands", "outbox")}


@contextlib.asynccontextmanager
async def running(tmp_path, setup=None):
    catalog = open_local_authority(tmp_path)
    calls: Counter[str] = Counter()
    rpc = catalog.rpc

    async def counted(method, arguments):
        calls[method] += 1
        return await rpc(method, arguments)

    catalog.rpc = counted  # type: ignore[method-assign]
    rt = Runtime(catalog, owner="idle-test", audit=None)
    if setup is not None:
        setup(rt)
    runner = WorldRunner(rt, catalog, Metrics(), TICK_RATE)
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    try:
        yield rt, runner, calls
    finally:
        stop.set()
        await task
        await rt.close()


async def wait_until(predicate, seconds: float = 60.0) -> None:
    """Generous: on a busy machine the runner's passes come late and few."""
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        if await predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


async def test_an_idle_world_writes_nothing_and_a_due_command_wakes_it(tmp_path):
    async with running(tmp_path) as (rt, runner, calls):
        for i in range(20):
            await rt.dispatcher.apply(CreateWorld(name=f"w{i}", world_id=f"w{i}"))
        before = catalog_rows(tmp_path / CATALOG_FILE)
        passes = runner.passes

        async def ten_passes() -> bool:
            return runner.passes - passes >= 10

        await wait_until(ten_passes)
        assert catalog_rows(tmp_path / CATALOG_FILE) == before == {"ticks": 0, "commands": 0, "outbox": 0}
        assert calls["list_worlds"] <= 1 and calls["lease"] == calls["publish"] == 0  # no walk, no tick

        spawned = await rt.dispatcher.defer_spawn(Spawn(world_id="w3", components=[Health(hp=1)]), DurableOptions(tick=0))

        async def applied() -> bool:
            return (await rt.scheduler.history("w3"))[0].status == "APPLIED"

        await wait_until(applied)
        await asyncio.sleep(0.5)
        rows = catalog_rows(tmp_path / CATALOG_FILE)
        assert rows["ticks"] == 1, "the woken world ticked once, its neighbours never"
        assert [m["world_id"] for m in await rt.authority.manifests("w3")] == ["w3"]
        assert (await rt.authority.load_state("w3"))["entities"][0]["entity_id"] == spawned.entity_id


async def test_a_sleeping_realtime_world_keeps_its_clock_and_coalesces_the_empty_ticks(tmp_path):
    async with running(tmp_path) as (rt, _, _):
        await rt.dispatcher.apply(CreateWorld(name="late", world_id="late", tick_mode="realtime", tick_interval_ms=INTERVAL_MS))
        await rt.dispatcher.defer(Spawn(world_id="late", components=[Health(hp=1)]), DurableOptions(tick=25))

        async def applied() -> bool:
            return (await rt.scheduler.history("late"))[0].status == "APPLIED"

        await wait_until(applied)
        (tick,) = [m["tick"] for m in await rt.authority.manifests("late")]
        # it slept until its clock reached tick 25 (about 25 passes), then ran one tick: no empty
        # manifests. Tick 25 itself, or a later one where the pass that saw the clock there came late
        assert tick >= 25


async def test_a_lockstep_world_runs_every_tick_up_to_its_command_then_idles(tmp_path):
    """No processors: it ticks only while a command is open, but every tick up to the command's
    (the empty ones published too: a lockstep world's manifests have no gap), then writes nothing."""
    async with running(tmp_path) as (rt, _, calls):
        await rt.dispatcher.apply(CreateWorld(name="steps", world_id="steps", tick_interval_ms=INTERVAL_MS))
        await rt.dispatcher.defer(Spawn(world_id="steps", components=[Health(hp=1)]), DurableOptions(tick=25))

        async def applied() -> bool:
            return (await rt.scheduler.history("steps"))[0].status == "APPLIED"

        await wait_until(applied)
        assert [m["tick"] for m in await rt.authority.manifests("steps", limit=100)] == list(range(26))
        assert (await rt.scheduler.history("steps"))[0].applied_tick == 25
        published = calls["publish"]
        await asyncio.sleep(0.5)  # idle again: no command open, no processor
        assert calls["publish"] == published
        assert (await rt.authority.world_info("steps"))["tick_head"] == 25


async def test_a_world_with_processors_ticks_every_pass(tmp_path):
    def setup(rt: Runtime) -> None:
        rt.worlds.on_load.append(lambda world: world.add_processor(lambda *_: None, Health))

    async with running(tmp_path, setup) as (rt, runner, _):
        await rt.dispatcher.apply(CreateWorld(name="busy", world_id="busy", tick_interval_ms=INTERVAL_MS))
        await runner.sweep(asyncio.Event())  # a new world is seen at the next sweep; here at once

        async def five_ticks() -> bool:  # with no command: its processor is its work
            return len(await rt.authority.manifests("busy")) >= 5

        await wait_until(five_ticks)


def test_a_pass_reads_the_worlds_clocks_on_its_grid_so_wake_up_jitter_moves_no_step():
    clock = ManualClock()
    runtime = types.SimpleNamespace(worlds=types.SimpleNamespace(on_load=[]))
    runner = WorldRunner(runtime, None, Metrics(), tick_rate=10, clock=clock)  # type: ignore[arg-type]
    start = clock.now_ms()
    assert runner.pass_ms() == start  # the first pass starts the grid
    times = []
    for late in (3, 0, 99, 1):  # each pass woke up a little late (never a whole interval)
        clock.advance(100 - (clock.now_ms() - start) % 100 + late)
        times.append(runner.pass_ms() - start)
    assert times == [100, 200, 300, 400]
    # a world created 99 ms after the grid's start: its tick 0 falls due at the pass that follows it,
    # and each later pass reaches exactly one more tick of its clock, whatever the jitter
    world = TickClock(-1, start + 99, runner.interval_ms)
    assert [world.tick_at(start + t) for t in times] == [-1, 0, 1, 2]
