"""Edge-hosted worlds: the Durable Object steps its world itself, from its alarm.

The object runs the runner's own machinery: the `WorldHost` and `CommandScheduler` that
`archetype serve` uses (archetype.commands.host / scheduler), over an `InProcessAuthority` on the
object's ledger, so a tick is materialize -> PreTick -> processors -> publish exactly as on a
CPython runner, with no RPC in between; and the tick is due when serve's runner would step it
(archetype.commands.clock: one tick clock per world, in its ledger row, by its tick mode: a lockstep
world runs every tick, back to back while it is behind its schedule; a realtime one coalesces).

The user's code arrives through the module hook `archetype serve --module` uses: a module whose
import registers its components and whose `setup(runtime)` adds processors through
`runtime.worlds.on_load` (here `runtime` is an `EdgeRuntime`, which has the `registry`,
`scheduler` and `worlds` of `archetype.Runtime`). A module also says which worlds the edge hosts,
with `edge_hosted(world_id) -> bool`; every other world is runner-hosted (a CPython runner
steps it through `Runtime.open_remote`). The two never fight for the writer: the object refuses
a remote `acquire_writer` for an edge-hosted world (`world_edge_hosted`), and never steps a
runner-hosted one.

A tick that fails is the runner's failure too: the host records it (the world is STALLED, its
health says why) and logs it once per stall, and the object waits out the host's backoff
(`WorldHost.retry_due`, on the ledger's clock) before it tries again, sooner when an operator
asks (`retry_world`, whose call arms the alarm).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from archetype.commands.authority import InProcessAuthority
from archetype.commands.clock import TickClock
from archetype.commands.families import default_registry
from archetype.commands.host import WorldHost
from archetype.commands.ledger import DEFAULT_IDEMPOTENCY_WINDOW_MS, DEFAULT_KEEP_TICKS, PRUNE_LIMIT, Ledger
from archetype.commands.port import Clock, SystemClock
from archetype.commands.scheduler import CommandScheduler

# The object's writer identity in lease rows: one object per world, so one name serves them all.
EDGE_OWNER = "edge"
TICK_INTERVAL_MS = 1_000
PRUNE_INTERVAL_MS = 60_000  # serve's --prune-interval default


class EdgeRuntime:
    """What `setup(runtime)` receives at the edge: the runner's registry, scheduler and world host,
    over the object's own ledger."""

    def __init__(self, ledger: Ledger, modules: Iterable[ModuleType] = (), *, clock: Clock | None = None,
                 tick_interval_ms: int = TICK_INTERVAL_MS) -> None:  # fmt: skip
        """`clock`: the ledger's; `tick_interval_ms`: the Worker's TICK_INTERVAL_MS, the pace of a world
        recorded without an interval of its own (one created before tick modes)."""
        self.authority = InProcessAuthority(ledger)
        self.registry = default_registry()
        self.scheduler = CommandScheduler(self.registry, self.authority, owner=EDGE_OWNER)
        wall_clock = clock or SystemClock()
        # the backoff runs on the ledger's clock too: the alarm is set in its time
        self.worlds = WorldHost(self.authority, self.scheduler, wall_clock=wall_clock, tick_interval_ms=tick_interval_ms,
                                clock=lambda: wall_clock.now_ms() / 1000)  # fmt: skip
        self._modules = list(modules)
        for module in self._modules:
            setup = getattr(module, "setup", None)
            if callable(setup):
                setup(self)

    def hosts(self, world_id: str) -> bool:
        """Whether the edge steps this world: some module's `edge_hosted(world_id)` says so."""
        return any(bool(getattr(m, "edge_hosted", _runner_hosted)(world_id)) for m in self._modules)

    async def next_step_at(self, world_id: str) -> int | None:
        """When this world's next step is due on its clock (archetype.commands.clock); None: idle."""
        return (await self._due(world_id))[1]

    async def step_due(self, world_id: str) -> int | None:
        """Step the world if its next step is due now, as serve does: a realtime world straight to
        the tick its clock reached (the empty ticks between coalesced), a lockstep world its next
        tick, and on, back to back, while the next is due too (it is behind its schedule, or
        unpaced), for at most one `tick_interval_ms`. Answer when the next step is due. An alarm
        that comes early (for audit delivery, or repeated) steps nothing, nor does one within the
        backoff of a world whose tick failed (`retry_at_ms`)."""
        deadline = time.monotonic() + self.worlds.tick_interval_ms / 1000
        while True:
            clock, at = await self._due(world_id)
            now = self.worlds.wall_clock.now_ms()
            if at is None or at > now:
                return at
            if not await self.worlds.retry_due(world_id):
                return self.retry_at_ms(world_id)
            await self.worlds.step(world_id, clock.step_to(now, (await self.worlds.get(world_id)).tick))
            if not clock.lockstep or time.monotonic() >= deadline:
                return await self.next_step_at(world_id)

    def retry_at_ms(self, world_id: str) -> int | None:
        """When a world whose tick (or load) failed may try again, on the ledger's clock: the end of
        the host's backoff, and never now, which is still within it (None: the world is not failing)."""
        at = self.worlds.retry_at(world_id)
        return None if at is None else max(math.ceil(at * 1000), self.worlds.wall_clock.now_ms() + 1)

    async def _due(self, world_id: str) -> tuple[TickClock, int | None]:
        info = await self.authority.world_info(world_id)
        world = await self.worlds.get(world_id)
        clock = TickClock.of(info, self.worlds.tick_interval_ms)
        next_due_tick = await self.authority.next_due_tick(world_id)
        return clock, clock.next_step_at(info["tick_head"], has_systems=world.has_systems, next_due_tick=next_due_tick)


def _runner_hosted(world_id: str) -> bool:
    return False


def env_int(env: Any, name: str, default: int, minimum: int, maximum: int | None = None) -> int:
    """A whole-number Worker var (wrangler.toml [vars]), else `default`."""
    value = getattr(env, name, None)
    try:
        number = int(value) if value is not None else default
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a whole number, not {value!r}") from None
    if number < minimum:
        raise ValueError(f"{name} must be at least {minimum}, not {number}")
    if maximum is not None and number > maximum:
        raise ValueError(f"{name} must be at most {maximum}, not {number}")
    return number


def tick_interval_ms(env: Any) -> int:
    """`TICK_INTERVAL_MS` from the Worker's vars, else one second."""
    return env_int(env, "TICK_INTERVAL_MS", TICK_INTERVAL_MS, 1)


@dataclass(frozen=True)
class Retention:
    """The retention policy `archetype serve` applies (`--keep-ticks`, `--idempotency-window`,
    `--prune-interval`), from the Worker's vars; `limit` bounds the rows of each kind one alarm
    removes per world (Ledger.prune's `limit`)."""

    keep_ticks: int = DEFAULT_KEEP_TICKS
    idempotency_window_ms: int = DEFAULT_IDEMPOTENCY_WINDOW_MS
    interval_ms: int = PRUNE_INTERVAL_MS
    limit: int = PRUNE_LIMIT

    @classmethod
    def of(cls, env: Any) -> Retention:
        return cls(keep_ticks=env_int(env, "KEEP_TICKS", DEFAULT_KEEP_TICKS, 1),
                   idempotency_window_ms=env_int(env, "IDEMPOTENCY_WINDOW_MS", DEFAULT_IDEMPOTENCY_WINDOW_MS, 0),
                   interval_ms=env_int(env, "PRUNE_INTERVAL_MS", PRUNE_INTERVAL_MS, 1),
                   limit=env_int(env, "PRUNE_LIMIT", PRUNE_LIMIT, 1, 100_000))  # fmt: skip
