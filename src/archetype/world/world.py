"""AsyncWorld: one tick-based ECS world.

`step()` runs one tick, holding the world's operation lock, in this order:
command materialization -> PreTick hooks -> active-signature discovery -> processors ->
commit (publish the tick manifest) -> PostTick hooks. Every mutation of a tick goes through
the layered `WorldState`, so nothing reaches committed state before publication.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from archetype.canonical import MAX_SAFE_INTEGER
from archetype.world import columnar
from archetype.world.commit import (
    CommitCoordinator,
    CommittedTickReceipt,
    EntityEncoder,
    InMemoryPublisher,
    TickPublisher,
)
from archetype.world.components import Component, ComponentTypeRef, type_key
from archetype.world.limits import STATE_CHUNK_LIMIT, StateTooLargeError, WriteBudget
from archetype.world.state import Components, Cover, WorldState, WriteSet
from archetype.world.tick_mode import DEFAULT_TICK_INTERVAL_MS, DEFAULT_TICK_MODE, TickMode, dt_seconds


# -- hooks: each class is both the hook kind and the event it receives --
@dataclass(frozen=True)
class PreTick:
    tick: int
    dt: float  # the simulated seconds this tick advances the world (AsyncWorld.dt)


@dataclass(frozen=True)
class PostTick:
    receipt: CommittedTickReceipt


@dataclass(frozen=True)
class OnSpawn:
    entity_id: int


@dataclass(frozen=True)
class OnDestroy:
    entity_id: int


HOOK_KINDS = (PreTick, PostTick, OnSpawn, OnDestroy)
Hook = Callable[["AsyncWorld", Any], None]
Processor = Callable[["AsyncWorld", int, int, tuple[Component, ...]], None]
# Called once per tick, in its place among the processors; it finds its entities itself, through
# the world's tables (archetype.vector).
BatchProcessor = Callable[["AsyncWorld", int], None]
Materializer = Callable[["AsyncWorld", int], Awaitable[None]]


class EntityIdSource(Protocol):
    async def reserve(self, count: int) -> int:
        """Reserve `count` consecutive never-used entity ids; return the first."""


class CounterIdSource:
    """Entity ids for a world with no authority: a plain counter from 1."""

    def __init__(self, next_id: int = 1) -> None:
        self._next = next_id

    async def reserve(self, count: int) -> int:
        first = self._next
        self._next += count
        return first


class EntityIdsExhaustedError(RuntimeError):
    code = "entity_ids_exhausted"


@dataclass
class _ProcessorEntry:
    name: str
    fn: Processor | None
    keys: frozenset[str]
    order: tuple[str, ...]
    batch: BatchProcessor | None = None


async def _no_materialization(world: AsyncWorld, tick: int) -> None:
    return None


class AsyncWorld:
    ID_BLOCK = 1024

    def __init__(
        self,
        world_id: str,
        *,
        tick: int = -1,
        entities: dict[int, Components] | None = None,
        writer_epoch: int = 0,
        publisher: TickPublisher | None = None,
        id_source: EntityIdSource | None = None,
        tick_mode: TickMode = DEFAULT_TICK_MODE,
        tick_interval_ms: int = DEFAULT_TICK_INTERVAL_MS,
    ) -> None:
        self.world_id = world_id
        self.tick = tick  # the last published tick; -1 before the first
        # how its ticks follow time (docs/ledger.md, "Tick modes"): its host loads them from the ledger
        self.tick_mode: TickMode = tick_mode
        self.tick_interval_ms = tick_interval_ms
        # the simulated seconds the tick being run advances the world (the last run tick's, between ticks)
        self.dt = dt_seconds(tick_mode, tick_interval_ms, 1)
        self.writer_epoch = writer_epoch
        self.lock = asyncio.Lock()
        self.state = WorldState(entities)
        self.coordinator = CommitCoordinator(world_id)
        self.publisher: TickPublisher = publisher or InMemoryPublisher()
        self.materializer: Materializer = _no_materialization
        self._id_source = id_source or CounterIdSource(max((e for e, _ in self.state.items()), default=0) + 1)
        self._ids = range(0)
        self._processors: list[_ProcessorEntry] = []
        self.encoder = EntityEncoder(self.state)
        self.budget = WriteBudget()  # what validated mutations wrote since the last prepared tick
        # characters of the last snapshot this world published (None until it publishes one), and
        # of the deltas it published since
        self._snapshot_size: int | None = None
        self._delta_size = 0
        # the whole columns the deltas since the last snapshot sent (None once one sent anything
        # else), and those of the prepared tick: a delta covering them replaces them
        self._cover: Cover | None = {}
        self._prepared_cover: Cover | None = None
        self._hooks: dict[type, list[Hook]] = {kind: [] for kind in HOOK_KINDS}

    # -- configuration --
    def add_processor(self, fn: Processor, *component_types: type[Component], name: str | None = None) -> None:
        if not component_types:
            raise ValueError("a processor needs at least one component type")
        order = tuple(type_key(t) for t in component_types)
        self._processors.append(_ProcessorEntry(name or fn.__name__, fn, frozenset(order), order))

    def add_batch_processor(
        self, fn: BatchProcessor, *component_types: type[Component], name: str | None = None
    ) -> None:
        """A processor called once per tick, in its place among the processors, that finds the
        entities with `component_types` itself (`state.tables`, `state.matching`): what a
        vectorised processor (archetype.vector) runs on. It writes through the layered state."""
        if not component_types:
            raise ValueError("a processor needs at least one component type")
        order = tuple(type_key(t) for t in component_types)
        label = name or str(getattr(fn, "__name__", "batch"))
        self._processors.append(_ProcessorEntry(label, None, frozenset(order), order, fn))

    def add_hook(self, kind: type, fn: Hook) -> None:
        if kind not in self._hooks:
            raise ValueError(f"{kind!r} is not a hook kind; use one of PreTick, PostTick, OnSpawn, OnDestroy")
        self._hooks[kind].append(fn)

    @property
    def has_systems(self) -> bool:
        """Whether something changes the world every tick even when no command is due (a processor
        or a PreTick hook): what a host asks before letting an idle world stop ticking."""
        return bool(self._processors or self._hooks[PreTick])

    def _fire(self, event: Any) -> None:
        for fn in self._hooks[type(event)]:
            fn(self, event)

    # -- entity ids --
    async def ensure_entity_ids(self, count: int = 1) -> None:
        if len(self._ids) < count:
            size = max(count, self.ID_BLOCK)
            first = await self._id_source.reserve(size)
            self._ids = range(first, first + size)

    def _next_entity_id(self) -> int:
        if not self._ids:
            raise EntityIdsExhaustedError(
                f"world {self.world_id} used its reserved block of entity ids within one tick; "
                "raise AsyncWorld.ID_BLOCK or spawn through durable commands"
            )
        entity_id, self._ids = self._ids[0], self._ids[1:]
        return entity_id

    # -- reads --
    def get(self, entity_id: int) -> dict[type[Component], Component]:
        components = self._require(entity_id)
        return {type(c): c for c in components.values()}

    def exists(self, entity_id: int) -> bool:
        return self.state.get(entity_id) is not None

    def query(self, *component_types: type[Component] | ComponentTypeRef) -> list[tuple[int, tuple[Component, ...]]]:
        keys = [t.key if isinstance(t, ComponentTypeRef) else type_key(t) for t in component_types]
        found = []
        for entity_id in self.state.matching(frozenset(keys)):
            components = self.state.get(entity_id)
            assert components is not None  # matching() answers live entities only
            found.append((entity_id, tuple(components[k] for k in keys)))
        return found

    def _require(self, entity_id: int) -> Components:
        components = self.state.get(entity_id)
        if components is None:
            raise LookupError(f"entity {entity_id} does not exist in world {self.world_id}")
        return components

    # -- mutations (the caller holds `lock`) --
    def spawn(self, components: Iterable[Component], entity_id: int | None = None) -> int:
        by_key = _by_key(components)
        if entity_id is None:
            entity_id = self._next_entity_id()
        elif not 1 <= entity_id <= MAX_SAFE_INTEGER:
            raise ValueError(f"entity id {entity_id} is outside 1..2**53-1")
        if self.state.get(entity_id) is not None:
            raise ValueError(f"entity {entity_id} already exists in world {self.world_id}")
        self.state.put(entity_id, by_key)
        self._fire(OnSpawn(entity_id))
        return entity_id

    def despawn(self, entity_id: int) -> None:
        self._require(entity_id)
        self._fire(OnDestroy(entity_id))
        self.state.put(entity_id, None)

    def update(self, entity_id: int, components: Iterable[Component]) -> None:
        current = self._require(entity_id)
        changes = _by_key(components)
        updated = {**current, **changes}
        if len(updated) != len(current):  # a change of a component the entity lacks
            missing = [k.split(":")[0] for k in changes if k not in current]
            raise LookupError(f"entity {entity_id} has no component(s) {missing} to update")
        self.state.put(entity_id, updated)

    def add_components(self, entity_id: int, components: Iterable[Component]) -> None:
        current = self._require(entity_id)
        additions = _by_key(components)
        present = [k.split(":")[0] for k in additions if k in current]
        if present:
            raise ValueError(f"entity {entity_id} already has component(s) {present}")
        self.state.put(entity_id, {**current, **additions})

    def remove_components(self, entity_id: int, component_types: Iterable[type[Component] | ComponentTypeRef]) -> None:
        current = self._require(entity_id)
        keys = [t.key if isinstance(t, ComponentTypeRef) else type_key(t) for t in component_types]
        missing = [k.split(":")[0] for k in keys if k not in current]
        if missing:
            raise LookupError(f"entity {entity_id} has no component(s) {missing} to remove")
        self.state.put(entity_id, {k: c for k, c in current.items() if k not in keys})

    def atomically(self, fn: Callable[[], Any], *, validate: bool = True) -> Any:
        """Run `fn` in its own layer: all of its mutations land, or none do.

        With `validate`, every entity `fn` wrote must have a canonical wire form (else
        NonCanonicalValueError) within the state limits (else StateTooLargeError; both
        ValueErrors, and nothing lands), so a bad value or an oversized write fails the mutation
        that made it instead of every later tick's publication.
        """
        self.state.push()
        try:
            result = fn()
            if validate:
                top = self.state.top
                self.budget.spend(self.encoder.encode(top), lambda entity_id: [
                    (type(c).__name__, self.encoder.component(entity_id, key, c)) for key, c in top[entity_id].items()  # type: ignore[union-attr]
                ])  # fmt: skip
        except BaseException:
            self.state.drop()
            raise
        self.state.merge()
        return result

    # -- the tick --
    async def step(self, tick: int | None = None, *, due_ms: int | None = None) -> CommittedTickReceipt:
        """Run and publish the next tick. A realtime world goes to `tick` when later: the ticks
        between are empty and coalesced, never run or published (its clock moved on; docs/ledger.md).
        A lockstep world runs every tick: always the next one, whatever `tick` says; `due_ms` is when
        its schedule had it due (what its host's clock says, recorded at publication). A tick
        already prepared is published as it is."""
        async with self.lock:
            if self.coordinator.prepared is None:
                lockstep = self.tick_mode == "lockstep"
                await self._prepare(self.tick + 1 if lockstep else max(self.tick + 1, tick or 0), due_ms)
            prepared = self.coordinator.prepared
            assert prepared is not None
            tick = prepared.manifest.tick
            await self.publisher.publish(prepared)
            with _collection_paused():
                self.state.commit_sealed(self.encoder.known_texts())
                self.encoder.committed()
            size = sum(map(len, prepared.chunks))
            if prepared.snapshot:
                self._snapshot_size, self._delta_size, self._cover = size, 0, {}
            elif prepared.replaces_deltas:
                self._delta_size, self._cover = size, self._prepared_cover
            elif prepared.chunks:
                self._delta_size += size
                self._cover = _joined(self._cover, self._prepared_cover)
            self.tick = tick
            manifest = prepared.manifest
            self.coordinator.clear()
            receipt = CommittedTickReceipt(
                world_id=self.world_id,
                tick=tick,
                commit_token=manifest.commit_token,
                commands_applied=len(manifest.applied_command_ids),
            )
            self._fire(PostTick(receipt))
            return receipt

    async def _prepare(self, tick: int, due_ms: int | None) -> None:
        """Run the tick up to its prepared manifest. Whatever fails on the way (a command's
        materialization, a hook, a processor, the encoding, a lost answer, a cancellation)
        discards the tick whole: its layer, its settlements and the entity ids it took. The next
        step runs it again from the published state, in ledger order."""
        base, ids, budget = self.state.depth, self._ids, self.budget.copy()
        self.dt = dt_seconds(self.tick_mode, self.tick_interval_ms, tick - self.tick)
        self.state.push()
        try:
            await self.ensure_entity_ids()
            await self.materializer(self, tick)
            with _collection_paused():
                self.atomically(lambda: self._run_systems(tick), validate=False)
                write_set = self.state.write_set()
                written = self.state.changed(write_set)
                # A delta that sends whole columns covering all the deltas since the snapshot sent
                # replaces them (a moving world's Position column, tick after tick). A snapshot
                # instead of the delta once the deltas kept since the last snapshot would outgrow
                # it, in characters (what the authority keeps and reads of a world's state stays
                # within twice its size), and on this world's first publication with a change (it
                # does not know what the overlay holds), or when every entity changed whole (the
                # delta would be larger than the snapshot: it is not encoded).
                delta = bool(written) and self._snapshot_size is not None and not self.state.entered_all(write_set)
                chunks = self._encode(write_set, False) if delta else []
                cover = self._prepared_cover = self.state.whole_columns(write_set) if chunks else None
                replaces = bool(self._cover) and _covers(cover, self._cover)
                kept = (0 if replaces else self._delta_size) + sum(map(len, chunks))
                snapshot = bool(written) and (not delta or kept > (self._snapshot_size or 0))
                if snapshot:
                    chunks = self._encode(write_set, True)
                _check_chunks(chunks)
                self.coordinator.prepare(tick, self.writer_epoch, written, chunks, snapshot=snapshot,
                                         replaces_deltas=replaces and not snapshot, due_ms=due_ms)  # fmt: skip
        except BaseException:
            self.state.unwind(base)
            self.coordinator.clear()
            self._ids, self.budget = ids, budget
            raise
        self.state.seal(write_set)
        self.budget = WriteBudget()  # sealed: mutations from here on are the next tick's

    def _encode(self, write_set: WriteSet, snapshot: bool) -> list[str]:
        """The chunks of the tick's delta (what `state.changed` found), or of a snapshot."""
        sections, removed = self.state.sections(write_set, snapshot, self.encoder.component)
        return columnar.encode(sections, removed)

    def _run_systems(self, tick: int) -> None:
        self._fire(PreTick(tick, self.dt))
        for processor in self._processors:
            if processor.batch is not None:
                processor.batch(self, tick)
                continue
            fn = processor.fn
            assert fn is not None  # an entry has a per-entity or a batch function
            # the scan skips an entity an earlier call despawned or took a component of
            for entity_id, components in self.state.scan(processor.keys, processor.order):
                fn(self, tick, entity_id, components)


def _check_chunks(chunks: list[str]) -> None:
    """A chunk larger than a state row fails the tick before it is prepared: no authority would
    take it. Mutations are held to the state limits as they land; this is what a processor's or
    hook's write (unchecked, so as not to slow every tick) or a component type with tens of
    thousands of numeric fields can still reach."""
    for chunk in chunks:
        if len(chunk) > STATE_CHUNK_LIMIT:
            raise StateTooLargeError(
                f"the tick's state write has a chunk of {len(chunk):,} characters, over the limit of "
                f'{STATE_CHUNK_LIMIT:,} (docs/ledger.md, "State limits")'
            )


def _covers(above: Cover | None, below: Cover | None) -> bool:
    """Whether whole columns `above` hold every column of `below` (None: not only whole columns)."""
    if above is None or below is None:
        return False
    return all(signature in above and keys <= above[signature] for signature, keys in below.items())


def _joined(below: Cover | None, above: Cover | None) -> Cover | None:
    """The whole columns two deltas sent between them (None when either sent something else)."""
    if below is None or above is None:
        return None
    joined = dict(below)
    for signature, keys in above.items():
        joined[signature] = joined.get(signature, frozenset()) | keys
    return joined


@contextmanager
def _collection_paused() -> Iterator[None]:
    """No automatic garbage collection inside a tick's synchronous work (processors, encoding,
    folding the write-set in). A tick of a large world allocates a new object or two per changed
    entity, and each batch of them set off a collection that scanned the whole (long-lived)
    world again: several full passes per tick. Reference counting frees the tick's garbage as
    usual; what is left for the collector is collected once, at the next allocation after it."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _by_key(components: Iterable[Component]) -> Components:
    by_key: Components = {}
    for component in components:
        if not isinstance(component, Component):
            raise TypeError(f"{component!r} is not a Component instance")
        key = component.__component_key__
        if key in by_key:
            raise ValueError(f"component {type(component).__name__} given twice")
        by_key[key] = component
    return by_key
