"""The tick clock rule every host of a world steps it by (archetype.commands.clock; docs/ledger.md,
"Tick modes")."""

from __future__ import annotations

from archetype.commands.clock import PAUSE_MS, TickClock

# a realtime world created at t=10 000 ms, ticking every 100 ms: tick 0 is due at 10 100
CLOCK = TickClock(anchor_tick=-1, anchor_ms=10_000, interval_ms=100)
# a lockstep world whose tick 4 was due at 10 000 and published 30 ms late
LOCKSTEP = TickClock(anchor_tick=4, anchor_ms=10_000, interval_ms=100, mode="lockstep", lag_ms=30)
ROW = {"clock_tick": 7, "clock_ms": 500, "tick_mode": "realtime", "tick_lag_ms": 0}


def test_the_clock_reads_one_tick_per_interval_since_its_anchor():
    assert [CLOCK.tick_at(t) for t in (9_000, 10_000, 10_099, 10_100, 10_199, 10_550)] == [-1, -1, -1, 0, 0, 4]
    assert [CLOCK.time_of(tick) for tick in (-5, -1, 0, 4)] == [10_000, 10_000, 10_100, 10_500]
    assert TickClock.of({**ROW, "tick_interval_ms": 10}, 1_000).tick_at(530) == 10


def test_a_world_without_an_interval_of_its_own_ticks_at_its_host_s():
    assert TickClock.of({**ROW, "tick_interval_ms": None}, 10).interval_ms == 10
    assert TickClock.of({**ROW, "tick_interval_ms": 0, "tick_mode": "lockstep"}, 10).interval_ms == 0


def test_a_world_with_systems_is_due_at_every_tick_of_its_clock():
    assert CLOCK.next_step_at(-1, has_systems=True, next_due_tick=None) == 10_100
    assert CLOCK.next_step_at(3, has_systems=True, next_due_tick=9) == 10_500  # its commands do not delay it
    assert LOCKSTEP.next_step_at(4, has_systems=True, next_due_tick=None) == 10_100


def test_a_world_without_systems_is_due_at_its_earliest_command_s_tick_and_idle_without_one():
    assert CLOCK.next_step_at(-1, has_systems=False, next_due_tick=None) is None
    assert CLOCK.next_step_at(-1, has_systems=False, next_due_tick=6) == 10_700
    # a command for a tick already passed (or the head itself) is due with the next tick
    assert CLOCK.next_step_at(4, has_systems=False, next_due_tick=2) == 10_600


def test_a_lockstep_world_without_systems_runs_every_tick_while_a_command_is_open_and_idles_without_one():
    assert LOCKSTEP.next_step_at(4, has_systems=False, next_due_tick=None) is None
    assert LOCKSTEP.next_step_at(4, has_systems=False, next_due_tick=90) == 10_100  # the empty tick 5 first


def test_a_due_realtime_step_goes_straight_to_the_tick_the_clock_reached_and_never_back():
    assert CLOCK.step_to(10_750, tick_head=0) == 6  # ticks 1..5 coalesced
    assert CLOCK.step_to(10_750, tick_head=6) is None  # the clock has not passed the head
    assert CLOCK.step_to(10_750, tick_head=9) is None


def test_a_due_lockstep_step_goes_to_the_next_tick_only():
    assert LOCKSTEP.step_to(10_099, tick_head=4) is None
    assert LOCKSTEP.step_to(10_100, tick_head=4) == 5
    assert LOCKSTEP.step_to(99_999, tick_head=4) == 5  # however far behind: every tick runs
    unpaced = TickClock(4, 10_000, 0, "lockstep")
    assert unpaced.step_to(10_000, tick_head=4) == 5  # no interval: due at once


def test_a_lockstep_step_records_the_schedule_s_due_time_while_on_or_behind_it():
    assert LOCKSTEP.due_at(10_100, 4) == 10_100  # on time
    assert LOCKSTEP.due_at(10_700, 4) == 10_100  # behind: the schedule's, so the lag shows and is caught up
    behind = TickClock(4, 10_000, 100, "lockstep", lag_ms=2_000)  # tick 4 published at 12 000
    assert behind.due_at(12_000 + PAUSE_MS, 4) == 10_100  # ran back to back after it: still catching up


def test_after_a_pause_or_before_its_time_or_unpaced_a_lockstep_step_starts_the_schedule_again():
    # could first have run at 10 100; more than max(interval, PAUSE_MS) later is a pause
    assert LOCKSTEP.due_at(10_100 + PAUSE_MS, 4) == 10_100
    assert LOCKSTEP.due_at(10_101 + PAUSE_MS, 4) == 10_101 + PAUSE_MS
    slow = TickClock(4, 10_000, 5_000, "lockstep")  # a pause is longer than an interval too
    assert slow.due_at(15_000 + 5_000, 4) == 15_000 and slow.due_at(15_001 + 5_000, 4) == 20_001
    assert LOCKSTEP.due_at(10_050, 4) == 10_050  # asked for by hand, early
    assert TickClock(4, 10_000, 0, "lockstep").due_at(10_000, 4) == 10_000


def test_a_lockstep_clock_follows_its_head_and_a_realtime_one_never_moves():
    assert LOCKSTEP.stepped(5, 10_100, 10_180) == TickClock(5, 10_100, 100, "lockstep", lag_ms=80)
    assert LOCKSTEP.stepped(5, 10_100, 10_000).lag_ms == 0
    assert CLOCK.stepped(9, 10_900, 11_000) == CLOCK
