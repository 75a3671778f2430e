"""A world's tick clock: the one rule every host of a world steps it by (docs/ledger.md, "Idle worlds").

`archetype serve`'s runner and the Durable Object's alarm both ask this module which tick a world's
clock is at and when its next step is due, from the anchor in the world's ledger row (`clock_tick`,
`clock_ms`: the clock read `clock_tick` then) and the host's tick interval. The anchor is persisted,
so a restarted runner or an evicted object reads the same clock, and two hosts fed the same
commands at the same times step the same ticks. Pure and stdlib-only: it runs on Pyodide too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TickClock:
    anchor_tick: int
    anchor_ms: int
    interval_ms: int

    @classmethod
    def of(cls, world: Mapping[str, Any], interval_ms: int) -> TickClock:
        """The clock of a world row (or any mapping with its `clock_tick` and `clock_ms`)."""
        return cls(world["clock_tick"], world["clock_ms"], interval_ms)

    def tick_at(self, now_ms: int) -> int:
        """The tick the clock is at: one tick per interval since the anchor, never before it."""
        return self.anchor_tick + max(0, now_ms - self.anchor_ms) // self.interval_ms

    def time_of(self, tick: int) -> int:
        """When the clock reaches `tick` (a tick before the anchor: at the anchor)."""
        return self.anchor_ms + max(0, tick - self.anchor_tick) * self.interval_ms

    def next_step_at(self, tick_head: int, *, has_systems: bool, next_due_tick: int | None) -> int | None:
        """When the world's next step is due; None: not until a command is admitted.

        A world with processors or PreTick hooks steps at every tick of its clock; one without
        steps only when its earliest open command is due, at that command's tick (the ticks
        between are empty and coalesced). Never at or before the tick head: ticks only go forward.
        """
        if has_systems:
            return self.time_of(tick_head + 1)
        if next_due_tick is not None:
            return self.time_of(max(next_due_tick, tick_head + 1))
        return None

    def step_to(self, now_ms: int, tick_head: int) -> int | None:
        """The tick a step due by `now_ms` goes to: straight to the tick the clock reached
        (None: the clock has not passed the tick head yet, so no tick can run)."""
        tick = self.tick_at(now_ms)
        return tick if tick > tick_head else None
