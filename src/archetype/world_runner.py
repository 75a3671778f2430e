"""The runner loop (`WorldRunner`): which worlds have work, stepped at their ticks, and (with a
runner registry) only this runner's share of them, under world leases. `serve`'s stepping process
(archetype.stepping) and remote runners (archetype.remote_runner) run it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

from archetype.commands.clock import TickClock
from archetype.commands.errors import (
    LeaseLostError,
    StaleWriterError,
    WorldClosingError,
    WorldEdgeHostedError,
    WorldLeaseHeldError,
    WorldNotFoundError,
)
from archetype.commands.failure_streak import FailureStreak
from archetype.commands.ledger_rows import PendingWorld
from archetype.commands.port import Clock, SystemClock
from archetype.metrics import Metrics
from archetype.runner_registry import RunnerCatalog, RunnerRegistry, host_of
from archetype.runtime import Runtime
from archetype.world.error_text import error_text, safe_text
from archetype.world.operations import DestroyWorld
from archetype.world.world import AsyncWorld

log = logging.getLogger("archetype.serve")


class WorldRunner:
    """Steps the worlds that have work, in passes on a grid of `tick_rate` a second (finer while a
    world with a shorter interval ticks); idle worlds cost nothing.

    A world ticks in a pass when it has processors or PreTick hooks (`AsyncWorld.has_systems`: at every
    tick of its clock), or when it has an open command that is due (realtime) or open at all
    (lockstep: every tick up to it runs). Due-ness comes from the catalog's index of open commands
    (`pending_worlds`), never from a walk over every world, and from the world's tick clock
    (archetype.commands.clock, in its ledger row, the rule the Durable Object's alarm follows too;
    docs/ledger.md, *Tick modes*): a realtime world woken by a command steps straight to the tick
    its clock reached, the empty ticks between coalesced; a lockstep world runs its next tick, and
    one that is behind its schedule runs its due ticks back to back (for at most one `tick_rate`
    interval per pass; the next pass follows at once), its lag a metric. The due worlds of a pass
    step concurrently, so their ledger calls share group commits. Every `sweep_s` the runner lists
    the worlds once: CLOSING worlds to finish, and (when modules add processors on load) new worlds
    to load and see. A world recorded without an interval (created before tick modes) ticks at
    `tick_rate`.

    With a `registry` (cooperating runners, local and remote) it steps only the worlds that are its
    share (`host_of` over the live runners of the registry) and that no other live host holds,
    under world leases: a heartbeat every third of the lease renews them and its registration. When
    the live runners change, it hands each world it hosts that became another's share to that
    runner (released, then claimed in its name), and adopts its own share of the worlds other
    runners' leases name and do not hold (never loading them: idle worlds move at once, for
    nothing). A dead runner's worlds become the others' share once its registration expired, and
    are claimed once its world leases expired.
    """

    def __init__(self, runtime: Runtime, catalog: RunnerCatalog, metrics: Metrics, tick_rate: float,
                 sweep_s: float = 10.0, concurrency: int = 256, registry: RunnerRegistry | None = None,
                 clock: Clock | None = None) -> None:  # fmt: skip
        self.runtime, self.catalog, self.metrics = runtime, catalog, metrics
        self.sweep_s = sweep_s
        self.interval_ms = max(1, round(1000 / tick_rate))
        self.pass_interval_ms = self.interval_ms  # finer while a world with a shorter interval has work
        runtime.worlds.tick_interval_ms = self.interval_ms  # the pace of a world recorded without one
        self.clock = clock or SystemClock()  # the ledger's clock: the worlds' clocks are anchored on it
        self.registry = registry
        self.live: list[str] = []  # the live runners, from the registry (read at the start of every pass)
        self._share: dict[str, bool] = {}  # world -> whether it is this runner's share of `live`
        self._handing_over: dict[str, asyncio.Task[None]] = {}  # worlds being given back (a runner joined)
        self._adopting: dict[str, asyncio.Task[None]] = {}  # runner -> moving its idle worlds (it left the live list)
        self._stop = asyncio.Event()  # the run's: an adoption waiting for leases to expire ends with it
        self.sweep_soon = False  # a sweep at the next pass: the live runners changed, or a world could not load
        self._unseen_failed = False
        self.passes = 0
        self._grid_ms: int | None = None  # the first pass's time: passes fall on this grid
        self._behind = False  # a lockstep world still had due ticks when its pass's time was up
        self.seen: set[str] = set()  # worlds loaded to see whether the modules give them systems
        self.ticking: set[str] = set()  # worlds with systems
        # Worlds their Durable Object steps (a remote runner is refused them): left alone until the
        # next sweep asks again (a new deployment may host them elsewhere), logged once per world.
        self.edge_hosted: set[str] = set()
        self._edge_hosted_logged: set[str] = set()
        self._slots = asyncio.Semaphore(concurrency)
        self._loads_systems = bool(runtime.worlds.on_load)  # modules add processors: a world must be seen
        # the rounds that fail alike every time while the catalog cannot answer or write (a full disk)
        self._failing = {name: FailureStreak(log, f"runner {registry.runner_id if registry else 'serve'}") for name in
                         ("leases", "live runners", "worlds", "due worlds", "destroys")}  # fmt: skip
        runtime.worlds.on_load.append(self._loaded)  # after the modules' callbacks: it sees what they added

    def _loaded(self, world: AsyncWorld) -> None:
        if world.has_systems:
            self.ticking.add(world.world_id)

    def pass_ms(self) -> int:
        """This pass's time, on the grid of pass times: the clock rule reads it rather than the
        moment the pass woke, so a few ms of wake-up jitter never moves a world's step to another pass."""
        now = self.clock.now_ms()
        if self._grid_ms is None:
            self._grid_ms = now
        return now - (now - self._grid_ms) % self.pass_interval_ms

    def mine(self, world_id: str) -> bool:
        if self.registry is None:
            return True
        share = self._share.get(world_id)
        if share is None:
            share = self._share[world_id] = bool(self.live) and host_of(world_id, self.live) == self.registry.runner_id
        return share

    async def run(self, stop: asyncio.Event) -> None:
        self._stop = stop
        loop = asyncio.get_running_loop()
        await self.follow_runners()  # the first sweep already sees only this runner's share
        swept = -self.sweep_s
        while not stop.is_set():
            started = loop.time()
            if started - swept >= self.sweep_s or self.sweep_soon:
                swept, self.sweep_soon = started, False
                await self.sweep(stop)
            self.passes += 1
            await self.run_pass(stop)
            to_next_pass = self.pass_interval_ms - (self.clock.now_ms() - (self._grid_ms or 0)) % self.pass_interval_ms
            if self._behind:  # lockstep ticks still due: no rest
                to_next_pass = 0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=to_next_pass / 1000)

    async def heartbeat(self, stop: asyncio.Event, every_s: float) -> None:
        """Renew this runner's world leases, follow the live runners, hand over what is no longer its
        share; and, in a task of its own, renew its registration (so a slow round of world-lease
        renewals never lets the registration expire)."""
        if self.registry is None:
            return
        registered = asyncio.create_task(self.registry.keep(stop, every_s))
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=every_s)
            if stop.is_set():
                break
            await self.follow_runners()
            self.sweep_soon |= self._unseen_failed
            self._unseen_failed = False
            try:
                for world_id in await self.runtime.worlds.renew():
                    log.warning("world %s: its world lease was taken over; no longer stepping it", world_id)
                self._failing["leases"].succeeded("its world leases are renewed again")
            except Exception as exc:
                self._failing["leases"].failed(exc, "renewing its world leases failed; trying again")
            self._hand_over_others()
        await registered

    def _hand_over_others(self) -> None:
        """Give back the loaded worlds that are no longer this runner's share, each in a task of its
        own (after its tick in progress), so that neither the heartbeat nor a pass waits for a tick."""
        for world_id in self.runtime.worlds.loaded:
            if not self.mine(world_id) and world_id not in self._handing_over:
                self._handing_over[world_id] = asyncio.create_task(self._hand_over(world_id))

    async def _hand_over(self, world_id: str) -> None:
        """Give a world that became another runner's share to that runner (its lease claimed in its
        name: `WorldHost.release`), once its tick in progress is done; in a task of its own, so that
        the heartbeat never waits for a tick."""
        try:
            await self.runtime.worlds.release(world_id, to=host_of(world_id, self.live) if self.live else None)
        finally:
            del self._handing_over[world_id]

    async def follow_runners(self) -> None:
        """Which runners live now (one read of a registry of a few rows: cheap enough for every
        pass); when a runner joined or died the shares moved, and there are worlds to see with them."""
        if self.registry is None:
            return
        try:
            live = await self.registry.live()
            self._failing["live runners"].succeeded("reads the live runners again")
        except Exception as exc:
            self._failing["live runners"].failed(exc, "reading the live runners failed; keeping the last list")
            return
        if live != self.live:
            log.info("live runners: %s", ", ".join(live))
            others = sorted({*self.live, *live} - {self.registry.runner_id})  # joined, left, or live
            self.live, self._share, self.sweep_soon = live, {}, True
            self._hand_over_others()
            for runner_id in others:
                if runner_id not in self._adopting:
                    self._adopting[runner_id] = asyncio.create_task(self._adopt(runner_id))

    async def _adopt(self, runner_id: str) -> None:
        """Take this runner's share of the worlds whose lease names `runner_id` and that it does not
        hold, once the shares moved (a runner joined, this one included, or left): of the worlds
        that runner's lease names (`hosted_worlds`: O(its worlds), read once), each ACTIVE one that
        is this runner's share now is adopted (`WorldHost.adopt`: claimed and given back at once,
        never loaded nor ticked): a live runner's once free (expired or given back: the worlds it
        holds it hands over itself, in this runner's name), a dead one's once its leases expired
        (awaited). The lease then names this runner, and the world's next command finds it here
        with no epoch bump (one bump each, at the move): idle worlds move at once, not at their next
        command. A world held still (clocks apart, a lease renewed) moves when its next command arrives."""
        assert self.registry is not None
        try:
            worlds = {w["world_id"]: w["host_expires_at"] or 0 for w in await self.catalog.hosted_worlds(runner_id)
                      if w["status"] == "ACTIVE" and self.mine(w["world_id"])}  # fmt: skip
            if runner_id in self.live:
                now = self.clock.now_ms()
                worlds = {world_id: expires for world_id, expires in worlds.items() if expires <= now}
            else:
                with contextlib.suppress(TimeoutError):
                    expiry = max(worlds.values(), default=0)
                    await asyncio.wait_for(self._stop.wait(), timeout=max(0, expiry - self.clock.now_ms()) / 1000)
            if not self._stop.is_set():
                await asyncio.gather(*(self._adopt_one(world_id) for world_id in worlds if self.mine(world_id)))
        except Exception as exc:
            log.warning("could not move the idle worlds of runner %s; they move when a command arrives: %s", runner_id,
                        error_text(exc))  # fmt: skip
        finally:
            del self._adopting[runner_id]

    async def _adopt_one(self, world_id: str) -> None:
        """Adopt one world (concurrently with the others: their claims share group commits)."""
        async with self._slots:
            with contextlib.suppress(WorldLeaseHeldError, StaleWriterError, WorldClosingError, WorldNotFoundError):
                await self.runtime.worlds.adopt(world_id)  # unless held, taken or gone meanwhile: its next command decides

    def _held_elsewhere(self, world: PendingWorld, now_ms: int) -> bool:
        """Another live host holds its world lease: leave it alone (claiming would be refused)."""
        owner = world["host_owner"]
        return owner is not None and self.registry is not None and owner != self.registry.runner_id and (
            world["host_expires_at"] or 0) > now_ms  # fmt: skip

    async def sweep(self, stop: asyncio.Event) -> None:
        try:
            worlds = await self.runtime.authority.list_worlds()
            self._failing["worlds"].succeeded("lists the worlds again")
        except Exception as exc:
            self._failing["worlds"].failed(exc, "listing the worlds failed; trying again at the next sweep")
            return
        self.edge_hosted.clear()  # asked again (at most once a sweep): a new deployment may have moved them
        unseen = []
        for world in worlds:
            if stop.is_set():
                return
            if not self.mine(world["world_id"]):
                continue
            if world["status"] == "CLOSING":  # a destroy that stopped between its transactions
                await self.finish_destroy(world["world_id"])
            elif world["status"] == "ACTIVE" and self._loads_systems and world["world_id"] not in self.seen:
                self.seen.add(world["world_id"])
                unseen.append(world["world_id"])
        await asyncio.gather(*(self._see(world_id) for world_id in unseen))

    async def _see(self, world_id: str) -> None:
        """Load a world to learn whether the modules give it systems (concurrently: loads share commits)."""
        async with self._slots:
            try:
                await self.runtime.worlds.get(world_id)
            except WorldEdgeHostedError:
                self.seen.discard(world_id)
                self._leave_to_the_edge(world_id)
            except Exception:  # held by a runner that died and whose lease has not expired yet, or failing
                self.seen.discard(world_id)
                self._unseen_failed = True  # seen again at a sweep after the next heartbeat

    async def run_pass(self, stop: asyncio.Event) -> None:
        await self.follow_runners()
        try:
            pending = await self.catalog.pending_worlds()
            self._failing["due worlds"].succeeded("reads the due worlds again")
        except Exception as exc:
            self._failing["due worlds"].failed(exc, "reading the due worlds failed; trying again next pass")
            return
        now = self.pass_ms()
        leases_at = self.clock.now_ms()  # the moment itself, not the pass's grid time: leases expire by it
        due: dict[str, _Due] = {}
        intervals = [self.interval_ms]
        for world in pending:
            if not self.mine(world["world_id"]) or self._held_elsewhere(world, leases_at):
                continue
            if world["status"] == "CLOSING":
                await self.finish_destroy(world["world_id"])
            elif world["status"] == "ACTIVE":
                clock = TickClock.of(world, self.interval_ms)  # the row is fresh: this pass's read
                if clock.lockstep:  # it ticks every interval up to its command
                    intervals.append(clock.interval_ms)
                at = clock.next_step_at(world["tick_head"], has_systems=False, next_due_tick=world["next_tick"])
                moment = leases_at if clock.lockstep else now  # a lockstep schedule is its own grid
                if at is not None and at <= moment:
                    # lockstep, with no systems: every tick up to its earliest command's is certain to run
                    due[world["world_id"]] = _Due(clock.step_to(moment, world["tick_head"]), until=world["next_tick"])
        for world_id in self.ticking - due.keys():
            if not self.mine(world_id):
                continue
            try:
                head = (await self.runtime.worlds.get(world_id)).tick
            except (WorldClosingError, WorldNotFoundError):
                self.ticking.discard(world_id)
                continue
            except Exception:  # not loadable now (fenced, the catalog did not answer): the next pass tries again
                continue
            loaded = self.runtime.worlds.clock_of(world_id)  # its host's copy, following its publications
            if loaded is None:
                continue
            intervals.append(loaded.interval_ms)
            tick = loaded.step_to(leases_at if loaded.lockstep else now, head)  # with systems: every tick of its clock
            if tick is not None:
                due[world_id] = _Due(tick, until=None)
        # The grid follows the finest interval among the worlds that tick every interval (an unpaced
        # world has none; a realtime world waiting for a command's tick is stepped at the pass after it).
        self.pass_interval_ms = min(i for i in intervals if i > 0)
        due = {world_id: d for world_id, d in due.items()
             if world_id not in self.edge_hosted and await self.runtime.worlds.retry_due(world_id)}  # fmt: skip
        self._behind = False
        if not stop.is_set():
            await asyncio.gather(*(self.step(world_id, d, stop) for world_id, d in due.items()))

    async def finish_destroy(self, world_id: str) -> None:
        """Finish a destroy that stopped between its transactions."""
        try:
            await self.runtime.dispatcher.apply(DestroyWorld(world_id=world_id))
            self._failing["destroys"].succeeded("finishes destroys again")
        except Exception as exc:
            self._failing["destroys"].failed(exc, f"finishing the destroy of world {world_id} failed; trying again")

    async def step(self, world_id: str, due: _Due, stop: asyncio.Event) -> None:
        """Step the world: once; a lockstep one again while its next tick is due (behind its schedule,
        or unpaced), up to `due.until` for one without systems, for at most one `tick_rate` interval."""
        deadline = time.perf_counter() + self.interval_ms / 1000
        tick: int | None = due.tick
        while tick is not None and await self._step_once(world_id, tick):
            clock, world = self.runtime.worlds.clock_of(world_id), self.runtime.worlds.loaded_world(world_id)
            if clock is None or world is None or not clock.lockstep or stop.is_set():
                return
            if not world.has_systems and (due.until is None or world.tick >= due.until):
                return  # its earliest open command's tick has run: the next pass reads what is open now
            tick = clock.step_to(self.clock.now_ms(), world.tick)
            if tick is not None and time.perf_counter() >= deadline:
                self._behind = True  # still due: the next pass comes at once
                return

    async def _step_once(self, world_id: str, tick: int) -> bool:
        """One step of the world; whether it published."""
        async with self._slots:
            if not self.mine(world_id):  # a runner joined since this pass began: the world is being handed over
                return False
            started, ok = time.perf_counter(), False
            try:
                await self.runtime.worlds.step(world_id, tick)
                ok = True
            except (WorldClosingError, WorldNotFoundError):
                self.ticking.discard(world_id)
                self.seen.discard(world_id)
            except WorldLeaseHeldError:
                return False  # another live runner hosts it (it was its share until a moment ago): not a tick
            except WorldEdgeHostedError:
                self._leave_to_the_edge(world_id)
                return False
            except (StaleWriterError, LeaseLostError) as exc:  # fenced, or leases taken over: the host reloads it
                log.warning("world %s not stepped: %s: %s", world_id, exc.code, safe_text(exc.message))
            except Exception:  # the world host recorded it (STALLED), logged it (once per stall) and backs off
                if self.runtime.worlds.failures(world_id) == 1:
                    self.metrics.stalls.inc()
            self.metrics.observe_tick(world_id, time.perf_counter() - started, ok)
            clock = self.runtime.worlds.clock_of(world_id)
            if ok and clock is not None and clock.lockstep:
                self.metrics.observe_lag(world_id, clock.lag_ms / 1000)
            return ok

    def _leave_to_the_edge(self, world_id: str) -> None:
        self.edge_hosted.add(world_id)
        self.ticking.discard(world_id)
        if world_id not in self._edge_hosted_logged:
            self._edge_hosted_logged.add(world_id)
            log.info("world %s is stepped by its Durable Object (edge-hosted): this runner leaves it alone", world_id)


@dataclass(frozen=True)
class _Due:
    """A world due in a pass: the tick its step goes to, and (a lockstep world without systems) the
    tick up to which it runs on back to back when behind."""

    tick: int | None
    until: int | None
