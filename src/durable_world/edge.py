"""Edge-hosted worlds: the Durable Object steps its world itself, from its alarm.

The object runs the runner's own machinery: the `WorldHost` and `CommandScheduler` that
`archetype serve` uses (archetype.commands.host / scheduler), over an `InProcessAuthority` on the
object's ledger, so a tick is materialize -> PreTick -> processors -> publish exactly as on a
CPython runner, with no RPC in between.

The user's code arrives through the module hook `archetype serve --module` uses: a module whose
import registers its components and whose `setup(runtime)` adds processors through
`runtime.worlds.on_load` (here `runtime` is an `EdgeRuntime`, which has the `registry`,
`scheduler` and `worlds` of `archetype.Runtime`). A module also says which worlds the edge hosts,
with `edge_hosted(world_id) -> bool`; every other world is runner-hosted (a CPython runner
steps it through `Runtime.open_remote`). The two never fight for the writer: the object refuses
a remote `acquire_writer` for an edge-hosted world (`world_edge_hosted`), and never steps a
runner-hosted one.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType
from typing import Any

from archetype.commands.authority import InProcessAuthority
from archetype.commands.families import default_registry
from archetype.commands.host import WorldHost
from archetype.commands.ledger import Ledger
from archetype.commands.scheduler import CommandScheduler
from archetype.world.commit import CommittedTickReceipt

# The object's writer identity in lease rows: one object per world, so one name serves them all.
EDGE_OWNER = "edge"
TICK_INTERVAL_MS = 1_000


class EdgeRuntime:
    """What `setup(runtime)` receives at the edge: the runner's registry, scheduler and world host,
    over the object's own ledger."""

    def __init__(self, ledger: Ledger, modules: Iterable[ModuleType] = ()) -> None:
        self.authority = InProcessAuthority(ledger)
        self.registry = default_registry()
        self.scheduler = CommandScheduler(self.registry, self.authority, owner=EDGE_OWNER)
        self.worlds = WorldHost(self.authority, self.scheduler)
        self._modules = list(modules)
        for module in self._modules:
            setup = getattr(module, "setup", None)
            if callable(setup):
                setup(self)

    def hosts(self, world_id: str) -> bool:
        """Whether the edge steps this world: some module's `edge_hosted(world_id)` says so."""
        return any(bool(getattr(m, "edge_hosted", _runner_hosted)(world_id)) for m in self._modules)

    async def step(self, world_id: str) -> CommittedTickReceipt:
        return await self.worlds.step(world_id)

    async def next_tick_at(self, world_id: str, now_ms: int, interval_ms: int) -> int | None:
        world = await self.worlds.get(world_id)
        return next_tick_at(now_ms, interval_ms, has_systems=world.has_systems,
                            next_due_tick=await self.authority.next_due_tick(world_id))  # fmt: skip


def _runner_hosted(world_id: str) -> bool:
    return False


def next_tick_at(now_ms: int, interval_ms: int, *, has_systems: bool, next_due_tick: int | None) -> int | None:
    """When an edge-hosted world ticks next; None: not until an admission re-arms the alarm.

    The one scheduling rule of the edge (kept here alone so it can follow the runner's rule for idle
    worlds): a world with processors or PreTick hooks ticks every interval; one without ticks only
    while some command is open, since tick numbers advance only by ticking and a command scheduled
    for a later tick becomes due only then.
    """
    if has_systems or next_due_tick is not None:
        return now_ms + interval_ms
    return None


def tick_interval_ms(env: Any) -> int:
    """`TICK_INTERVAL_MS` from the Worker's vars (wrangler.toml [vars]), else one second."""
    value = getattr(env, "TICK_INTERVAL_MS", None)
    try:
        interval = int(value) if value is not None else TICK_INTERVAL_MS
    except (TypeError, ValueError):
        raise ValueError(f"TICK_INTERVAL_MS must be a whole number of milliseconds, not {value!r}") from None
    if interval < 1:
        raise ValueError(f"TICK_INTERVAL_MS must be at least 1, not {interval}")
    return interval
