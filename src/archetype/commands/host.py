"""WorldHost: the worlds one runtime is stepping, loaded from and published to its authority.

Loading a world takes its writer, reads its published state at the tick head and wires the
world's materializer, publisher and entity-id source to the ledger. A host with a world lease
(`world_lease_ms`: cooperating `archetype serve` runners) claims the world: it resumes its own lease
at once, takes over only an expired or released one, and is refused (`WorldLeaseHeldError`) a world
another live host holds; `renew` is its heartbeat. A host without one (an embedded runtime)
acquires the writer outright, fencing every earlier writer.
A world whose writer was fenced or whose leases were taken over is dropped, never patched up:
the next use loads it afresh from the authority.

Each loaded world's tick clock (archetype.commands.clock: its tick mode, interval and anchor, from
its ledger row) is kept here and follows the world's publications, so a runner asks `clock_of` when
its next step is due; a lockstep step records the due time its clock gives (`TickClock.due_at`).
A world recorded without an interval (one created before tick modes) ticks at the host's.

A tick that fails otherwise (a hook or processor raised, the authority did not answer or refused
what the tick carries), and a load that fails (a component migration missing, the state could not
be read), are recorded in the ledger (the world is STALLED, with the error and the failed
attempts, and holds no lease meanwhile), logged once per stall (`FailureStreak`) and retried with
exponential backoff: `retry_due` tells a runner loop when, sooner when an operator asked the ledger to
retry the world now (`retry_world`; docs/guide/failures.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from archetype.commands.authority import Authority
from archetype.commands.clock import TickClock
from archetype.commands.errors import (
    LeaseLostError,
    StaleWriterError,
    WorldClosingError,
    WorldEdgeHostedError,
    WorldLeaseHeldError,
    WorldNotFoundError,
    refuses_content,
)
from archetype.commands.failure_streak import FailureStreak
from archetype.commands.ledger_rows import ComponentMigrationRow, EntityRewrite, PayloadRewrite, WorldRow
from archetype.commands.port import Clock, SystemClock
from archetype.commands.scheduler import AuthorityIdSource, CommandScheduler, LedgerPublisher
from archetype.world.commit import CommittedTickReceipt
from archetype.world.components import ComponentValue, loaded_components
from archetype.world.error_text import error_text
from archetype.world.evolution import ComponentMigrations, required_error
from archetype.world.tick_mode import DEFAULT_TICK_INTERVAL_MS
from archetype.world.world import AsyncWorld

LOST_WRITER = (StaleWriterError, LeaseLostError, WorldClosingError)
# A load refused for a reason that is not the world's failure: another host has it, or it is gone.
NOT_OURS = (*LOST_WRITER, WorldLeaseHeldError, WorldNotFoundError, WorldEdgeHostedError)
OPEN_STATUSES = ("PENDING", "LEASED", "RETRYABLE")
PAGE = 1_000
RETRY_CHECK_S = 1.0  # how often a world waiting out its backoff asks the ledger whether an operator retried it
log = logging.getLogger("archetype.worlds")


@dataclass
class Backoff:
    """Delay before retrying a failed tick: `base_s` doubled per failed attempt, at most `cap_s`."""

    base_s: float = 0.1
    cap_s: float = 30.0

    def delay(self, attempts: int) -> float:
        return float(min(self.cap_s, self.base_s * 2 ** min(attempts - 1, 62)))


@dataclass
class _Stall:
    log: FailureStreak
    retry_at: float
    attempts: int = 0  # the failures the backoff counts: since the stall began, or since an operator's retry
    recorded: int | None = None  # the ledger's failed attempts as this host's last record of one left them
    checked_at: float | None = None  # when `retry_due` last asked the ledger for an operator's retry
    unrecorded: str | None = None  # the last failure, when the ledger could not take it (a full disk)


class WorldHost:
    def __init__(self, authority: Authority, scheduler: CommandScheduler, *, backoff: Backoff | None = None,
                 log_every_s: float = 30.0, clock: Callable[[], float] = time.monotonic,
                 world_lease_ms: int | None = None, wall_clock: Clock | None = None,
                 tick_interval_ms: int = DEFAULT_TICK_INTERVAL_MS) -> None:  # fmt: skip
        """`wall_clock`: the ledger's clock, which tick clocks read (`clock` times the backoff);
        `tick_interval_ms`: the pace of a world recorded without an interval of its own."""
        self.authority = authority
        self.wall_clock = wall_clock or SystemClock()
        self.tick_interval_ms = tick_interval_ms
        self.world_lease_ms = world_lease_ms
        self.scheduler = scheduler
        self.backoff = backoff or Backoff()
        self.retry_check_s = RETRY_CHECK_S
        self.log_every_s = log_every_s
        self._clock = clock
        self._worlds: dict[str, AsyncWorld] = {}
        self._clocks: dict[str, TickClock] = {}  # world -> its tick clock, following its publications
        # world -> the writer epoch of the world lease this host holds: from its claim on, before the
        # load finishes, so the heartbeat keeps a world alive that is slow to load
        self._leases: dict[str, int] = {}
        self._stalls: dict[str, _Stall] = {}
        self._loading: dict[str, asyncio.Lock] = {}  # per world: one load at a time, worlds in parallel
        self.on_load: list[Callable[[AsyncWorld], None]] = []
        self.migrations = ComponentMigrations()

    async def get(self, world_id: str) -> AsyncWorld:
        world = self._worlds.get(world_id)
        if world is not None:
            return world
        async with self._loading.setdefault(world_id, asyncio.Lock()):
            if world_id not in self._worlds:
                self._worlds[world_id] = await self._load(world_id)
            return self._worlds[world_id]

    async def _load(self, world_id: str) -> AsyncWorld:
        """The world, loaded for this host's writer. A load that fails otherwise than by another
        host's hold on the world (its state names a component no class decodes, the authority
        did not answer) is a failure of the world like a failed tick: recorded, logged and backed
        off (`_failed`)."""
        info: WorldRow | None = None
        try:
            if self.world_lease_ms is None:
                info = await self.authority.acquire_writer(world_id)
            else:
                info = await self.authority.claim_world(world_id, self.scheduler.owner, self.world_lease_ms)
                self._leases[world_id] = info["writer_epoch"]
            return await self._loaded(world_id, info)
        except BaseException as exc:
            self._leases.pop(world_id, None)  # not hosted after all: left to expire (resumed by a retry)
            if isinstance(exc, Exception) and not isinstance(exc, NOT_OURS):
                tick = None if info is None else info["tick_head"] + 1
                await self._failed(world_id, f"loading it for tick {tick} failed" if tick is not None else "loading it failed",
                                   exc, None if info is None else self._recorder(world_id, info))  # fmt: skip
            raise

    def _recorder(self, world_id: str, info: WorldRow) -> Callable[[str], Awaitable[WorldRow]]:
        """How a load of the world for `info`'s writer records its failure (and gives back what
        this session holds)."""

        async def record(error: str) -> WorldRow:
            return await self.authority.record_tick_failure(world_id, self.scheduler.owner, self.scheduler.session(world_id),
                                                     info["writer_epoch"], info["tick_head"] + 1, error)  # fmt: skip

        return record

    async def _loaded(self, world_id: str, info: WorldRow) -> AsyncWorld:
        """The world at its tick head, for the writer `info` names."""
        stored: dict[int, str] = {}
        after = 0
        while True:
            page = await self.authority.load_state(world_id, after_entity_id=after)
            for entity in page["entities"]:
                stored[entity["entity_id"]] = entity["components"]
                after = entity["entity_id"]
            if not page["entities"]:
                break
        if self.migrations.all():
            await self._migrate(world_id, info["writer_epoch"], stored)
        entities: dict[int, dict[str, Any]] = {}
        for entity_id, text in stored.items():
            values = [ComponentValue.model_validate(v) for v in json.loads(text)]
            try:
                entities[entity_id] = {v.key: v.to_component() for v in values}
            except LookupError:
                raise self._migration_required(world_id, stored, values) from None
        # A world idle since it was saved (or since its catalog predates component schemas)
        # publishes nothing: its types are recorded here, so clients can submit them at once.
        await self.scheduler.record_named(world_id, stored.values(), admitting=False)
        clock = TickClock.of(info, self.tick_interval_ms)
        world = AsyncWorld(
            world_id,
            tick=info["tick_head"],
            entities=entities,
            writer_epoch=info["writer_epoch"],
            publisher=LedgerPublisher(self.authority, self.scheduler),
            id_source=AuthorityIdSource(self.authority, world_id),
            tick_mode=clock.mode,
            tick_interval_ms=clock.interval_ms,
        )
        world.materializer = self.scheduler.materialize
        self._clocks[world_id] = clock
        for callback in self.on_load:
            callback(world)
        return world

    async def _migrate(self, world_id: str, writer_epoch: int, stored: dict[int, str]) -> None:
        """Apply, in declaration order, every declared migration whose old fingerprint this world's
        entities or open commands still name: one ledger transaction each, which the ledger
        records with a `schema_migrated` outbox event. `stored` is rewritten in place."""
        done = {m["from_fingerprint"] for m in (await self.authority.components(world_id))["migrations"]}
        pending = [m for m in self.migrations.all() if m.from_fingerprint not in done]
        if not pending:
            return
        commands = await self._open_payloads(world_id)
        for migration in pending:
            old = migration.from_fingerprint
            entity_ids = [entity_id for entity_id, text in stored.items() if old in text]
            sequences = [sequence for sequence, payload in commands.items() if old in payload]
            if not entity_ids and not sequences:
                continue
            writes: list[EntityRewrite] = [
                {"entity_id": e, "components": migration.rewrite_entity(stored[e], f"entity {e}")} for e in entity_ids
            ]
            rewrites: list[PayloadRewrite] = [
                {"sequence": s, "payload": migration.rewrite_text(commands[s], f"command #{s}")} for s in sequences
            ]
            await self.scheduler.record_components(world_id, [migration.to])
            identity: ComponentMigrationRow = {
                "name": migration.name, "from_fingerprint": old, "to_fingerprint": migration.to_fingerprint,
            }  # fmt: skip
            await self.authority.migrate_components(world_id, writer_epoch, identity, writes, rewrites)
            stored.update((w["entity_id"], w["components"]) for w in writes if w["components"] is not None)
            commands.update((r["sequence"], r["payload"]) for r in rewrites)

    async def _open_payloads(self, world_id: str) -> dict[int, str]:
        """The payload of every open command of the world, by sequence."""
        payloads: dict[int, str] = {}
        for status in OPEN_STATUSES:
            after = 0
            while rows := await self.authority.history(world_id, status, after_sequence=after, limit=PAGE):
                payloads.update((row["sequence"], row["payload"]) for row in rows)
                after = rows[-1]["sequence"]
        return payloads

    def _migration_required(self, world_id: str, stored: dict[int, str], values: list[ComponentValue]) -> LookupError:
        for value in values:
            try:
                value.resolve()
            except LookupError:
                count = sum(1 for text in stored.values() if value.fingerprint in text)
                loaded = [
                    cls for (name, _), classes in loaded_components().items() if name == value.name for cls in classes
                ]
                return required_error(world_id, value.name, value.fingerprint, count, loaded)
        return LookupError(f"world {world_id!r} holds a component no loaded class decodes")

    def drop(self, world_id: str) -> None:
        self._worlds.pop(world_id, None)
        self._leases.pop(world_id, None)
        self._clocks.pop(world_id, None)

    def loaded_world(self, world_id: str) -> AsyncWorld | None:
        """The world if it is loaded here (None: not loaded, or dropped)."""
        return self._worlds.get(world_id)

    def clock_of(self, world_id: str) -> TickClock | None:
        """The tick clock of a loaded world, as of its last publication (None: not loaded)."""
        return self._clocks.get(world_id)

    async def step(self, world_id: str, tick: int | None = None) -> CommittedTickReceipt:
        """Run the world's next tick: a realtime world's goes to `tick` when later (the ticks between
        coalesced), a lockstep world's is always the next one, due when its clock says."""
        world = await self.get(world_id)  # a load that fails is recorded there
        stall = self._stalls.get(world_id)
        if stall is not None and stall.unrecorded is not None:
            # a stall the ledger could not take is recorded before the tick that may end it, so the
            # history has it (world_stalled, then world_recovered) even when that tick succeeds
            with contextlib.suppress(Exception):
                stall.recorded = (await self._tick_recorder(world, refused=False)(stall.unrecorded))["failed_attempts"]
                stall.unrecorded = None
        clock = self._clocks.get(world_id)  # None: dropped meanwhile (its publication is refused)
        prepared = world.coordinator.prepared
        due = None
        if clock is not None and clock.lockstep:  # a prepared tick publishes as it is, with its own due time
            due = prepared.due_ms if prepared is not None else clock.due_at(self.wall_clock.now_ms(), world.tick)
        try:
            receipt = await world.step(tick, due_ms=due)
        except LOST_WRITER:
            self.drop(world_id)
            raise
        except Exception as exc:
            refused = world.coordinator.prepared is not None and refuses_content(exc)
            await self._failed(world_id, f"tick {world.tick + 1} failed", exc, self._tick_recorder(world, refused))
            raise
        if clock is not None and due is not None:
            self._clocks[world_id] = clock.stepped(receipt.tick, due, self.wall_clock.now_ms())
        stall = self._stalls.pop(world_id, None)
        if stall is not None:
            stall.log.succeeded(f"recovered: tick {receipt.tick} published")
        return receipt

    def _tick_recorder(self, world: AsyncWorld, refused: bool) -> Callable[[str], Awaitable[WorldRow]]:
        """How a failed step of `world` records its failure. A prepared tick keeps its leases (its
        republication needs them), unless the authority `refused` its content (`invalid_command`,
        `payload_too_large`): republishing the same bytes would be refused forever, so the world is
        dropped, prepared tick and all, and its next use loads it afresh and runs the tick again."""

        async def record(error: str) -> WorldRow:
            async with world.lock:
                try:
                    return await self.authority.record_tick_failure(
                        world.world_id, self.scheduler.owner, self.scheduler.session(world.world_id), world.writer_epoch,
                        world.tick + 1, error, release=world.coordinator.prepared is None or refused,
                    )  # fmt: skip
                finally:
                    if refused and self._worlds.get(world.world_id) is world:
                        self.drop(world.world_id)

        return record

    def failures(self, world_id: str) -> int:
        """The failed attempts of the world's stall in this host (0: it is not stalled here)."""
        stall = self._stalls.get(world_id)
        return 0 if stall is None else stall.log.failures

    def retry_at(self, world_id: str) -> float | None:
        """When the backoff of a world failing here ends, on the host's clock (None: not failing here)."""
        stall = self._stalls.get(world_id)
        return None if stall is None else stall.retry_at

    async def retry_due(self, world_id: str) -> bool:
        """False while a failed world waits out its backoff, unless an operator asked to retry it
        now (`retry_world`: the ledger's failed attempts fell below what this host recorded, which
        it asks at once after a failure, then at most every `retry_check_s`). The backoff then
        starts again from its first delay."""
        stall = self._stalls.get(world_id)
        if stall is None:
            return True
        now = self._clock()
        if now >= stall.retry_at:
            return True
        if stall.recorded is None or (stall.checked_at is not None and now - stall.checked_at < self.retry_check_s):
            return False
        stall.checked_at = now
        try:
            attempts = (await self.authority.world_info(world_id))["failed_attempts"]
        except Exception:  # the backoff stands; asked again later
            return False
        if attempts >= stall.recorded:
            return False
        log.warning("world %s: retrying now, as an operator asked (the backoff had %.1f s to go)", world_id, stall.retry_at - now)
        stall.retry_at, stall.attempts, stall.recorded = now, attempts, attempts
        return True

    async def _failed(self, world_id: str, what: str, exc: Exception,
                      record: Callable[[str], Awaitable[WorldRow]] | None) -> None:  # fmt: skip
        """Back off, log (the first failure of a stall with its traceback, then at most one line
        every `log_every_s`) and record the failure in the ledger with `record` (None: the world
        has no writer here to record it). `what` says what failed, for the log."""
        now = self._clock()
        stall = self._stalls.get(world_id)
        if stall is None:
            stall = self._stalls[world_id] = _Stall(FailureStreak(log, f"world {world_id}", self.log_every_s, self._clock), now)
        stall.attempts += 1
        delay = self.backoff.delay(stall.attempts)
        stall.retry_at, stall.checked_at = now + delay, None
        stall.log.failed(exc, f"{what}; retrying in {delay:.1f} s")
        error = error_text(exc)
        if record is None:
            return
        try:
            stall.recorded = (await record(error))["failed_attempts"]
            stall.unrecorded = None
        except LOST_WRITER:
            self.drop(world_id)
        except Exception as report:
            if stall.unrecorded is None:  # once per streak of unrecorded failures
                log.warning("world %s: could not record the failure: %s", world_id, error_text(report))
            stall.unrecorded = error

    async def renew(self) -> list[str]:
        """The heartbeat of a host with world leases: renew every world lease it holds (concurrently,
        so a catalog's calls share group commits). A world whose lease was taken over is dropped;
        answers those."""
        lease_ms = self.world_lease_ms
        if lease_ms is None:
            return []

        async def renew(world_id: str, writer_epoch: int) -> str | None:
            try:
                await self.authority.renew_world(world_id, self.scheduler.owner, writer_epoch, lease_ms)
            except LOST_WRITER:
                if self._leases.get(world_id) == writer_epoch:
                    self.drop(world_id)
                return world_id
            return None

        lost = await asyncio.gather(*(renew(w, epoch) for w, epoch in list(self._leases.items())))
        return [world_id for world_id in lost if world_id is not None]

    async def adopt(self, world_id: str) -> None:
        """Make the world lease name this host's owner without loading the world: claim it and give it
        back at once, so that its next load here resumes the lease with no epoch bump (cooperating
        runners moving an idle world to its new host: one bump, now; docs/cli.md). One at a time with
        the world's loads; a world this host holds or is loading is left as it is."""
        assert self.world_lease_ms is not None, "only a host with world leases adopts worlds"
        async with self._loading.setdefault(world_id, asyncio.Lock()):
            if world_id in self._worlds or world_id in self._leases:
                return
            claimed = await self.authority.claim_world(world_id, self.scheduler.owner, self.world_lease_ms)
            await self.authority.release_world(world_id, self.scheduler.owner, claimed["writer_epoch"])

    async def release(self, world_id: str, to: str | None = None) -> None:
        """Stop hosting a world: after its tick in progress, give back its command leases and its
        world lease (another runner may claim it at once), and drop it. With `to` (cooperating
        runners: the runner whose share the world became), the world lease is then claimed in its
        name (one epoch bump, here): it names its new host at once, which resumes it with no bump
        when it first loads the world, however long the world stays idle, and nobody else may take
        it meanwhile; an idle world's lease simply expires, naming its host."""
        world = self._worlds.get(world_id)
        if world is None:
            return
        try:
            async with world.lock:
                await self.authority.release(world_id, self.scheduler.owner, self.scheduler.session(world_id),
                                             world.writer_epoch)  # fmt: skip
                if self.world_lease_ms is not None:
                    await self.authority.release_world(world_id, self.scheduler.owner, world.writer_epoch)
                    if to is not None:
                        with contextlib.suppress(WorldLeaseHeldError, WorldClosingError, WorldNotFoundError):
                            await self.authority.claim_world(world_id, to, self.world_lease_ms)  # unless taken meanwhile
        except Exception as exc:  # fenced or gone: its leases are another writer's now, or expire
            log.warning("world %s: leases not released: %s", world_id, error_text(exc))
        finally:
            if self._worlds.get(world_id) is world:
                self.drop(world_id)

    async def close(self) -> None:
        """Give back every lease this host's worlds hold (a clean shutdown leaves nothing LEASED);
        concurrently, so a catalog's calls share group commits."""
        await asyncio.gather(*(self.release(world_id) for world_id in list(self._worlds)))

    @property
    def loaded(self) -> list[str]:
        return sorted(self._worlds)
