"""Scheduled retention at the edge: the Durable Object's alarm applies the policy `archetype serve`
applies (Ledger.prune with the Worker's KEEP_TICKS / IDEMPOTENCY_WINDOW_MS, every PRUNE_INTERVAL_MS),
bounded per alarm by PRUNE_LIMIT, on the stand-in's SQL engine and on the real DO SQL engine."""

from __future__ import annotations

import types

import pytest

from archetype.commands import DurableOptions
from archetype.commands.port import ManualClock
from archetype.runtime import Runtime
from archetype.world import CreateWorld, Despawn
from durable_world import DurableObjectAuthority
from durable_world.edge import TICK_INTERVAL_MS, Retention
from tests.support.durable_object_standin import FakeQueue, StandinEnv, world_namespace
from tests.support.workerd.engine import workerd_sql_engines

pytestmark = pytest.mark.timeout(120)

IDLE = types.ModuleType("idle_game")  # every world at the edge, no processors: alarms only for work
IDLE.edge_hosted = lambda world_id: True  # type: ignore[attr-defined]
POLICY = {"KEEP_TICKS": "2", "IDEMPOTENCY_WINDOW_MS": "0", "PRUNE_INTERVAL_MS": "60000", "PRUNE_LIMIT": "2"}
WORLD = "w-prune"


async def run_due_alarms(ns, clock) -> int:
    """Fire the world's alarms at their times until none is set; how many ran."""
    ran = 0
    while (at := ns.alarm_time(WORLD)) is not None:
        clock.advance(max(0, at - clock.now_ms()))
        assert await ns.run_alarm(WORLD)
        ran += 1
    return ran


async def despawn(rt, n: int, tick: int) -> None:
    await rt.dispatcher.defer(Despawn(world_id=WORLD, entity_id=999), DurableOptions(tick=tick), command_id=f"d-{n}")


@pytest.mark.parametrize("engine", ["standin", "workerd"])
async def test_the_alarm_prunes_on_serve_s_policy_bounded_per_alarm_and_then_sleeps(tmp_path, engine):
    clock = ManualClock()
    sql_engine = workerd_sql_engines() if engine == "workerd" else None
    ns = world_namespace(tmp_path, clock, queue=FakeQueue(), modules=(IDLE,), sql_engine=sql_engine, variables=POLICY)
    try:
        rt = Runtime(DurableObjectAuthority(ns), owner="gateway")
        authority = rt.authority
        # realtime: d-6, due at a passed tick, runs in the tick the clock reached (docs/ledger.md, "Idle worlds")
        await rt.dispatcher.apply(CreateWorld(name="prune", world_id=WORLD, tick_mode="realtime", tick_interval_ms=1_000))
        for n in range(6):
            await despawn(rt, n, tick=n)
        await run_due_alarms(ns, clock)
        # ticks 0..5 ran; the first alarm pruned (d-0, settled and delivered in it, past a window of 0),
        # and the interval has not passed since: ticks 0..3 are past KEEP_TICKS, but still here
        assert [m["tick"] for m in await authority.manifests(WORLD)] == [0, 1, 2, 3, 4, 5]
        assert [r.command_id for r in await rt.scheduler.history(WORLD)] == ["d-1", "d-2", "d-3", "d-4", "d-5"]

        clock.advance(60_000)  # the interval passed: the next alarm (this admission's) prunes again ...
        await despawn(rt, 6, tick=0)
        at = ns.alarm_time(WORLD)
        clock.advance(max(0, at - clock.now_ms()))
        assert await ns.run_alarm(WORLD)
        head = (await authority.world_info(WORLD))["tick_head"]
        assert head > 5  # d-6 ran in the tick the clock reached
        # ... at most PRUNE_LIMIT rows of each kind in this alarm, and it stays armed to go on
        assert [m["tick"] for m in await authority.manifests(WORLD)] == [2, 3, 4, 5, head]
        assert len(await rt.scheduler.history(WORLD)) == 5 - 2 + 1
        assert ns.alarm_time(WORLD) == clock.now_ms() + 1_000
        # 2 + 2 manifests and 2 + 2 commands more; a prune that removed a full batch goes on once more
        assert await run_due_alarms(ns, clock) == 3
        assert [m["tick"] for m in await authority.manifests(WORLD)] == [head]  # ticks past head - KEEP_TICKS
        assert await rt.scheduler.history(WORLD) == []  # settled, delivered, past the window
        assert ns.alarm_time(WORLD) is None  # nothing left to prune: idle again
    finally:
        ns.close()


def test_the_policy_defaults_to_serve_s_and_a_bad_variable_is_refused():
    assert Retention.of(StandinEnv()) == Retention(keep_ticks=1_000, idempotency_window_ms=86_400_000,
                                                   interval_ms=60_000, limit=1_000)  # fmt: skip
    assert Retention.of(StandinEnv(**POLICY)) == Retention(2, 0, 60_000, 2)
    for name, value in (("KEEP_TICKS", "0"), ("PRUNE_LIMIT", "100001"), ("IDEMPOTENCY_WINDOW_MS", "a day")):
        with pytest.raises(ValueError, match=name):
            Retention.of(StandinEnv(**{name: value}))
    assert TICK_INTERVAL_MS == 1_000
