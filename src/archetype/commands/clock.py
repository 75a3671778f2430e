"""A world's tick clock: the one rule every host of a world steps it by (docs/ledger.md, "Tick modes").

`archetype serve`'s runner, `archetype runner`, the in-process world host and the Durable Object's
alarm all ask this module when a world's next step is due, which tick it goes to and (lockstep)
which due time the step records, from the world's ledger row: its tick mode, its interval (a world
migrated from before tick modes has none: it follows its host's), and its clock anchor (`clock_tick`,
`clock_ms`, `tick_lag_ms`). The anchor is persisted, so a restarted runner or an evicted object reads
the same clock, and two hosts fed the same commands at the same times step the same ticks. Pure and
stdlib-only: it runs on Pyodide too.

- realtime: the anchor is the world's creation and never moves; the clock is at tick
  `clock_tick + (now - clock_ms) // interval`, and a step goes straight to it (coalescing).
- lockstep: the anchor is the tick head and the time it was due (`clock_ms`), and how late it
  published (`tick_lag_ms`); the next tick is due one interval later, and a step goes to the next
  tick only. A host that falls behind runs the due ticks back to back; a pause (downtime, an idle
  world, a failed tick's backoff) is not made up (`due_at`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from archetype.world.tick_mode import TickMode

# A lockstep tick that starts more than this (or one interval, if longer) after it could first have
# run follows a pause, not a slow tick: its schedule restarts there instead of running the missed
# steps back to back. Scheduling jitter is milliseconds; a restart, an idle spell or a backoff is more.
PAUSE_MS = 1_000


@dataclass(frozen=True)
class TickClock:
    anchor_tick: int
    anchor_ms: int
    interval_ms: int
    mode: TickMode = "realtime"
    lag_ms: int = 0  # lockstep: how late the anchor tick published after it was due

    @classmethod
    def of(cls, world: Mapping[str, Any], host_interval_ms: int) -> TickClock:
        """The clock of a world row (or any mapping with its clock columns); `host_interval_ms` paces
        a world recorded without an interval of its own (one created before tick modes)."""
        interval = world["tick_interval_ms"]
        return cls(world["clock_tick"], world["clock_ms"], host_interval_ms if interval is None else interval,
                   world["tick_mode"], world["tick_lag_ms"])  # fmt: skip

    @property
    def lockstep(self) -> bool:
        return self.mode == "lockstep"

    def tick_at(self, now_ms: int) -> int:
        """Realtime: the tick the clock is at, one tick per interval since the anchor, never before it."""
        return self.anchor_tick + max(0, now_ms - self.anchor_ms) // self.interval_ms

    def time_of(self, tick: int) -> int:
        """When `tick` is due: realtime, when the clock reaches it; lockstep, `tick` being the one after
        the head, one interval after the head was due (a tick at or before the anchor: at the anchor)."""
        return self.anchor_ms + max(0, tick - self.anchor_tick) * self.interval_ms

    def next_step_at(self, tick_head: int, *, has_systems: bool, next_due_tick: int | None) -> int | None:
        """When the world's next step is due; None: not until a command is admitted (the world idles).

        A world with processors or PreTick hooks steps at every tick of its clock. One without:
        realtime, only when its earliest open command is due, at that command's tick (the ticks
        between are empty and coalesced); lockstep, at its next tick while it has any open command
        (every tick runs, the empty ones before the command's included). Never at or before the
        tick head: ticks only go forward.
        """
        if has_systems or (self.lockstep and next_due_tick is not None):
            return self.time_of(tick_head + 1)
        if next_due_tick is not None:
            return self.time_of(max(next_due_tick, tick_head + 1))
        return None

    def step_to(self, now_ms: int, tick_head: int) -> int | None:
        """The tick a step due by `now_ms` goes to (None: no tick is due yet): lockstep, the next one;
        realtime, straight to the tick the clock reached."""
        if self.lockstep:
            return tick_head + 1 if self.time_of(tick_head + 1) <= now_ms else None
        tick = self.tick_at(now_ms)
        return tick if tick > tick_head else None

    def due_at(self, now_ms: int, tick_head: int) -> int:
        """Lockstep: the due time a step starting at `now_ms` records for the tick after the head.

        On schedule or behind it (the host ran the ticks before it back to back), the schedule's:
        one interval after the head's, so a host that fell behind catches up. After a pause (the
        tick starts more than `max(interval, PAUSE_MS)` after it could first have run: its due time,
        or the head's publication, whichever is later), or before its due time (a step asked for
        by hand), or in a world with no interval: `now_ms`, where the schedule starts again."""
        scheduled = self.time_of(tick_head + 1)
        ready = max(scheduled, self.anchor_ms + self.lag_ms)
        if self.interval_ms == 0 or now_ms < scheduled or now_ms - ready > max(self.interval_ms, PAUSE_MS):
            return now_ms
        return scheduled

    def stepped(self, tick: int, due_ms: int, published_ms: int) -> TickClock:
        """The clock once `tick` published at `published_ms`, due at `due_ms`: a lockstep clock's
        anchor follows its head (what the ledger records at publication); a realtime one never moves."""
        if not self.lockstep:
            return self
        return replace(self, anchor_tick=tick, anchor_ms=due_ms, lag_ms=max(0, published_ms - due_ms))
