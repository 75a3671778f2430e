"""How a world's ticks follow time: its tick mode and interval (docs/ledger.md, "Tick modes").

- `lockstep`: a tick is a step. Every tick runs, in order, none skipped; the interval paces the
  steps (0: as fast as the host can run them). What simulations want.
- `realtime`: a tick is a slot of wall-clock time. A step goes to the tick the clock reached, and
  the empty or missed ticks between are coalesced. What games want.

Both are recorded per world in its ledger row at creation, so every host steps it by one rule.
"""

from __future__ import annotations

from typing import Literal, get_args

TickMode = Literal["lockstep", "realtime"]
TICK_MODES: tuple[TickMode, ...] = get_args(TickMode)
DEFAULT_TICK_MODE: TickMode = "lockstep"
DEFAULT_TICK_INTERVAL_MS = 100  # ten ticks a second: `archetype serve --tick-rate`'s default
MAX_TICK_INTERVAL_MS = 86_400_000  # a day


def dt_seconds(mode: str, interval_ms: int, ticks: int) -> float:
    """The simulated time a step advances its world, in seconds: one interval in a lockstep world
    (each step is one tick), the `ticks` it covers in a realtime one (coalesced ticks included)."""
    return (1 if mode == "lockstep" else ticks) * interval_ms / 1000


def check_tick_mode(mode: str, interval_ms: int) -> None:
    """ValueError unless `mode` is a tick mode and `interval_ms` a length it takes: 0 (lockstep only:
    as fast as possible) to a day."""
    if mode not in TICK_MODES:
        raise ValueError(f"tick_mode is one of {', '.join(TICK_MODES)}, not {mode!r}")
    least = 1 if mode == "realtime" else 0  # a realtime clock needs a length; lockstep 0 runs unpaced
    if not isinstance(interval_ms, int) or isinstance(interval_ms, bool) or not least <= interval_ms <= MAX_TICK_INTERVAL_MS:
        raise ValueError(f"a {mode} world's tick_interval_ms is {least} to {MAX_TICK_INTERVAL_MS} (a day), not {interval_ms!r}")
