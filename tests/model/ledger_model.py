"""A reference model of the command ledger and of a runner's tick, written from docs/ledger.md.

Plain dicts and lists, no SQL, no import from `archetype.commands.ledger*` or the scheduler: the
point is a second, independent reading of the documented rules, so a stateful test can drive it
next to a real authority and fail on any difference. Section names below follow docs/ledger.md;
read the two side by side.

What the model decides from its inputs, not from the code under test:
- which outcome a materialization has (the flaky Probe's planned failures, and the six mutations'
  effect on entity state, which decides `rejected` for a missing entity or component);
- every status, attempt, lease, guard, settlement, manifest, entity and outbox event.

What it cannot know and therefore takes as input or leaves to the test to map:
- the start of each world's counters (read once from the freshly created world);
- runner session ids and commit tokens (opaque: the model invents its own, the test keeps a
  one-to-one mapping to the real ones);
- error texts (the model only says whether there is one, and for a Probe failure which message it
  must contain).

Where the documents leave a choice open, the model picks the reading written next to it in a
comment starting with "AMBIGUITY", and tests/model/README.md lists them.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

OPEN = ("PENDING", "LEASED", "RETRYABLE")
# "lease_ms from 1 ms to a minute (60,000 ms)": world leases and runner registrations;
# "1 ms to ten minutes (600,000 ms)": command leases. Else invalid, and nothing changes.
HOST_LEASE_LONGEST_MS = 60_000
COMMAND_LEASE_LONGEST_MS = 600_000
AMBIGUITY_NAMED = 10  # "naming up to ten of their principals"
TERMINAL = ("APPLIED", "REJECTED", "DEAD_LETTER", "CANCELLED")
# Outbox: the event type follows from the status a transition leaves the command in.
EVENT_TYPE = {
    "PENDING": "admitted",
    "APPLIED": "applied",
    "REJECTED": "rejected",
    "RETRYABLE": "retry_scheduled",
    "DEAD_LETTER": "dead_lettered",
    "CANCELLED": "cancelled",
}
ANY_TEXT = ""  # an error the model knows exists but whose wording it does not predict
ID_BLOCK = 1024  # "a running world takes blocks of AsyncWorld.ID_BLOCK (1024)"
# "State limits": characters of canonical JSON, per component, entity, command's write, tick's write-set
COMPONENT_LIMIT, ENTITY_LIMIT, WRITE_LIMIT, WRITE_SET_LIMIT = 1_000_000, 1_500_000, 4_000_000, 16_000_000
STATE_TOO_LARGE = "StateTooLargeError: "  # "REJECTED with `StateTooLargeError: <what>: ...` as its error"


class ModelError(Exception):
    """A refusal the rules prescribe. `kind` names it (not_found, closing, stale, lease_lost,
    conflict, reservation_not_owned, unknown_component, invalid, fault, unknown); the state is unchanged unless the
    refusal is a lost answer (then the transaction did happen)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class ModelCrash(BaseException):
    """A process-fatal BaseException raised by a materializer: propagates, writes nothing."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


# -- operations: the six portable mutations, as plain values --------------------------------
# A component value is (name, data) with data a tuple of (field, value) pairs (hashable, so that
# identical content compares equal: the model's stand-in for the digest).
Comp = tuple[str, tuple[tuple[str, Any], ...]]


@dataclass(frozen=True)
class Mutation:
    operation: str  # spawn | spawn_reserved | despawn | update | add_components | remove_components
    entity_id: int | None = None
    components: tuple[Comp, ...] = ()
    types: tuple[str, ...] = ()  # component names, for remove_components
    unrecorded: bool = False  # its values name a fingerprint the world never recorded (made up by a client)

    def probe_label(self) -> str | None:
        for name, data in self.components:
            if name == "Probe":
                return dict(data)["label"]
        return None

    def names(self) -> set[str]:
        """The component types it names: its values' and its type references'."""
        return {name for name, _ in self.components} | set(self.types)

    def renamed(self, old: str, new: str) -> Mutation:
        """Every value and type reference of `old` moved to `new`, its data as it was (the stand-in
        migration's function keeps the fields), each in its place."""
        return dataclasses.replace(
            self, components=tuple((new if n == old else n, d) for n, d in self.components),
            types=tuple(new if n == old else n for n in self.types),
        )  # fmt: skip


@dataclass(frozen=True)
class Options:
    tick: int
    priority: int = 0
    max_attempts: int = 3


@dataclass(frozen=True)
class Submission:
    """One command as a caller submits it (what `DeferredItem` + the caller's principal say)."""

    command_id: str
    mutation: Mutation
    options: Options
    principal: str | None
    # for spawn_reserved: the spawn request it fulfils ("spawn payload, options, principal")
    request: tuple | None = None

    @property
    def scope(self) -> str:
        return self.principal or ""  # trusted callers share the scope ''

    def identity(self, world_id: str) -> tuple:
        """The digest's fields: command id, schema version, world, scheduled tick, priority,
        attempt budget, operation, payload and principal (origin, timestamps, state are not)."""
        o = self.options
        return (self.command_id, world_id, o.tick, o.priority, o.max_attempts, exact(self.mutation), self.principal)


def exact(value: Any) -> Any:
    """A value with its floats spelled out: 0.0 == -0.0 in Python, but not in canonical JSON,
    and identity is decided on the canonical form ("floats keep their identity")."""
    if isinstance(value, float):
        return ("float", repr(value))
    if isinstance(value, tuple):
        return tuple(exact(v) for v in value)
    if isinstance(value, Mutation):
        return (value.operation, value.entity_id, exact(value.components), value.types, value.unrecorded)
    return value


def spawn_request(components: tuple[Comp, ...], options: Options, principal: str | None) -> tuple:
    """What a spawn reservation is bound to: the spawn payload, its options and its principal."""
    return (components, options, principal)


# -- ledger rows -----------------------------------------------------------------------------
@dataclass
class Command:
    sub: Submission
    world_id: str
    sequence: int
    created_at: int
    status: str = "PENDING"
    attempts: int = 0
    lease_owner: str | None = None
    lease_session: str | None = None
    lease_expires_at: int | None = None
    applied_tick: int | None = None
    last_error: str | None = None
    updated_at: int = 0
    redriven_from: int | None = None  # the sequence of the dead letter this command redrives
    redriven_by: int | None = None  # a dead letter's: the sequence of the command that redrove it
    migrated: Mutation | None = None  # its payload as a component migration rewrote it (the identity stays `sub`)

    @property
    def mutation(self) -> Mutation:
        """What it runs: its payload now (a migration may have rewritten it since it was admitted)."""
        return self.migrated or self.sub.mutation

    @property
    def order(self) -> tuple[int, int, int]:
        """Lease order: (scheduled_tick, priority, sequence); lower priority values first."""
        return (self.sub.options.tick, self.sub.options.priority, self.sequence)

    @property
    def reserved_entity_id(self) -> int | None:
        return self.mutation.entity_id if self.mutation.operation == "spawn_reserved" else None

    def clear_lease(self) -> None:
        self.lease_owner = self.lease_session = self.lease_expires_at = None


@dataclass
class Event:
    event_seq: int
    command_id: str
    event_type: str
    status: str
    operation: str
    tick: int
    principal: str | None
    occurred_at: int
    attempts: int
    max_attempts: int | None  # None: a world's own (health) event
    error: str | None
    since: int | None = None  # a health event: when the world stalled
    actor: str | None = None  # an event an operator's call wrote: who asked ("Who asked": payload `actor`)
    record: dict | None = None  # a schema_migrated event: the migration record, its payload


@dataclass
class Settlement:
    sequence: int
    command_id: str
    outcome: str  # applied | rejected | failed
    error: str | None


class PartialWrite(dict):
    """A column delta's entry (docs/storage.md, "partial" sections): components (name -> data)
    that replace those of the entity as published, which keeps its other components."""


def apply_writes(entities: dict[int, dict[str, dict]], writes: dict[int, dict[str, dict] | None]) -> None:
    """A tick's writes laid over the published entities: a whole entry replaces its entity, None
    removes it, a PartialWrite replaces only the components it carries."""
    for entity_id, components in writes.items():
        if components is None:
            entities.pop(entity_id, None)
        elif isinstance(components, PartialWrite):
            entities[entity_id].update(copy.deepcopy(dict(components)))
        else:
            entities[entity_id] = copy.deepcopy(components)


@dataclass
class Manifest:
    token: int  # opaque: the test maps it to the real commit token
    tick: int
    writer_epoch: int
    settlements: list[Settlement]
    # entity id -> components (name -> data), None: despawned, a PartialWrite: some components replaced
    writes: dict[int, dict[str, dict] | None]
    due_ms: int | None = None  # "Tick modes": a lockstep tick's due time, as its host sends it

    @property
    def written_entity_ids(self) -> list[int]:
        return sorted(self.writes)


@dataclass
class World:
    world_id: str
    name: str
    created_at: int
    next_entity_id: int
    next_sequence: int
    status: str = "ACTIVE"
    tick_head: int = -1
    writer_epoch: int = 0
    next_event_seq: int = 1  # "the per-world event sequence starting at 1"
    projected_seq: int = 0
    guard: tuple[int, str] | None = None  # (sequence, session)
    health: str = "ACTIVE"  # "World health": ACTIVE | STALLED
    failed_attempts: int = 0
    health_error: str | None = None
    stalled_since: int | None = None
    # "Idle worlds": the tick clock's anchor, set at creation (tick -1 then); a realtime world's is
    # never moved, a lockstep world's follows its head ("Tick modes")
    clock_tick: int = -1
    clock_ms: int | None = None
    tick_mode: str = "lockstep"  # "Tick modes": recorded at creation
    tick_interval_ms: int | None = 100
    tick_lag_ms: int = 0
    host_owner: str | None = None  # "World leases": the host, and until when it holds the world
    host_expires_at: int | None = None
    # "Admission": a principal's admitted commands per tick they run at, (scope, tick) -> count
    quota_used: dict[tuple[str, int], int] = field(default_factory=dict)
    # "Component schemas and migrations": a superseded component name -> the name it became
    superseded: dict[str, str] = field(default_factory=dict)
    commands: dict[int, Command] = field(default_factory=dict)  # by sequence
    keys: dict[tuple[str, str], int] = field(default_factory=dict)  # (scope, command id) -> sequence
    reservations: dict[tuple[str, str], tuple[int, tuple]] = field(default_factory=dict)  # -> (entity, request)
    reserved_at: dict[tuple[str, str], int] = field(default_factory=dict)  # -> when it was reserved
    entities: dict[int, dict[str, dict]] = field(default_factory=dict)  # as of the tick head
    # docs/storage.md "State at a tick": the published entities after each published tick (a
    # migration rewrites the head's), and the oldest tick whose state is retained
    published: dict[int, dict[int, dict[str, dict]]] = field(default_factory=lambda: {-1: {}})
    state_from_tick: int = -1
    published_at: dict[int, int] = field(default_factory=dict)  # tick -> when it published ("Forks": when the world left a tick)
    migrated_at_tick: dict[str, int] = field(default_factory=dict)  # a superseded name -> the tick of its migration
    forked_from: tuple[str, int] | None = None  # "Forks": (source world, tick) of a fork
    manifests: list[Manifest] = field(default_factory=list)
    outbox: list[Event] = field(default_factory=list)  # not yet acknowledged

    def command(self, scope: str, command_id: str) -> Command | None:
        sequence = self.keys.get((scope, command_id))
        return None if sequence is None else self.commands[sequence]

    def next_due_tick(self) -> int | None:
        """docs/ledger.md "Ordering and leasing": the lowest scheduled tick of an open command."""
        return min((c.sub.options.tick for c in self.commands.values() if c.status in OPEN), default=None)

    def record_state(self) -> None:
        """What the world holds after its head tick published (or a migration rewrote it)."""
        self.published[self.tick_head] = copy.deepcopy(self.entities)

    def state_at(self, tick: int) -> dict[int, dict[str, dict]]:
        """docs/storage.md "State at a tick": any tick from the oldest retained one to the head
        (`tick_not_retained` otherwise) reads as the world published it: at the last tick it
        published at or before it (a realtime world's coalesced ticks read as the tick before)."""
        if not self.state_from_tick <= tick <= self.tick_head:
            raise ModelError("tick_not_retained")
        return self.published[max(t for t in self.published if t <= tick)]

    def read_state(self, names: set[str] | None, entity_ids: set[int] | None,
                   tick: int | None = None) -> list[tuple[int, dict[str, dict]]]:  # fmt: skip
        """docs/storage.md "Reading state", every page of it in a row: the published entities in
        id order (at the head, or at `tick`); with `names`, those that have a component of each
        named type, with only those components; with `entity_ids`, those ids only."""
        found = []
        entities = self.entities if tick is None else self.state_at(tick)
        for entity_id in sorted(entities):
            components = entities[entity_id]
            if entity_ids is not None and entity_id not in entity_ids:
                continue
            if names is not None:
                if not names <= components.keys():
                    continue
                components = {name: data for name, data in components.items() if name in names}
            found.append((entity_id, components))
        return found

    def commands_by_id(self, scope: str, command_ids: list[str]) -> list[Command]:
        """docs/ledger.md "Reads": the commands of `scope` among these ids, in sequence order."""
        return sorted((c for c in map(functools.partial(self.command, scope), set(command_ids)) if c), key=lambda c: c.sequence)


class Ledger:
    """docs/ledger.md, one method per ledger operation; each is one transaction (destroy: a short
    series): it either raises ModelError and changes nothing, or does everything."""

    def __init__(self, clock: Any) -> None:
        self.clock = clock  # the ManualClock the real authority reads, so timestamps match
        self.worlds: dict[str, World] = {}
        self.runners: dict[str, dict[str, Any]] = {}  # runner id -> its registration (the RunnerRow)

    def now(self) -> int:
        return self.clock.now_ms()

    # -- worlds --
    def create_world(self, world_id: str, name: str, *, first_entity_id: int, first_sequence: int,
                     tick_mode: str = "lockstep", tick_interval_ms: int = 100) -> World:  # fmt: skip
        world = World(world_id, name, self.now(), next_entity_id=first_entity_id, next_sequence=first_sequence,
                      clock_ms=self.now(), tick_mode=tick_mode, tick_interval_ms=tick_interval_ms)  # fmt: skip
        self.worlds[world_id] = world
        return world

    def world(self, world_id: str) -> World:
        if world_id not in self.worlds:
            raise ModelError("not_found")
        return self.worlds[world_id]

    def command_in_any_scope(self, world_id: str, command_id: str) -> Command | None:
        """docs/ledger.md "A command id in every scope": the one command of that id, None when no
        scope has one; several scopes having one is ambiguous (naming up to ten principals)."""
        world = self.world(world_id)
        found = [world.commands[sequence] for (_, named), sequence in world.keys.items() if named == command_id]
        if len(found) > 1:
            raise ModelError("ambiguous")
        return copy.copy(found[0]) if found else None

    def active(self, world_id: str) -> World:
        world = self.world(world_id)
        if world.status != "ACTIVE":
            raise ModelError("closing")  # "from here every admission fails with WorldClosingError"
        return world

    def writer(self, world_id: str, writer_epoch: int) -> World:
        # AMBIGUITY: a closing world *and* a stale epoch: which error? Both make the runtime drop
        # the world; the model says closing, and the test compares them as one class.
        world = self.active(world_id)
        if writer_epoch != world.writer_epoch:
            raise ModelError("stale")  # "lease, guard and publish from an older epoch fail closed"
        return world

    def acquire_writer(self, world_id: str) -> int:
        # AMBIGUITY: the page does not say acquire_writer refuses a closed world; the model
        # assumes it does (a runner cannot load a destroyed world).
        world = self.active(world_id)
        world.writer_epoch += 1
        world.host_owner = world.host_expires_at = None  # "a forced writer holds no world lease"
        return world.writer_epoch

    # -- world leases --
    @staticmethod
    def _lease_length(lease_ms: int, longest: int) -> None:
        if not 1 <= lease_ms <= longest:
            raise ModelError("invalid")

    def claim_world(self, world_id: str, owner: str, lease_ms: int) -> int:
        self._lease_length(lease_ms, HOST_LEASE_LONGEST_MS)
        world = self.active(world_id)
        now = self.now()
        if world.host_owner == owner:  # "its own lease: resumed, the epoch stays"
            world.host_expires_at = now + lease_ms
            return world.writer_epoch
        if world.host_owner is not None and world.host_expires_at is not None and world.host_expires_at > now:
            raise ModelError("lease_held")
        world.host_owner, world.host_expires_at = owner, now + lease_ms
        world.writer_epoch += 1  # "that takeover alone bumps the epoch"
        for command in world.commands.values():  # "the previous hosts' command leases end at once"
            if command.status == "LEASED" and command.lease_owner != owner and (command.lease_expires_at or 0) > now:
                command.lease_expires_at = now
        return world.writer_epoch

    def _host(self, world_id: str, owner: str, writer_epoch: int) -> World:
        world = self.writer(world_id, writer_epoch)
        if world.host_owner != owner:
            raise ModelError("stale")
        return world

    def renew_world(self, world_id: str, owner: str, writer_epoch: int, lease_ms: int) -> int:
        self._lease_length(lease_ms, HOST_LEASE_LONGEST_MS)
        world = self._host(world_id, owner, writer_epoch)
        world.host_expires_at = self.now() + lease_ms
        return world.writer_epoch

    def release_world(self, world_id: str, owner: str, writer_epoch: int) -> int:
        world = self._host(world_id, owner, writer_epoch)
        world.host_expires_at = min(self.now(), world.host_expires_at or 0)  # "it expires now; its owner is kept"
        return world.writer_epoch

    # -- the runner registry --
    def register_runner(self, runner_id: str, instance: str, lease_ms: int) -> dict[str, Any]:
        self._lease_length(lease_ms, HOST_LEASE_LONGEST_MS)
        now = self.now()
        held = self.runners.get(runner_id)
        if held is not None and held["instance"] != instance and held["expires_at"] > now:
            raise ModelError("runner_id_held")  # "a live registration of another instance is refused"
        same = held is not None and held["instance"] == instance  # "a restart of the same runner gets its id back"
        self.runners[runner_id] = {"runner_id": runner_id, "instance": instance,
                                   "registered_at": held["registered_at"] if same else now,  # type: ignore[index]
                                   "expires_at": now + lease_ms}  # fmt: skip
        return dict(self.runners[runner_id])

    def leave_runner(self, runner_id: str, instance: str) -> dict[str, Any] | None:
        now = self.now()
        held = self.runners.get(runner_id)
        if held is None or held["expires_at"] <= now:  # "an expired or unknown one is left as it is"
            return dict(held) if held else None
        if held["instance"] != instance:
            raise ModelError("runner_id_held")
        held["expires_at"] = now  # "its registration expires now"
        return dict(held)

    def live_runners(self) -> list[dict[str, Any]]:
        now = self.now()
        return [dict(r) for _, r in sorted(self.runners.items()) if r["expires_at"] > now]

    def reserve_entity_ids(self, world_id: str, count: int) -> int:
        world = self.active(world_id)
        first = world.next_entity_id
        world.next_entity_id += count  # "only moves forward"
        return first

    def _event(self, world: World, command: Command, actor: str | None = None) -> None:
        """One outbox event, typed by the status the command is now in; `actor`: an operator's
        call wrote it ("Who asked")."""
        # AMBIGUITY: the page does not define an event's `tick`; the model uses the applied tick
        # of an applied command and the scheduled tick otherwise.
        tick = command.applied_tick if command.applied_tick is not None else command.sub.options.tick
        # "Redrive": the first event of a redriving command is `redriven`, not `admitted`
        event_type = "redriven" if command.status == "PENDING" and command.redriven_from is not None else EVENT_TYPE[command.status]
        world.outbox.append(Event(
            event_seq=world.next_event_seq, command_id=command.sub.command_id,
            event_type=event_type, status=command.status, operation=command.mutation.operation,
            tick=tick, principal=command.sub.principal, occurred_at=self.now(), attempts=command.attempts,
            max_attempts=command.sub.options.max_attempts, error=command.last_error, actor=actor,
        ))  # fmt: skip
        world.next_event_seq += 1

    # -- spawn reservations --
    def reserve_spawn(self, world_id: str, scope: str, command_id: str, request: tuple, quota: int | None = None) -> int:
        world = self.world(world_id)
        key = (scope, command_id)
        if key in world.reservations:
            entity_id, bound = world.reservations[key]
            if exact(bound) != exact(request):
                raise ModelError("conflict")  # "a different request under that command id conflicts"
            return entity_id  # "a retry of the same request, from any process, gets the same id back"
        if key in world.keys:
            raise ModelError("conflict")  # the command id already names another command
        world = self.active(world_id)
        if quota is not None:  # "reserve_spawn checks the same count before it reserves"
            self._quota(world, scope, [request[1].tick], quota)
        entity_id = world.next_entity_id
        world.next_entity_id += 1
        world.reservations[key] = (entity_id, request)
        world.reserved_at[key] = self.now()
        return entity_id

    # -- admission --
    def refused_types(self, world: World, mutation: Mutation) -> bool:
        """Admission's component check: a value or type reference the world never recorded, or one
        a migration superseded (the model's values name recorded types unless made up)."""
        return mutation.unrecorded or bool(mutation.names() & set(world.superseded))

    def _quota(self, world: World, scope: str, targets: list[int], quota: int) -> list[int]:
        """"Quotas count the tick a command runs at": max(target, tick head + 1). The ticks to
        charge, or ModelError('quota') when they do not fit."""
        ticks = [max(target, world.tick_head + 1) for target in targets]
        for tick in set(ticks):
            if world.quota_used.get((scope, tick), 0) + ticks.count(tick) > quota:
                raise ModelError("quota")
        return ticks

    def admit(self, world_id: str, batch: list[Submission], quota: int | None = None) -> list[tuple[int, bool]]:
        """(sequence, replayed) per submission; all or nothing. With a `quota` (an actor's
        admission), the new ones are charged at the tick each runs at."""
        world = self.active(world_id)
        answers: list[tuple[str, int | None]] = []
        fresh: list[Submission] = []
        for sub in batch:
            key = (sub.scope, sub.command_id)
            existing = world.command(*key)
            if existing is not None:
                if existing.sub.identity(world_id) != sub.identity(world_id):
                    raise ModelError("conflict")  # same id, other content: the whole batch rolls back
                answers.append((sub.command_id, existing.sequence))
                continue
            reservation = world.reservations.get(key)
            if reservation is None:
                if sub.mutation.operation == "spawn_reserved":
                    # "admits a SpawnReserved only when its command id owns ... a reservation"
                    raise ModelError("reservation_not_owned")  # "when the command id holds no reservation at all"
            elif sub.mutation.operation != "spawn_reserved" or exact(reservation) != exact((sub.mutation.entity_id, sub.request)):
                # "of exactly that entity id for exactly that request; and it admits nothing else
                # under a command id that is bound to a reservation (CommandConflictError)"
                raise ModelError("conflict")
            fresh.append(sub)
            answers.append((sub.command_id, None))
        if any(self.refused_types(world, sub.mutation) for sub in fresh):
            # "checks every component value ... against the world's recorded component schemas"
            # (new rows only: "an identical replay is not re-checked"); the whole batch rolls back
            raise ModelError("unknown_component")
        if quota is not None and fresh:  # "only new rows are charged"
            for tick in self._quota(world, batch[0].scope, [sub.options.tick for sub in fresh], quota):
                world.quota_used[(batch[0].scope, tick)] = world.quota_used.get((batch[0].scope, tick), 0) + 1
        now = self.now()
        sequences = {}
        for sub in fresh:
            command = Command(sub, world_id, world.next_sequence, created_at=now, updated_at=now)
            world.next_sequence += 1
            world.commands[command.sequence] = command
            world.keys[(sub.scope, sub.command_id)] = command.sequence
            sequences[sub.command_id] = command.sequence
            self._event(world, command)
        return [(seq, True) if seq is not None else (sequences[cid], False) for cid, seq in answers]

    # -- ordering and leasing --
    def lease(self, world_id: str, owner: str, session: str, writer_epoch: int, tick: int,
              lease_ms: int) -> list[tuple[Command, bool]]:  # fmt: skip
        """(a snapshot of each leased row, suspect) in lease order."""
        self._lease_length(lease_ms, COMMAND_LEASE_LONGEST_MS)
        world = self.writer(world_id, writer_epoch)
        now = self.now()
        charged = None
        if world.guard is not None and world.guard[1] != session:
            # "that session died while materializing the guarded command": charged before leasing
            charged = self._charge_crash(world, world.guard[0])
        due = sorted((c for c in world.commands.values() if c.status in OPEN and c.sub.options.tick <= tick),
                     key=lambda c: c.order)  # fmt: skip
        taken: list[tuple[Command, bool]] = []
        for command in due:
            suspect = command.sequence == charged  # "the charged command stays suspect (so it is guarded again)"
            if command.status == "LEASED" and (command.lease_owner, command.lease_session) != (owner, session):
                # AMBIGUITY: "expired" at exactly lease_expires_at: the model says a lease is good
                # for lease_ms, i.e. expired once now >= expiry.
                if command.lease_owner != owner and now < command.lease_expires_at:
                    break  # another owner's live lease: stop, order is never skipped
                suspect = True  # a dead session's (same owner restarted, or expired): taken over
            taken.append((command, suspect))
        for command, _ in taken:
            command.status, command.lease_owner, command.lease_session = "LEASED", owner, session
            command.lease_expires_at, command.updated_at = now + lease_ms, now
        return [(copy.copy(command), suspect) for command, suspect in taken]

    def _charge_crash(self, world: World, sequence: int) -> int | None:
        """Charge the guarded command one attempt; answer its sequence when it was charged."""
        world.guard = None
        command = world.commands.get(sequence)
        # AMBIGUITY: the page does not say what a guard naming a command that is no longer leased
        # does; the model charges only a command still LEASED (one "a dead session left leased").
        if command is None or command.status != "LEASED":
            return None
        command.attempts += 1
        command.status = "DEAD_LETTER" if command.attempts >= command.sub.options.max_attempts else "RETRYABLE"
        command.last_error = ANY_TEXT
        command.clear_lease()
        command.updated_at = self.now()
        self._event(world, command)
        return sequence

    def guard(self, world_id: str, owner: str, session: str, writer_epoch: int, sequence: int | None) -> None:
        world = self.writer(world_id, writer_epoch)
        if sequence is not None:
            command = world.commands.get(sequence)
            if command is None or command.status != "LEASED" or (command.lease_owner, command.lease_session) != (owner, session):
                raise ModelError("lease_lost")
        world.guard = None if sequence is None else (sequence, session)

    # -- publication --
    def publish(self, world_id: str, owner: str, session: str, manifest: Manifest) -> bool:
        """True when written now, False when this very manifest was published before (lost answer)."""
        world = self.world(world_id)
        if any(m.token == manifest.token for m in world.manifests):
            return False  # "recognised by its commit token: the ledger answers already published"
        world = self.writer(world_id, manifest.writer_epoch)
        if manifest.tick <= world.tick_head:  # "a later tick coalesces the empty ticks between"
            raise ModelError("stale")
        if world.tick_mode == "lockstep" and manifest.tick != world.tick_head + 1:
            raise ModelError("invalid")  # "Tick modes": "a lockstep world publishes every tick"
        for s in manifest.settlements:
            command = world.commands.get(s.sequence)
            if command is None or command.status != "LEASED" or (command.lease_owner, command.lease_session) != (owner, session):
                raise ModelError("lease_lost")
        orders = [world.commands[s.sequence].order for s in manifest.settlements]
        if orders != sorted(orders) or len(set(orders)) != len(orders):
            raise ModelError("invalid")
        now = self.now()
        world.manifests.append(manifest)
        apply_writes(world.entities, manifest.writes)
        for s in manifest.settlements:  # in manifest order, each one attempt, each with its event
            command = world.commands[s.sequence]
            command.attempts += 1
            if s.outcome == "applied":
                command.status = "APPLIED"
            elif s.outcome == "rejected":
                command.status = "REJECTED"
            elif s.outcome == "permanent":  # the command raised Permanent: dead-lettered whatever budget is left
                command.status = "DEAD_LETTER"
            else:  # failed: "a failed settlement ... that brings attempts to max_attempts dead-letters"
                command.status = "DEAD_LETTER" if command.attempts >= command.sub.options.max_attempts else "RETRYABLE"
            # AMBIGUITY: the page does not say whether applied_tick/last_error keep older values;
            # the model keeps only the latest settlement's (an applied retry has no last error).
            command.applied_tick = manifest.tick if s.outcome == "applied" else None
            command.last_error = s.error
            command.clear_lease()
            command.updated_at = now
            self._event(world, command)
        for command in world.commands.values():  # the release of whatever the session still holds
            if command.status == "LEASED" and (command.lease_owner, command.lease_session) == (owner, session):
                command.status = "RETRYABLE" if command.attempts > 0 else "PENDING"  # no event: bookkeeping
                command.clear_lease()
                command.updated_at = now
        world.guard = None
        world.tick_head = manifest.tick
        world.published_at[manifest.tick] = now
        world.record_state()
        if world.tick_mode == "lockstep":  # "its clock anchor follows its head"
            # "when it was due (the host's due_ms; none: now; never after it published)"
            due = now if manifest.due_ms is None else min(manifest.due_ms, now)
            world.clock_tick, world.clock_ms, world.tick_lag_ms = manifest.tick, due, now - due
        if world.health == "STALLED":  # "the next published tick makes it ACTIVE again"
            attempts, error, since = world.failed_attempts, world.health_error, world.stalled_since
            world.health, world.failed_attempts, world.health_error, world.stalled_since = "ACTIVE", 0, None, None
            self._world_event(world, "world_recovered", manifest.tick, attempts, error, since)
        return True

    # -- world health --
    def _world_event(self, world: World, event_type: str, tick: int, attempts: int, error: str | None,
                     since: int | None, actor: str | None = None) -> None:  # fmt: skip
        world.outbox.append(Event(
            event_seq=world.next_event_seq, command_id="", event_type=event_type, status=world.health,
            operation="tick", tick=tick, principal=None, occurred_at=self.now(), attempts=attempts,
            max_attempts=None, error=error, since=since, actor=actor,
        ))  # fmt: skip
        world.next_event_seq += 1

    def _release(self, world: World, owner: str, session: str) -> None:
        for command in world.commands.values():
            if command.status == "LEASED" and (command.lease_owner, command.lease_session) == (owner, session):
                command.status = "RETRYABLE" if command.attempts > 0 else "PENDING"
                command.clear_lease()
                command.updated_at = self.now()
        if world.guard is not None and world.guard[1] == session:
            world.guard = None

    def record_tick_failure(self, world_id: str, owner: str, session: str, writer_epoch: int, tick: int, release: bool) -> None:
        world = self.writer(world_id, writer_epoch)
        world.failed_attempts += 1
        world.health_error = ANY_TEXT
        if world.stalled_since is None:
            world.stalled_since = self.now()
        if release:
            self._release(world, owner, session)
        if world.health == "ACTIVE":
            world.health = "STALLED"
            self._world_event(world, "world_stalled", tick, world.failed_attempts, ANY_TEXT, world.stalled_since)

    def release(self, world_id: str, owner: str, session: str, writer_epoch: int) -> None:
        self._release(self.writer(world_id, writer_epoch), owner, session)

    def retry_world(self, world_id: str, actor: str | None = None) -> None:
        """"Retry now": "the world must exist and be ACTIVE"; its event names "the principal that
        asked" (`actor`), the runner's own health events no one."""
        world = self.active(world_id)
        if world.health != "STALLED" or world.failed_attempts == 0:
            return  # "Otherwise (not stalled, or asked already) it changes nothing"
        attempts, world.failed_attempts = world.failed_attempts, 0  # health, error and since "stay"
        self._world_event(world, "world_retry_requested", world.tick_head + 1, attempts, world.health_error,
                          world.stalled_since, actor)  # fmt: skip

    # -- redrive --
    def redrive(self, world_id: str, scope: str, command_id: str, new_id: str,
                actor: str | None = None) -> tuple[int, bool, int]:  # fmt: skip
        """(sequence, replayed, redriven_from) of the command redriving a dead letter; its event
        names the operator who asked ("Who asked")."""
        world = self.active(world_id)
        dead = world.command(scope, command_id)
        if dead is None:
            raise ModelError("command_not_found")
        if dead.status != "DEAD_LETTER":
            raise ModelError("not_dead_lettered")
        # "A dead letter is redriven once, and that fact is the dead letter's own"
        # AMBIGUITY: the page does not order this against the new id being taken; the model asks
        # first whether the dead letter was redriven (then a taken id is beside the point).
        if dead.redriven_by is not None:
            redrive = world.commands.get(dead.redriven_by)
            if redrive is not None and redrive.sub.command_id == new_id:
                return redrive.sequence, True, dead.sequence  # "while the redrive's row is retained, the same new id"
            raise ModelError("already_redriven")  # "another id, or any id once retention pruned the redrive"
        if (scope, new_id) in world.keys or (scope, new_id) in world.reservations:
            raise ModelError("conflict")  # "an id already used there, by a command or a spawn reservation"
        if self.refused_types(world, dead.mutation):
            raise ModelError("unknown_component")  # "passes admission's component check"
        # "copies the operation, ..., payload, ...; due at max(scheduled_tick, tick_head + 1)"; its
        # identity is what it copies: the dead letter's payload as it is now
        options = dataclasses.replace(dead.sub.options, tick=max(dead.sub.options.tick, world.tick_head + 1))
        sub = dataclasses.replace(dead.sub, command_id=new_id, options=options, mutation=dead.mutation)
        now = self.now()
        command = Command(sub, world_id, world.next_sequence, created_at=now, updated_at=now, redriven_from=dead.sequence)
        world.commands[command.sequence] = command
        world.keys[(scope, new_id)] = command.sequence
        world.next_sequence += 1
        dead.redriven_by = command.sequence  # "it only records redriven_by": no event, no other change
        self._event(world, command, actor)
        return command.sequence, False, dead.sequence

    # -- component migrations --
    def migrate(self, world_id: str, old: str, new: str) -> bool:
        """"Component schemas and migrations", as a world host applies one declared migration when
        it loads a world (docs/guide/schema-evolution.md): only when the world's entities or open
        commands still name `old`. Entities and open payloads move to `new`; identities do not;
        settled commands and dead letters keep theirs. True when it was recorded now."""
        world = self.writer(world_id, self.worlds[world_id].writer_epoch)
        if old in world.superseded:
            return False
        entities = [e for e, components in world.entities.items() if old in components]
        commands = [c for c in world.commands.values() if c.status in OPEN and old in c.mutation.names()]
        if not entities and not commands:
            return False  # nothing names it: the host has nothing to migrate
        now = self.now()
        for entity_id in entities:
            world.entities[entity_id] = {new if n == old else n: d for n, d in world.entities[entity_id].items()}
        for command in commands:
            command.migrated = command.mutation.renamed(old, new)
            command.updated_at = now
        world.superseded[old] = new
        world.migrated_at_tick[old] = world.tick_head
        world.record_state()
        record = {"name": old, "to": new, "tick": world.tick_head, "entities": len(entities), "commands": len(commands),
                  "migrated_at": now}  # fmt: skip
        world.outbox.append(Event(
            event_seq=world.next_event_seq, command_id=f"schema-migration/{old}", event_type="schema_migrated",
            status="APPLIED", operation="migrate_components", tick=world.tick_head, principal=None, occurred_at=now,
            attempts=0, max_attempts=None, error=None, record=record,
        ))  # fmt: skip
        world.next_event_seq += 1
        return True

    # -- forks --
    def fork_world(self, source_id: str, at_tick: int, fork_id: str, name: str, with_open_commands: bool,
                   actor: str | None = None) -> World:  # fmt: skip
        """docs/ledger.md "Forks": a new world of the source as it was at `at_tick` (any retained
        tick), in one transaction; the same fork again answers it; another world there exists.
        Both `world_forked` events name who asked ("Who asked")."""
        if at_tick < -1 or fork_id == source_id:  # "fork_world's at_tick from -1"; "a fork is another world"
            raise ModelError("invalid")
        source = self.world(source_id)
        if fork_id in self.worlds:
            existing = self.worlds[fork_id]
            if existing.forked_from == (source_id, at_tick) and existing.name == name and existing.status == "ACTIVE":
                return existing
            raise ModelError("exists")
        state = source.state_at(at_tick)  # tick_not_retained outside the window
        now = self.now()
        fork = World(fork_id, name, now, next_entity_id=source.next_entity_id, next_sequence=source.next_sequence,
                     tick_head=at_tick, next_event_seq=source.next_event_seq, projected_seq=source.next_event_seq - 1,
                     clock_tick=at_tick, clock_ms=now, tick_mode=source.tick_mode, tick_interval_ms=source.tick_interval_ms,
                     entities=copy.deepcopy(state), published={at_tick: copy.deepcopy(state)}, state_from_tick=at_tick,
                     forked_from=(source_id, at_tick))  # fmt: skip
        # "its component migrations those of ticks up to at_tick"
        fork.superseded = {old: new for old, new in source.superseded.items() if source.migrated_at_tick[old] <= at_tick}
        fork.migrated_at_tick = {old: source.migrated_at_tick[old] for old in fork.superseded}
        copies = []
        if with_open_commands:
            # "admitted before the world left at_tick, that is before the next tick published, or
            # now at the head, and not cancelled by then"
            left = min((t_ms for t, t_ms in source.published_at.items() if t > at_tick), default=None)
            cutoff = now if left is None else left - 1
            copies = [c for s, c in sorted(source.commands.items()) if c.sub.options.tick > at_tick
                      and c.created_at <= cutoff and not (c.status == "CANCELLED" and c.updated_at <= cutoff)]  # fmt: skip
            if any(self.refused_types(fork, c.mutation) for c in copies):  # "each passes admission's component check"
                raise ModelError("unknown_component")
        record = {"source_world_id": source_id, "world_id": fork_id, "at_tick": at_tick, "commands": len(copies),
                  "actor": actor}  # fmt: skip
        for world in (source, fork):  # "at the same event sequence in each"
            world.outbox.append(Event(
                event_seq=world.next_event_seq, command_id=f"world-fork/{fork_id}", event_type="world_forked",
                status="APPLIED", operation="fork_world", tick=at_tick, principal=None, occurred_at=now, attempts=0,
                max_attempts=None, error=None, record=record,
            ))  # fmt: skip
            world.next_event_seq += 1
        self.worlds[fork_id] = fork
        for original in copies:  # "PENDING with no attempts, under its sequence, scope and command id"
            # "admitted to the fork as the source holds it now ... a copy has no migrated_digest"
            sub = dataclasses.replace(original.sub, mutation=original.mutation)
            command = Command(sub, fork_id, original.sequence, now, updated_at=now, redriven_from=original.redriven_from)
            fork.commands[command.sequence] = command
            fork.keys[(command.sub.scope, command.sub.command_id)] = command.sequence
            self._event(fork, command)
        return fork

    # -- destroy --
    def destroy(self, world_id: str, actor: str | None = None) -> int:
        """"Destroy"; its cancellations name who asked ("Who asked")."""
        world = self.world(world_id)
        if world.status == "ACTIVE":
            world.status = "CLOSING"
        if world.status == "DESTROYED":
            return 0
        cancelled = 0
        # AMBIGUITY: the order of the cancellation events is not stated; the model uses sequence order.
        for sequence in sorted(world.commands):
            command = world.commands[sequence]
            if command.status in OPEN:
                command.status, command.last_error, command.updated_at = "CANCELLED", ANY_TEXT, self.now()
                command.clear_lease()
                self._event(world, command, actor)
                cancelled += 1
        world.status = "DESTROYED"
        return cancelled

    # -- outbox --
    def acknowledge_outbox(self, world_id: str, up_to_seq: int) -> None:
        world = self.world(world_id)
        world.projected_seq = max(world.projected_seq, up_to_seq)  # never backwards
        world.outbox = [e for e in world.outbox if e.event_seq > world.projected_seq]

    # -- retention --
    def prune(self, world_id: str, keep_ticks: int, window_ms: int, limit: int) -> tuple[int, int, int, int]:
        """"Retention": at most `limit` of each kind, oldest first; (ticks, commands, reservations,
        quota counters). Each kind's condition as the page's table states it. The state of the
        kept ticks stays (docs/storage.md "State at a tick"): the oldest retained tick rises to
        the oldest kept one, never down (the rows a prune deletes are storage's, not counted here)."""
        world = self.world(world_id)
        if keep_ticks < 1 or window_ms < 0 or not 1 <= limit <= 100_000:
            raise ModelError("invalid")
        now, oldest_tick = self.now(), world.tick_head - keep_ticks

        def acknowledged(at: int) -> bool:
            """"no unacknowledged outbox event of the world is as old as" `at`"""
            return all(event.occurred_at > at for event in world.outbox)

        # "tick manifests: tick <= tick_head - keep_ticks"
        old_ticks = sorted((m for m in world.manifests if m.tick <= oldest_tick), key=lambda m: m.tick)[:limit]
        world.manifests = [m for m in world.manifests if m not in old_ticks]
        # "settled commands: APPLIED, REJECTED or CANCELLED, settled at least the window ago, and
        # no unacknowledged outbox event of the world is as old as that settlement"; never an
        # open command nor a dead letter
        # AMBIGUITY: "oldest first" has no tie rule; the model breaks ties by sequence
        settled = sorted((c for c in world.commands.values() if c.status in ("APPLIED", "REJECTED", "CANCELLED")
                          and c.updated_at <= now - window_ms and acknowledged(c.updated_at)),
                         key=lambda c: (c.updated_at, c.sequence))[:limit]  # fmt: skip
        for c in settled:
            del world.commands[c.sequence]
            del world.keys[(c.sub.scope, c.sub.command_id)]
        # "spawn reservations: older than the window and no command row holds their (principal,
        # command id)" (a command just pruned holds nothing); older as commands are: acknowledged too
        # AMBIGUITY: ties of reservation time are broken by (principal, command id)
        lapsed = sorted((at, key) for key, at in world.reserved_at.items()
                        if at <= now - window_ms and acknowledged(at) and key not in world.keys)[:limit]  # fmt: skip
        for _, key in lapsed:
            del world.reservations[key]
            del world.reserved_at[key]
        # "quota counters: counted tick <= tick_head - keep_ticks"
        # AMBIGUITY: oldest first, ties of tick broken by principal
        counters = sorted(((tick, scope) for scope, tick in world.quota_used if tick <= oldest_tick))[:limit]
        for tick, scope in counters:
            del world.quota_used[(scope, tick)]
        world.state_from_tick = max(world.state_from_tick, oldest_tick + 1)
        latest_before = max(t for t in world.published if t <= max(world.state_from_tick, -1))
        world.published = {t: e for t, e in world.published.items() if t >= latest_before}
        return len(old_ticks), len(settled), len(lapsed), len(counters)


# -- a runner: what AsyncWorld.step + CommandScheduler.materialize do, at the level of outcomes --
@dataclass
class LoadedWorld:
    """A world as one runtime holds it: the published state it loaded plus what it published."""

    writer_epoch: int
    tick: int  # the last tick this runtime knows published
    entities: dict[int, dict[str, dict]]
    ids: range = range(0)  # the entity ids of its current block still unused
    prepared: Manifest | None = None
    # "Tick modes": the host's copy of the world's clock: mode, interval, and (lockstep) the anchor
    # (the head, when it was due, how late it published), read at load, moved with each publication
    tick_mode: str = "lockstep"
    interval_ms: int = 100
    anchor: tuple[int, int, int] = (-1, 0, 0)


@dataclass
class Materialized:
    outcome: str
    error: str | None


class Faults:
    """The Authority seam as the model sees it: the calls made through it, in order (the page
    names them: one ledger call per admission, a lease, a guard per suspect and one after the
    drain, a publish), and the faults armed on them: method -> modes still to inject, one per call
    ('before': the call fails and nothing happened; 'after': it happened, the answer is lost)."""

    def __init__(self) -> None:
        self.armed: dict[str, list[str]] = {}
        self.calls: list[tuple[str, Any]] = []  # (method, the argument worth comparing)

    def arm(self, method: str, mode: str) -> None:
        self.armed.setdefault(method, []).append(mode)

    def call(self, method: str, run: Any, detail: Any = None) -> Any:
        """Carry out one authority call the way the seam would."""
        self.calls.append((method, detail))
        modes = self.armed.get(method)
        mode = modes.pop(0) if modes else None
        if mode == "before":
            raise ModelError("fault")
        result = run()
        if mode == "after":
            raise ModelError("fault")
        return result


def lockstep_due(anchor: tuple[int, int, int], interval_ms: int, now: int) -> int:
    """docs/ledger.md "Tick modes", the due time a host records for a lockstep tick starting `now`:
    the schedule's, one interval after the head was due; but `now` (the schedule starts again) in a
    world with no interval, for a step asked for before its time, and after a pause: a start more
    than the longer of the interval and a second after the tick could first have run (its
    scheduled time, or the head's publication if that was later)."""
    _, head_due, head_lag = anchor
    scheduled = head_due + interval_ms
    could_run = max(scheduled, head_due + head_lag)
    if interval_ms == 0 or now < scheduled or now - could_run > max(interval_ms, 1_000):
        return now
    return scheduled


class Runner:
    """One runner process: a stable owner, a session per world per incarnation, its loaded worlds."""

    _sessions = itertools.count(1)
    _tokens = itertools.count(1)

    def __init__(self, owner: str, lease_ms: int) -> None:
        self.owner = owner
        self.lease_ms = lease_ms
        self.sessions: dict[str, str] = {}
        self.loaded: dict[str, LoadedWorld] = {}

    def session(self, world_id: str) -> str:
        if world_id not in self.sessions:
            self.sessions[world_id] = f"session-{next(self._sessions)}"
        return self.sessions[world_id]

    def drop(self, world_id: str) -> None:
        self.loaded.pop(world_id, None)

    def load(self, ledger: Ledger, world_id: str, faults: Faults) -> LoadedWorld:
        """Loading a world acquires its writer (fencing earlier ones) and reads its published state."""
        if world_id not in self.loaded:
            epoch = faults.call("acquire_writer", lambda: ledger.acquire_writer(world_id))
            world = ledger.worlds[world_id]
            assert world.clock_ms is not None and world.tick_interval_ms is not None  # set at creation
            self.loaded[world_id] = LoadedWorld(epoch, world.tick_head, copy.deepcopy(world.entities),
                                                tick_mode=world.tick_mode, interval_ms=world.tick_interval_ms,
                                                anchor=(world.clock_tick, world.clock_ms, world.tick_lag_ms))  # fmt: skip
        return self.loaded[world_id]

    def step(self, ledger: Ledger, world_id: str, faults: Faults, plans: dict[str, list], skip: int = 0) -> int:
        """One `Step` (`skip` empty ticks coalesced before it): the number of commands applied, or
        ModelError/ModelCrash."""
        loaded = self.load(ledger, world_id, faults)  # a closed world: ModelError('closing'), nothing loaded
        try:
            return self._step(ledger, world_id, loaded, faults, plans, skip)
        except ModelError as error:
            if error.kind not in ("stale", "lease_lost", "closing"):
                self._failed(ledger, world_id, loaded, faults)
            raise

    def _failed(self, ledger: Ledger, world_id: str, loaded: LoadedWorld, faults: Faults) -> None:
        """"World health": a tick that failed otherwise is recorded (its leases given back, unless a
        prepared tick needs them); a writer fenced meanwhile is dropped."""
        release = loaded.prepared is None
        try:
            faults.call("record_tick_failure", lambda: ledger.record_tick_failure(
                world_id, self.owner, self.session(world_id), loaded.writer_epoch, loaded.tick + 1, release), release)  # fmt: skip
        except ModelError as error:
            if error.kind in ("stale", "lease_lost", "closing"):
                self.drop(world_id)

    def _step(self, ledger: Ledger, world_id: str, loaded: LoadedWorld, faults: Faults, plans: dict[str, list],
              skip: int) -> int:  # fmt: skip
        try:
            if loaded.prepared is None:
                self._prepare(ledger, world_id, loaded, faults, plans, skip)
            manifest = loaded.prepared
            assert manifest is not None
            try:
                faults.call("publish", lambda: ledger.publish(world_id, self.owner, self.session(world_id), manifest))
            except ModelError as error:
                if error.kind == "fault":
                    # no answer: the world keeps the prepared tick, stepping again settles it
                    raise ModelError("unknown") from None
                raise
        except ModelError as error:
            if error.kind in ("stale", "lease_lost", "closing"):
                self.drop(world_id)  # a typed refusal is definitive: the next use loads afresh
            raise
        apply_writes(loaded.entities, manifest.writes)
        loaded.tick, loaded.prepared = manifest.tick, None
        if manifest.due_ms is not None:  # "moves its own copy with every tick it publishes"
            loaded.anchor = (manifest.tick, manifest.due_ms, max(0, ledger.now() - manifest.due_ms))
        return sum(1 for s in manifest.settlements if s.outcome == "applied")

    def _prepare(self, ledger: Ledger, world_id: str, loaded: LoadedWorld, faults: Faults,
                 plans: dict[str, list], skip: int) -> None:  # fmt: skip
        """Run the tick up to its prepared manifest. Anything failing on the way discards it
        whole: its writes, its settlements and the entity ids it took (back to the world's block;
        a block reserved meanwhile is lost to the world, the ledger counter never goes back)."""
        ids_before = loaded.ids
        lockstep = loaded.tick_mode == "lockstep"  # "Tick modes": a lockstep step is always the next tick
        tick, session = loaded.tick + 1 + (0 if lockstep else skip), self.session(world_id)
        due = lockstep_due(loaded.anchor, loaded.interval_ms, ledger.now()) if lockstep else None
        try:
            # AMBIGUITY: the page does not say when a running world takes its id block; the model
            # takes one at the start of a tick when the world has none left, and a larger one
            # after the lease when the due spawns would not fit.
            if not loaded.ids:
                first = faults.call("reserve_entity_ids", lambda: ledger.reserve_entity_ids(world_id, ID_BLOCK), ID_BLOCK)
                loaded.ids = range(first, first + ID_BLOCK)
            rows = faults.call("lease", lambda: ledger.lease(
                world_id, self.owner, session, loaded.writer_epoch, tick, self.lease_ms))  # fmt: skip
            spawns = sum(1 for row, _ in rows if row.mutation.operation == "spawn")
            if len(loaded.ids) < spawns:
                size = max(spawns, ID_BLOCK)
                first = faults.call("reserve_entity_ids", lambda: ledger.reserve_entity_ids(world_id, size), size)
                loaded.ids = range(first, first + size)
            writes: dict[int, dict[str, dict] | None] = {}
            settlements: list[Settlement] = []
            # "the guard always names the command running now or nothing"
            # AMBIGUITY: "cleared before the first non-suspect command after a suspect and after
            # the drain": the model clears it only when it names something (no second clear).
            guarding: int | None = None

            def guard(sequence: int | None) -> None:
                faults.call("guard", lambda: ledger.guard(world_id, self.owner, session, loaded.writer_epoch, sequence),
                            sequence)  # fmt: skip

            for row, suspect in rows:
                if suspect:  # "first names it in the guard (its own small transaction)"
                    guard(row.sequence)
                    guarding = row.sequence
                elif guarding is not None:
                    guard(None)
                    guarding = None
                try:
                    done = self._materialize(row, loaded, writes, plans)
                except ModelCrash:
                    self.sessions.pop(world_id, None)  # "ends its session for that world"
                    raise
                settlements.append(Settlement(row.sequence, row.sub.command_id, done.outcome, done.error))
                if done.outcome == "failed" and row.attempts + 1 < row.sub.options.max_attempts:
                    break  # RETRYABLE: the drain stops; the leased tail is given back uncharged
            if guarding is not None:  # "and after the drain"
                guard(None)
        except BaseException:
            loaded.ids = ids_before
            raise
        loaded.prepared = Manifest(next(self._tokens), tick, loaded.writer_epoch, settlements, writes, due)

    def _materialize(self, row: Command, loaded: LoadedWorld, writes: dict, plans: dict[str, list]) -> Materialized:
        """One command in its own layer: it lands whole (applied) or not at all."""
        m = row.mutation
        label = m.probe_label()
        if label is not None and plans.get(label):
            kind, text = plans[label].pop(0)  # the Probe raises while its value is built
            if kind == "reject":  # LookupError, TypeError, ValueError
                return Materialized("rejected", text)
            if kind == "fail":  # any other Exception, or a Retryable
                return Materialized("failed", text)
            if kind == "permanent":  # a Permanent
                return Materialized("permanent", text)
            raise ModelCrash(text)  # a BaseException: propagates untouched

        def current(entity_id: int) -> dict[str, dict] | None:
            return writes[entity_id] if entity_id in writes else loaded.entities.get(entity_id)

        def write(entity_id: int, components: dict[str, dict] | None) -> Materialized:
            """"a command that would take a component, an entity, its own write or the tick's
            write-set over a limit is `rejected` ... leaves nothing, and the drain goes on"."""
            size = entity_size(components)
            if any(component_size(name, data) > COMPONENT_LIMIT for name, data in (components or {}).items()):
                return Materialized("rejected", STATE_TOO_LARGE)
            if size > ENTITY_LIMIT or size > WRITE_LIMIT:
                return Materialized("rejected", STATE_TOO_LARGE)
            # "each once, as last written"
            if sum(entity_size(c) for e, c in writes.items() if e != entity_id) + size > WRITE_SET_LIMIT:
                return Materialized("rejected", STATE_TOO_LARGE)
            writes[entity_id] = components
            return Materialized("applied", None)

        components = {name: dict(data) for name, data in m.components}
        if m.operation in ("spawn", "spawn_reserved"):
            if m.operation == "spawn":
                entity_id, loaded.ids = loaded.ids[0], loaded.ids[1:]
            else:
                entity_id = m.entity_id
                if current(entity_id) is not None:
                    return Materialized("rejected", ANY_TEXT)  # already exists
            # AMBIGUITY: a spawn rejected for its size "leaves nothing" of state; the page does not
            # say whether its entity id is used: the model reads it as taken (a gap, like the ids
            # a crashed process loses), the id block being the runner's, not the state's.
            return write(entity_id, components)
        existing = current(m.entity_id)
        if existing is None:
            return Materialized("rejected", ANY_TEXT)  # no such entity
        # AMBIGUITY: the docs do not spell out the mutations' preconditions; the model uses the
        # plain reading: update and remove need every named component present, add needs none.
        if m.operation == "despawn":
            return write(m.entity_id, None)
        if m.operation == "update":
            if not set(components) <= set(existing):
                return Materialized("rejected", ANY_TEXT)
            return write(m.entity_id, {**existing, **components})
        if m.operation == "add_components":
            if set(components) & set(existing):
                return Materialized("rejected", ANY_TEXT)
            return write(m.entity_id, {**existing, **components})
        if not set(m.types) <= set(existing):  # remove_components
            return Materialized("rejected", ANY_TEXT)
        return write(m.entity_id, {k: v for k, v in existing.items() if k not in m.types})


# -- "State limits": sizes as docs/storage.md defines the texts -------------------------------
FINGERPRINT = "f" * 64  # every fingerprint is 64 hex characters: a size does not depend on which


def component_size(name: str, data: dict) -> int:
    """A component's text: `{"data":<field JSON>,"fingerprint":"<64 hex>","name":"<class name>"}`,
    canonical JSON (keys sorted, compact separators, ASCII only)."""
    return len(json.dumps({"data": data, "fingerprint": FINGERPRINT, "name": name}, sort_keys=True,
                          separators=(",", ":"), ensure_ascii=True))  # fmt: skip


def entity_size(components: dict[str, dict] | None) -> int:
    """An entity's components text, `[<component>,...]` (a despawned one counts nothing)."""
    if components is None:
        return 0
    return 2 + sum(component_size(name, data) for name, data in components.items()) + max(0, len(components) - 1)
