"""The plain-JSON shapes the ledger takes and answers, as types a checker can see.

Every ledger method's arguments and result are JSON values (so the Durable Object and HTTP can
carry them unchanged); these TypedDicts name their fields. Field order follows the SQL columns.
The shapes a ledger method *takes* are also what the HTTP runner protocol validates requests
against (strictly, unknown fields refused), so they are declared for pydantic too.
"""

from __future__ import annotations

from typing import Annotated, Any, NotRequired

from pydantic import ConfigDict, Field, with_config
from typing_extensions import TypedDict  # pydantic validates only this TypedDict before Python 3.12

from archetype.canonical import MAX_SAFE_INTEGER
from archetype.commands.identity import COMMAND_ID_PATTERN
from archetype.commands.options import MAX_ATTEMPTS, MAX_PRIORITY
from archetype.world.commit import Outcome
from archetype.world.operations import Name
from archetype.world.tick_mode import MAX_TICK_INTERVAL_MS

WIRE = ConfigDict(extra="forbid", strict=True)

# The bounds of every number the ledger takes. The runner protocol validates its requests against
# these annotations (archetype.api.runner_protocol), so a remote caller never sends an unbounded
# number (tests/api/test_least_privilege.py checks that every integer argument has both bounds);
# the lease lengths and admission rows the ledger also checks itself, on every authority.
MAX_PAGE = 10_000
"""The most rows one read answers, and the most commands one `lease` takes."""
HOST_LEASE_MAX_MS = 60_000
"""The longest world lease or runner registration: a runner proves it lives by renewing them."""
COMMAND_LEASE_MAX_MS = 600_000
"""The longest command lease: a tick's commands are leased again at every tick."""
MAX_RESERVE = 1_000_000
"""The most entity ids one `reserve_entity_ids` takes."""
MAX_PRUNE = 100_000
"""The most rows of each kind one `prune` removes."""

CommandId = Annotated[str, Field(pattern=COMMAND_ID_PATTERN.pattern)]
Tick = Annotated[int, Field(ge=0, le=MAX_SAFE_INTEGER)]
Epoch = Annotated[int, Field(ge=0, le=MAX_SAFE_INTEGER)]
Position = Annotated[int, Field(ge=0, le=MAX_SAFE_INTEGER)]
"""A sequence, event sequence or entity id to continue after (0: from the start)."""
CommandSequence = Annotated[int, Field(ge=1, le=MAX_SAFE_INTEGER)]
EntityId = Annotated[int, Field(ge=1, le=MAX_SAFE_INTEGER)]
PageLimit = Annotated[int, Field(ge=1, le=MAX_PAGE)]
HostLeaseMs = Annotated[int, Field(ge=1, le=HOST_LEASE_MAX_MS)]
CommandLeaseMs = Annotated[int, Field(ge=1, le=COMMAND_LEASE_MAX_MS)]
Quota = Annotated[int, Field(ge=1, le=MAX_SAFE_INTEGER)]
TickPosition = Annotated[int, Field(ge=-1, le=MAX_SAFE_INTEGER)]
"""A tick to continue after (-1: from the start)."""
ReserveCount = Annotated[int, Field(ge=1, le=MAX_RESERVE)]
KeepTicks = Annotated[int, Field(ge=1, le=MAX_SAFE_INTEGER)]
WindowMs = Annotated[int, Field(ge=0, le=MAX_SAFE_INTEGER)]
PruneLimit = Annotated[int, Field(ge=1, le=MAX_PRUNE)]
TickIntervalMs = Annotated[int, Field(ge=0, le=MAX_TICK_INTERVAL_MS)]
WallMs = Annotated[int, Field(ge=-MAX_SAFE_INTEGER, le=MAX_SAFE_INTEGER)]
"""A wall-clock time in ms since the epoch (when a tick was due)."""


class WorldRow(TypedDict):
    world_id: str
    name: str
    status: str
    tick_head: int
    next_entity_id: int
    writer_epoch: int
    next_sequence: int
    next_event_seq: int
    projected_seq: int
    guard_sequence: int | None
    guard_session: str | None
    health: str  # ACTIVE | STALLED
    failed_attempts: int  # ticks failed before they were prepared, since the last published one
    health_error: str | None
    stalled_since: int | None  # ms since the epoch
    host_owner: str | None  # the runner (or Durable Object) holding the world lease, docs/ledger.md
    host_expires_at: int | None  # ms since the epoch; at or before now: expired (or released)
    created_at: int
    updated_at: int
    clock_tick: int  # the world's tick clock anchor (archetype.commands.clock): realtime, its clock read
    clock_ms: int  # clock_tick at clock_ms; lockstep, its tick head was due at clock_ms
    tick_mode: str  # lockstep | realtime (docs/ledger.md, "Tick modes")
    tick_interval_ms: int | None  # None: its host's interval (a world created before tick modes)
    tick_lag_ms: int  # lockstep: how late its head tick published after it was due; realtime: 0


class ForkPlan(TypedDict):
    """A fork on the Durable Object as its source fixed it (`fork_plan`, docs/ledger.md "Forks on
    the Durable Object"): what the fork's object copies and the values its world row starts from."""

    source_world_id: str
    world_id: str  # the fork's
    name: str
    at_tick: int
    forked_at: int  # ms since the epoch: when the plan was fixed (both world_forked events' time)
    event_seq: int  # both world_forked events' sequence number
    next_sequence: int
    next_entity_id: int
    tick_mode: str
    tick_interval_ms: int | None
    snapshot_tick: int | None  # the snapshot the state at at_tick reads (None: none)
    deltas_from: int  # the first delta tick it reads
    last_part: int  # the last delta part of at_tick when the plan was fixed (-1: none)
    commands: int  # the open commands copied
    actor: str | None  # who asked for the fork: both world_forked events name them


ForkCursor = list[Any] | None
"""Where a fork's copy stands: the part ("snapshot", "deltas", "rows") and the key of the last row
copied in it; None: everything is copied."""


class ForkPage(TypedDict):
    """One page of a fork's copy (`fork_page`): its rows, the cursor it starts at, and the next."""

    cursor: ForkCursor
    rows: list[list[Any]]
    next: ForkCursor


class ForkBegun(TypedDict):
    """Where a fork stands on its object (`fork_begin`)."""

    world: WorldRow | None  # the fork is active
    started: bool  # a copy is recorded (or done)
    cursor: ForkCursor  # the page to copy next (None: all copied, or nothing started)


class PendingWorld(TypedDict):
    """A world with an open command, as a runner's due-time index reads it (`pending_worlds`)."""

    world_id: str
    status: str
    tick_head: int
    next_tick: int  # the earliest scheduled tick of its open commands
    clock_tick: int  # its tick clock (archetype.commands.clock)
    clock_ms: int
    tick_mode: str
    tick_interval_ms: int | None
    tick_lag_ms: int
    host_owner: str | None  # its world lease (docs/ledger.md, "World leases")
    host_expires_at: int | None


class RunnerRow(TypedDict):
    """A runner's registration (docs/ledger.md, "The runner registry")."""

    runner_id: str
    instance: str  # where it runs: the same for a restart of the same runner, another for another process
    registered_at: int  # ms since the epoch, when this instance registered the id
    expires_at: int  # ms since the epoch; at or before now: not live


@with_config(WIRE)
class AdmissionRow(TypedDict):
    """What a caller submits for one command; the ledger adds world, scope, sequence and digest."""

    command_id: CommandId
    schema_version: Annotated[int, Field(ge=1, le=MAX_SAFE_INTEGER)]
    scheduled_tick: Tick
    priority: Annotated[int, Field(ge=-MAX_PRIORITY, le=MAX_PRIORITY)]
    operation: str
    payload: str
    principal: Name | None
    origin: str
    max_attempts: Annotated[int, Field(ge=1, le=MAX_ATTEMPTS)]
    reserved_entity_id: EntityId | None
    # digest of the spawn request a SpawnReserved fulfils (see CommandScheduler.spawn_request_digest)
    request_digest: str | None


class Admitted(TypedDict):
    command_id: str
    sequence: int
    replayed: bool
    digest: str


class CommandRow(TypedDict):
    command_id: str
    sequence: int
    schema_version: int
    world_id: str
    scheduled_tick: int
    priority: int
    operation: str
    payload: str
    digest: str
    principal: str | None
    origin: str
    max_attempts: int
    attempts: int
    reserved_entity_id: int | None
    status: str
    lease_owner: str | None
    lease_expires_at: int | None
    applied_tick: int | None
    last_error: str | None
    redriven_from: int | None  # the sequence of the dead-lettered command this one redrives
    redriven_by: int | None  # a dead letter's: the sequence of the command that redrove it (kept after that one is pruned)
    # the digest of the row as a component migration rewrote its payload (None: never rewritten);
    # `digest` stays the one it was admitted with, which replays compare against
    migrated_digest: str | None
    created_at: int
    updated_at: int


class LeasedRow(CommandRow):
    """A leased command; `suspect` when its previous lease belonged to a runner session that
    stopped without settling it (so it may be the command that stopped it)."""

    suspect: bool


class EntityRow(TypedDict):
    entity_id: int
    components: str  # canonical JSON of the entity's component values, exactly as published


class StatePage(TypedDict):
    tick_head: int
    writer_epoch: int
    entities: list[EntityRow]


class StateColumn(TypedDict):
    """One component type's values in a section, as a chunk holds them (docs/storage.md):
    `columns` (field -> {"f8" | "i8": base64 of the little-endian values}) for a numeric type, else
    `rows` (the canonical JSON text of each entity's data)."""

    name: str
    fingerprint: str
    columns: NotRequired[dict[str, dict[str, str]]]
    rows: NotRequired[list[str]]


class StateSection(TypedDict):
    """Entities of one signature (set of component types), ascending, and a column per type."""

    ids: list[int]
    components: list[StateColumn]


class StateRead(TypedDict):
    """A page of a filtered state read (`read_state`), its entities in sections by signature;
    `next_after` is the entity id to continue after, None when nothing is left (a page may hold
    fewer entities than asked, even none, and still have a next one)."""

    tick_head: int
    sections: list[StateSection]
    next_after: int | None


@with_config(WIRE)
class StateWrite(TypedDict):
    """A tick's state write as its runner sends it (docs/storage.md): chunks of
    `[[entity_id, components | null], ...]` in entity-id order. A snapshot replaces the world's
    published state; a delta overlays it (null: despawned)."""

    snapshot: bool
    chunks: list[str]
    # a delta holding everything the deltas since the snapshot hold: they are deleted, it is kept
    replaces_deltas: NotRequired[bool]


@with_config(WIRE)
class SettlementRow(TypedDict):
    sequence: CommandSequence
    command_id: str
    outcome: Outcome
    error: str | None


@with_config(WIRE)
class ManifestRow(TypedDict):
    world_id: str
    tick: Tick
    writer_epoch: Epoch
    settlements: list[SettlementRow]
    written_runs: list[list[EntityId]]  # the ids the tick changed, as ascending runs [first, last]
    commit_token: str


class Published(TypedDict):
    tick: int
    published: bool


class Redriven(TypedDict):
    """The command a redrive created (or, replayed, had created) for a dead letter."""

    command_id: str
    sequence: int
    replayed: bool
    digest: str
    redriven_from: int


class Destroyed(TypedDict):
    cancelled: int


class OutboxEvent(TypedDict):
    event_id: str
    world_id: str
    event_seq: int
    command_id: str
    event_type: str
    status: str
    operation: str
    tick: int | None
    principal: str | None
    origin: str
    occurred_at: int
    payload: str


class Watermark(TypedDict):
    world_id: str
    committed_seq: int
    projected_seq: int
    pending: int


@with_config(WIRE)
class ComponentSchemaRow(TypedDict):
    """One component type as a world records it: its wire identity and canonical prefixed schema."""

    name: str
    fingerprint: str
    schema: dict[str, Any]


class ComponentRow(TypedDict):
    name: str
    fingerprint: str
    schema: dict[str, Any]
    recorded_at: int
    superseded_by: str | None  # the fingerprint a declared migration moved this type's values to


class MigrationRow(TypedDict):
    name: str
    from_fingerprint: str
    to_fingerprint: str
    tick: int
    entities: int
    commands: int
    migrated_at: int


class WorldComponents(TypedDict):
    components: list[ComponentRow]
    migrations: list[MigrationRow]


@with_config(WIRE)
class ComponentMigrationRow(TypedDict):
    name: str
    from_fingerprint: str
    to_fingerprint: str


@with_config(WIRE)
class EntityRewrite(TypedDict):
    """An entity's components text rewritten by a component migration (docs/storage.md, "One entity")."""

    entity_id: EntityId
    components: str


@with_config(WIRE)
class PayloadRewrite(TypedDict):
    sequence: CommandSequence
    payload: str


class Migrated(TypedDict):
    migration: MigrationRow
    migrated: bool  # False: this migration was recorded before (an answer lost), nothing rewritten


class Pruned(TypedDict):
    """What one `prune` call removed from a world, and whether anything prunable is left."""

    world_id: str
    ticks: int  # tick manifests older than the kept ticks
    commands: int  # settled commands past the idempotency window, their events acknowledged
    reservations: int  # spawn reservations past the window whose command is gone (or never came)
    quota_rows: int  # quota counters of ticks older than the kept ticks
    state_rows: int  # snapshot and delta chunks that no kept tick reads
    done: bool  # False: a category hit the limit; call again
