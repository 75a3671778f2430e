"""The tick clock rule every host of a world steps it by (archetype.commands.clock)."""

from __future__ import annotations

from archetype.commands.clock import TickClock

# a world created at t=10 000 ms, ticking every 100 ms: tick 0 is due at 10 100
CLOCK = TickClock(anchor_tick=-1, anchor_ms=10_000, interval_ms=100)


def test_the_clock_reads_one_tick_per_interval_since_its_anchor():
    assert [CLOCK.tick_at(t) for t in (9_000, 10_000, 10_099, 10_100, 10_199, 10_550)] == [-1, -1, -1, 0, 0, 4]
    assert [CLOCK.time_of(tick) for tick in (-5, -1, 0, 4)] == [10_000, 10_000, 10_100, 10_500]
    assert TickClock.of({"clock_tick": 7, "clock_ms": 500}, 10).tick_at(530) == 10


def test_a_world_with_systems_is_due_at_every_tick_of_its_clock():
    assert CLOCK.next_step_at(-1, has_systems=True, next_due_tick=None) == 10_100
    assert CLOCK.next_step_at(3, has_systems=True, next_due_tick=9) == 10_500  # its commands do not delay it


def test_a_world_without_systems_is_due_at_its_earliest_command_s_tick_and_idle_without_one():
    assert CLOCK.next_step_at(-1, has_systems=False, next_due_tick=None) is None
    assert CLOCK.next_step_at(-1, has_systems=False, next_due_tick=6) == 10_700
    # a command for a tick already passed (or the head itself) is due with the next tick
    assert CLOCK.next_step_at(4, has_systems=False, next_due_tick=2) == 10_600


def test_a_due_step_goes_straight_to_the_tick_the_clock_reached_and_never_back():
    assert CLOCK.step_to(10_750, tick_head=0) == 6  # ticks 1..5 coalesced
    assert CLOCK.step_to(10_750, tick_head=6) is None  # the clock has not passed the head
    assert CLOCK.step_to(10_750, tick_head=9) is None
