"""The command ledger: the one state machine both authorities run, over a `SqlPort`.

Every public method is one atomic transaction (destroy: a short series of them) whose arguments
and results are plain JSON values, so the local authority calls it in-process and the Durable
Object exposes it over RPC unchanged. The state machine and its rules are in docs/ledger.md:

    PENDING --lease--> LEASED --publish: applied--> APPLIED
       ^                 |  \\--publish: rejected--> REJECTED
       |                 |   \\--publish: failed, or a crash charged, budget left--> RETRYABLE --lease--> LEASED
       +--publish: tail--+    \\--publish: failed, or a crash charged, budget spent; permanent--> DEAD_LETTER
    any open status --destroy--> CANCELLED
    DEAD_LETTER (left as it is, but for its redriven_by mark) --redrive--> a new command, PENDING

A world row also carries its health (ACTIVE, or STALLED while its ticks fail before they are
prepared: `record_tick_failure`; the next `publish` recovers it).

Every named transition appends its outbox event in the same transaction. Settlements are only
ever written by the transaction that publishes their tick.

`Ledger` is every operation. Three sections of docs/ledger.md have modules of their own, each a
base of `Ledger`: admission (`ledger_admission.AdmissionOperations`), stepping a world: leasing,
publication, health (`ledger_stepping.SteppingOperations`), and forks
(`ledger_forks.ForkOperations`). What every operation stands on (the port, the clock, a world's
row and its checks, events, the lease map) is `ledger_core.LedgerCore`.
"""

from __future__ import annotations

import json
import re
from typing import Any, cast

from archetype.canonical import MAX_SAFE_INTEGER, canonical_json, canonical_text, printable_text
from archetype.commands import ledger_sql as q
from archetype.commands.component_check import check_components
from archetype.commands.errors import (
    AmbiguousCommandError,
    CommandConflictError,
    CommandNotFoundError,
    InvalidCommandError,
    MigrationConflictError,
    NotDeadLetteredError,
    RedriveConflictError,
    RunnerIdHeldError,
    StaleWriterError,
    UnknownComponentError,
    UnsupportedComponentSchemaError,
    WorldExistsError,
    WorldLeaseHeldError,
)
from archetype.commands.identity import COMMAND_ID_PATTERN, command_digest
from archetype.commands.ledger_admission import AdmissionOperations, runs_at
from archetype.commands.ledger_core import COMMAND_FIELDS, WORLD_FIELDS, check_lease_ms, named_row
from archetype.commands.ledger_forks import ForkOperations
from archetype.commands.ledger_rows import (
    MAX_PAGE,
    MAX_PRUNE,
    CommandId,
    CommandRow,
    ComponentMigrationRow,
    ComponentRow,
    ComponentSchemaRow,
    Destroyed,
    EntityId,
    EntityRewrite,
    Epoch,
    HostLeaseMs,
    KeepTicks,
    ManifestRow,
    Migrated,
    MigrationRow,
    OutboxEvent,
    PageLimit,
    PayloadRewrite,
    PendingWorld,
    Position,
    Pruned,
    PruneLimit,
    Redriven,
    RunnerRow,
    StatePage,
    StateRead,
    TickIntervalMs,
    TickPosition,
    Watermark,
    WindowMs,
    WorldComponents,
    WorldRow,
)
from archetype.commands.ledger_stepping import SteppingOperations
from archetype.commands.state_pages import (
    STATE_READ_CHUNKS,
    STATE_READ_IDS,
    STATE_READ_LIMIT,
    STATE_READ_TYPES,
    entity_texts_of,
    read_page,
    sections,
    state_at,
)
from archetype.world import columnar
from archetype.world.commit import chunk_entries
from archetype.world.component_schema import UnsupportedSchemaError, check_record
from archetype.world.operations import Label, Name
from archetype.world.tick_mode import DEFAULT_TICK_INTERVAL_MS, DEFAULT_TICK_MODE, check_tick_mode

OUTBOX_FIELDS = tuple(name.strip() for name in q.OUTBOX_COLUMNS.split(","))
RUNNER_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@:-]{0,127}")
RUNNER_FIELDS = tuple(name.strip() for name in q.RUNNER_COLUMNS.split(","))
PENDING_FIELDS = tuple(PendingWorld.__annotations__)
INSTANCE_LIMIT = 256
# Destroy cancels open commands in transactions of this many, so no transaction grows with the world.
CANCEL_BATCH = 1_000
MIGRATION_FIELDS = tuple(name.strip() for name in q.MIGRATION_COLUMNS.split(","))
# The most command ids one `commands_by_id` names.
COMMANDS_BY_ID_LIMIT = 1_000
COMPONENT_SPEC_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}(?::[0-9a-f]{64})?$"  # a type's <name>[:<fingerprint>]
_COMPONENT_SPEC = re.compile(COMPONENT_SPEC_PATTERN)
# Retention defaults (docs/ledger.md, "Retention"): what `archetype serve` and `catalog prune` use.
DEFAULT_KEEP_TICKS = 1_000
DEFAULT_IDEMPOTENCY_WINDOW_MS = 86_400_000  # 24 hours
PRUNE_LIMIT = 1_000
AMBIGUITY_NAMED = 10  # the principals an AmbiguousCommandError names, at most

# Public operations, in the order docs/ledger.md describes them. The Durable Object exposes
# exactly these, and `Authority` (authority.py) has one typed method for each.
LEDGER_METHODS = (
    "create_world", "world_info", "list_worlds", "acquire_writer", "claim_world", "renew_world", "release_world",
    "register_runner", "leave_runner", "live_runners", "hosted_worlds", "pending_worlds", "load_state", "read_state",
    "reserve_entity_ids",
    "reserve_spawn", "admit", "lease", "guard", "publish", "record_tick_failure", "retry_world", "release", "redrive", "destroy",
    "command", "commands_by_id", "history",
    "manifests", "read_outbox", "read_outbox_columns", "acknowledge_outbox", "watermark", "next_due_tick", "prune",
    "record_components", "components", "migrate_components",
)  # fmt: skip



# Ledger methods over more than one world's rows of one store, in one transaction: the local
# catalog (all its worlds in one database) runs them; a Durable Object holds one world, so there a
# fork is a copy between two objects, page by page, which the Worker's authority drives with the
# objects' FORK_COPY_METHODS (docs/ledger.md, "Forks on the Durable Object").
CATALOG_METHODS = ("fork_world",)
FORK_COPY_METHODS = ("fork_plan", "fork_page", "fork_release", "fork_begin", "fork_write", "fork_activate")


def _asked_by(actor: Name | None) -> str:
    """How an operator's call binds its events' `actor` (ledger_sql.APPEND_EVENTS's ?5)."""
    return json.dumps({"actor": actor})


class Ledger(AdmissionOperations, SteppingOperations, ForkOperations):
    """Every ledger operation (`LEDGER_METHODS`, `CATALOG_METHODS`, `FORK_COPY_METHODS`), each one
    transaction over the port."""

    # -- worlds --
    def create_world(self, world_id: str, name: Name, tick_mode: str = DEFAULT_TICK_MODE,
                     tick_interval_ms: TickIntervalMs = DEFAULT_TICK_INTERVAL_MS) -> WorldRow:  # fmt: skip
        """Create a world, stepped by `tick_mode` every `tick_interval_ms` (docs/ledger.md, "Tick
        modes"); the same creation again answers the world as it is."""
        try:
            check_tick_mode(tick_mode, tick_interval_ms)
        except ValueError as exc:
            raise InvalidCommandError(str(exc)) from None

        def run() -> WorldRow:
            rows = self._port.execute(q.GET_WORLD, (world_id,))
            if rows:
                existing = cast(WorldRow, named_row(WORLD_FIELDS, rows[0]))
                same = (existing["name"], existing["tick_mode"], existing["tick_interval_ms"]) == (name, tick_mode, tick_interval_ms)
                if same and existing["status"] == "ACTIVE":
                    return existing  # an identical retry of the creation
                raise WorldExistsError(f"world {world_id!r} already exists")
            self._check_not_forking(world_id)
            now = self._clock.now_ms()
            self._port.execute(q.INSERT_WORLD, (world_id, name, now, now, now, tick_mode, tick_interval_ms))
            return self._world(world_id)

        return self._port.transaction(run)

    def world_info(self, world_id: str) -> WorldRow:
        return self._port.transaction(lambda: self._world(world_id))

    def list_worlds(self) -> list[WorldRow]:
        return self._port.transaction(
            lambda: [cast(WorldRow, named_row(WORLD_FIELDS, r)) for r in self._port.execute(q.LIST_WORLDS)]
        )

    def acquire_writer(self, world_id: str) -> WorldRow:
        """Fence every earlier writer: their leases and publishes now fail with StaleWriterError."""

        def run() -> WorldRow:
            self._active_world(world_id)
            self._port.execute(q.BUMP_WRITER_EPOCH, (self._clock.now_ms(), world_id))
            return self._world(world_id)

        return self._port.transaction(run)

    # -- world leases --
    def claim_world(self, world_id: str, owner: Label, lease_ms: HostLeaseMs) -> WorldRow:
        """Become the world's host until `now + lease_ms`, fenced by the writer epoch.

        The lease's own owner resumes it (unexpired after a restart, or expired or released with no
        other host since) and the epoch stays. Any other owner takes it only when it is free (never
        claimed, expired, released, or forced by `acquire_writer`): that takeover alone bumps the
        epoch, and the previous hosts' command leases end at once. An unexpired lease of another
        owner is `WorldLeaseHeldError`, changing nothing.
        """
        check_lease_ms(lease_ms)

        def run() -> WorldRow:
            world = self._active_world(world_id)
            now = self._clock.now_ms()
            if world["host_owner"] == owner:
                self._port.execute(q.SET_WORLD_LEASE_EXPIRY, (now + lease_ms, world_id))
            elif world["host_owner"] is not None and cast(int, world["host_expires_at"]) > now:
                raise WorldLeaseHeldError(
                    f"world {world_id!r} is hosted by {world['host_owner']!r} until {world['host_expires_at']}"
                )
            else:
                self._port.execute(q.TAKE_WORLD_LEASE, (owner, now + lease_ms, now, world_id))
                self._port.execute(q.EXPIRE_OTHER_OWNERS_LEASES, (now, world_id, owner))
            return self._world(world_id)

        return self._port.transaction(run)

    def renew_world(self, world_id: str, owner: Label, writer_epoch: Epoch, lease_ms: HostLeaseMs) -> WorldRow:
        """The host's heartbeat: its world lease now runs until `now + lease_ms`. Fenced like every
        write of a host: a taken-over (or forced) writer gets `StaleWriterError` and changes nothing.
        A lease that expired with no other host since is renewed: nobody else held the epoch."""
        check_lease_ms(lease_ms)

        def run() -> WorldRow:
            self._host(world_id, owner, writer_epoch)
            self._port.execute(q.SET_WORLD_LEASE_EXPIRY, (self._clock.now_ms() + lease_ms, world_id))
            return self._world(world_id)

        return self._port.transaction(run)

    def release_world(self, world_id: str, owner: Label, writer_epoch: Epoch) -> WorldRow:
        """Give the world lease back (a host stopping cleanly, or handing a world to another runner):
        it expires now, so any runner may claim it at once; its owner is kept, so claiming it back
        does not move the epoch. Fenced by the writer epoch. Command leases are `release`'s."""

        def run() -> WorldRow:
            world = self._host(world_id, owner, writer_epoch)
            now = self._clock.now_ms()
            self._port.execute(q.SET_WORLD_LEASE_EXPIRY, (min(now, cast(int, world["host_expires_at"])), world_id))
            return self._world(world_id)

        return self._port.transaction(run)

    def _host(self, world_id: str, owner: str, writer_epoch: int) -> WorldRow:
        world = self._writer(world_id, writer_epoch)
        if world["host_owner"] != owner:
            raise StaleWriterError(f"{owner!r} does not hold the world lease of {world_id!r}")
        return world

    # -- the runner registry --
    def register_runner(self, runner_id: str, instance: Label, lease_ms: HostLeaseMs) -> RunnerRow:
        """Register `runner_id` as live until `now + lease_ms`, or renew it (the heartbeat): the
        runners that split the worlds are the live registrations (`live_runners`).

        `instance` says where the runner runs: a restart of the same runner passes the same one and
        gets its id back at once, live or not; another instance takes the id only once its
        registration expired (or was left). A live registration of another instance is
        `RunnerIdHeldError`, changing nothing.
        """
        check_lease_ms(lease_ms)
        if not RUNNER_ID_PATTERN.fullmatch(runner_id):
            raise InvalidCommandError(f"runner id {runner_id!r} must match {RUNNER_ID_PATTERN.pattern}")
        if not 0 < len(instance) <= INSTANCE_LIMIT:
            raise InvalidCommandError(f"a runner instance is 1 to {INSTANCE_LIMIT} characters")
        try:
            printable_text(instance)
        except ValueError as exc:
            raise InvalidCommandError(f"a runner instance is printable text: {exc}") from None

        def run() -> RunnerRow:
            now = self._clock.now_ms()
            held = self._runner(runner_id)
            if held is not None and held["instance"] != instance and held["expires_at"] > now:
                raise RunnerIdHeldError(
                    f"runner id {runner_id!r} is held by {held['instance']!r} until {held['expires_at']}"
                )
            self._port.execute(q.PUT_RUNNER, (runner_id, instance, now, now + lease_ms))
            return cast(RunnerRow, self._runner(runner_id))

        return self._port.transaction(run)

    def leave_runner(self, runner_id: str, instance: Label) -> RunnerRow | None:
        """A runner stopping cleanly: its registration expires now, so the others take its share at
        once. Another instance's live registration is `RunnerIdHeldError`; an expired or unknown one
        is left as it is (None: no runner ever had this id)."""

        def run() -> RunnerRow | None:
            now = self._clock.now_ms()
            held = self._runner(runner_id)
            if held is None or held["expires_at"] <= now:
                return held
            if held["instance"] != instance:
                raise RunnerIdHeldError(
                    f"runner id {runner_id!r} is held by {held['instance']!r} until {held['expires_at']}"
                )
            self._port.execute(q.EXPIRE_RUNNER, (now, runner_id, now))
            return self._runner(runner_id)

        return self._port.transaction(run)

    def live_runners(self) -> list[RunnerRow]:
        """The registrations unexpired now, in runner id order: the runners the worlds are split among."""
        return self._port.transaction(lambda: [
            cast(RunnerRow, named_row(RUNNER_FIELDS, r)) for r in self._port.execute(q.LIVE_RUNNERS, (self._clock.now_ms(),))
        ])  # fmt: skip

    def hosted_worlds(self, owner: Label) -> list[WorldRow]:
        """The worlds whose world lease names `owner` (held, expired or released), in world id order:
        what the other runners move when that runner dies, read through an index of the lease's owner."""
        return self._port.transaction(
            lambda: [cast(WorldRow, named_row(WORLD_FIELDS, r)) for r in self._port.execute(q.HOSTED_WORLDS, (owner,))]
        )

    def _runner(self, runner_id: str) -> RunnerRow | None:
        rows = self._port.execute(q.GET_RUNNER, (runner_id,))
        return cast(RunnerRow, named_row(RUNNER_FIELDS, rows[0])) if rows else None

    def pending_worlds(self) -> list[PendingWorld]:
        """Every world with an open command, with the earliest scheduled tick among them and its
        world lease: a runner's due-time index (idle worlds are not read). A Durable Object holds
        one world, so there it answers that world or nothing."""
        return self._port.transaction(
            lambda: [cast(PendingWorld, named_row(PENDING_FIELDS, r)) for r in self._port.execute(q.PENDING_WORLDS)]
        )

    def load_state(self, world_id: str, after_entity_id: Position = 0, limit: PageLimit = MAX_PAGE) -> StatePage:
        """The world's published state at its tick head, one page of entities at a time: the
        `limit` lowest entity ids above `after_entity_id`. Each entity's components are the
        canonical JSON text it was published as: chunks are parsed and each entity's part written
        back in the same layout, which gives the very bytes that were sent (docs/storage.md), so
        floats such as -0.0 and 2.0 keep their identity across any transport."""

        def run() -> StatePage:
            world = self._world(world_id)
            page, _ = read_page(self._port, world_id, state_at(self._port, world_id, world["tick_head"]), after_entity_id, limit)
            return {
                "tick_head": world["tick_head"],
                "writer_epoch": world["writer_epoch"],
                "entities": [{"entity_id": e, "components": text} for e, text in entity_texts_of(page)],
            }

        return self._port.transaction(run)

    def read_state(self, world_id: str, after_entity_id: Position = 0, limit: PageLimit = 1_000,
                   component_types: list[str] | None = None, entity_ids: list[EntityId] | None = None,
                   tick: TickPosition | None = None) -> StateRead:  # fmt: skip
        """A page of the published state for a reader (docs/storage.md, "Reading state"), at the
        tick head or, given `tick`, as the world published it at that tick (any tick of its
        retention window: "State at a tick"; `TickNotRetainedError` outside it): the
        entities above `after_entity_id`, in id order, as `load_state` answers them (but in
        sections by signature, each component type's data a column: `state_pages.sections`), kept to those
        that have a component of every type of `component_types` (each a recorded type's
        `<name>:<fingerprint>`, or the `<name>` of the one current type so named), with only
        those components, and to `entity_ids`; at most `limit` of them, and at most
        STATE_READ_CHUNKS snapshot chunks read. Continue after `next_after` until it is None."""
        if not (type(after_entity_id) is int and type(limit) is int and 0 <= after_entity_id <= MAX_SAFE_INTEGER
                and 1 <= limit <= STATE_READ_LIMIT):  # fmt: skip
            raise InvalidCommandError(f"read_state takes after_entity_id 0..2**53-1 and limit 1..{STATE_READ_LIMIT}")
        if component_types is not None and not (
            0 < len(component_types) <= STATE_READ_TYPES and all(type(t) is str and _COMPONENT_SPEC.fullmatch(t) for t in component_types)
        ):  # fmt: skip
            raise InvalidCommandError(f"component_types are 1..{STATE_READ_TYPES} of <name> or <name>:<64 hex fingerprint>")
        if entity_ids is not None and not (
            0 < len(entity_ids) <= STATE_READ_IDS and all(type(e) is int and 1 <= e <= MAX_SAFE_INTEGER for e in entity_ids)
        ):  # fmt: skip
            raise InvalidCommandError(f"entity_ids are 1..{STATE_READ_IDS} entity ids (1..2**53-1)")
        if tick is not None and not (type(tick) is int and -1 <= tick <= MAX_SAFE_INTEGER):
            raise InvalidCommandError("read_state takes a tick -1..2**53-1")

        def run() -> StateRead:
            world = self._world(world_id)
            if tick is not None:
                self._check_retained(world, tick)
            keys = None if component_types is None else self._component_keys(world_id, component_types)
            at = state_at(self._port, world_id, world["tick_head"] if tick is None else tick)
            page, next_after = read_page(self._port, world_id, at, after_entity_id, limit, keys=keys,
                                         entity_ids=entity_ids, max_chunks=STATE_READ_CHUNKS)  # fmt: skip
            return {"tick_head": at.tick, "sections": sections(page), "next_after": next_after}

        return self._port.transaction(run)

    def _component_keys(self, world_id: str, specs: list[str]) -> frozenset[str]:
        """The component keys `specs` name among the world's recorded types (`read_state`)."""
        recorded = self._port.execute(q.LIST_COMPONENTS, (world_id,))
        keys = {f"{r[0]}:{r[1]}" for r in recorded}
        found = set()
        for spec in specs:
            if ":" in spec:
                if spec not in keys:
                    raise UnknownComponentError(
                        f"world {world_id!r} has recorded no component {spec} (GET /worlds/{{id}}/components lists them)"
                    )
                found.add(spec)
                continue
            current = [f"{r[0]}:{r[1]}" for r in recorded if r[0] == spec and r[4] is None]
            if len(current) != 1:
                which = "no current component type" if not current else f"{len(current)} current component types"
                raise UnknownComponentError(f"world {world_id!r} has {which} named {spec!r}: name one as <name>:<fingerprint>")
            found.add(current[0])
        return frozenset(found)

    def _entities_naming(self, world_id: str, fingerprint: str) -> list[int]:
        """The published entities whose components text names `fingerprint`, in id order: the
        state as `load_state` reads it (the deltas overlaid on the snapshot's chunks), in one pass;
        a chunk that does not contain the fingerprint's text is not parsed."""
        # entity -> whether its latest whole delta entry names it; a partial entry replaces
        # components of the same keys, so it changes no entity's set of component types
        overlay: dict[int, bool] = {}
        at = state_at(self._port, world_id, self._world(world_id)["tick_head"])
        for (body,) in self._port.execute(q.LIST_STATE_DELTAS, (world_id, at.deltas_from, at.tick)):
            for entity_id, text in columnar.decode(body):
                if not isinstance(text, columnar.Partial):
                    overlay[entity_id] = text is not None and fingerprint in text
        naming = [entity_id for entity_id, names in overlay.items() if names]
        cursor = -1
        while rows := self._port.execute(q.NEXT_STATE_CHUNK, (world_id, at.snapshot_tick, cursor)):  # no snapshot: NULL, none
            cursor, body = rows[0]
            if fingerprint in body:
                naming += [e for e, t in columnar.decode(body)
                           if e not in overlay and isinstance(t, str) and fingerprint in t]  # fmt: skip
        return sorted(naming)

    def _check_components(self, world_id: str, documents: list[tuple[str, str]]) -> None:
        check_components(world_id, documents, lambda fps: self._port.execute(q.FIND_COMPONENTS, (json.dumps(fps), world_id)))

    # -- component schemas --
    def record_components(self, world_id: str, components: list[ComponentSchemaRow]) -> int:
        """Record the schemas of component types the world uses; answer how many were new.
        Recording a type again is a no-op (a fingerprint is its schema's digest)."""
        records = []
        for index, record in enumerate(components):
            try:
                check_record(record["name"], record["fingerprint"], record["schema"])
            except UnsupportedSchemaError as exc:
                raise UnsupportedComponentSchemaError(
                    f"component {record['name']!r} (#{index}): {exc}"
                ) from None
            records.append([record["fingerprint"], record["name"], canonical_json(record["schema"])])

        def run() -> int:
            self._active_world(world_id)
            fingerprints = json.dumps(sorted({r[0] for r in records}))
            before = {r[1] for r in self._port.execute(q.FIND_COMPONENTS, (fingerprints, world_id))}
            fresh = [r for r in records if r[0] not in before]
            if fresh:
                self._port.execute(q.INSERT_COMPONENTS, (world_id, self._clock.now_ms(), json.dumps(fresh)))
            return len({r[0] for r in fresh})

        return self._port.transaction(run)

    def components(self, world_id: str) -> WorldComponents:
        """The component types a world recorded (by name, then when), and its component migrations."""

        def run() -> WorldComponents:
            self._world(world_id)
            rows = self._port.execute(q.LIST_COMPONENTS, (world_id,))
            migrations = self._port.execute(q.LIST_MIGRATIONS, (world_id,))
            return {
                "components": [
                    cast(ComponentRow, {"name": r[0], "fingerprint": r[1], "schema": json.loads(r[2]),
                                        "recorded_at": r[3], "superseded_by": r[4]})  # fmt: skip
                    for r in rows
                ],
                "migrations": [cast(MigrationRow, named_row(MIGRATION_FIELDS, r)) for r in migrations],
            }

        return self._port.transaction(run)

    def migrate_components(self, world_id: str, writer_epoch: Epoch, migration: ComponentMigrationRow,
                           entities: list[EntityRewrite], commands: list[PayloadRewrite]) -> Migrated:  # fmt: skip
        """Apply a declared component migration in one transaction: rewrite every published entity
        and every open command that names the old fingerprint (the caller computed the new forms;
        the ledger checks that they are exactly those, and fit the new schema), record the
        migration, and append its `schema_migrated` outbox event. The same migration again is
        recognised (`migrated: false`); another one for that fingerprint is a conflict."""
        name, old, new = migration["name"], migration["from_fingerprint"], migration["to_fingerprint"]

        def run() -> Migrated:
            existing = self._port.execute(q.GET_MIGRATION, (world_id, old))
            if existing:
                recorded = cast(MigrationRow, named_row(MIGRATION_FIELDS, existing[0]))
                if (recorded["name"], recorded["to_fingerprint"]) != (name, new):
                    raise MigrationConflictError(
                        f"component {name!r} {old} was already migrated to {recorded['name']!r} {recorded['to_fingerprint']}"
                    )
                return {"migration": recorded, "migrated": False}
            world = self._writer(world_id, writer_epoch)
            self._check_rewrites(world_id, old, entities, commands)
            now = self._clock.now_ms()
            if entities:  # a delta at the tick head, after that tick's parts: it overlays what was published
                rewritten = sorted((w["entity_id"], w["components"]) for w in entities)
                part = self._port.execute(q.NEXT_DELTA_PART, (world_id, world["tick_head"]))[0][0]
                for offset, chunk in enumerate(chunk_entries(rewritten)):
                    self._port.execute(q.INSERT_STATE_DELTA, (world_id, world["tick_head"], part + offset, chunk, 0))
            if commands:
                rewrites = []
                for rewrite in commands:
                    row = self._command_at(world_id, rewrite["sequence"])
                    assert row is not None  # _check_rewrites found it open
                    rewrites.append([rewrite["sequence"], rewrite["payload"],
                                     command_digest({**row, "payload": rewrite["payload"]})])  # fmt: skip
                self._port.execute(q.REWRITE_PAYLOADS, (world_id, now, json.dumps(rewrites)))
            recorded = cast(MigrationRow, {
                "name": name, "from_fingerprint": old, "to_fingerprint": new, "tick": world["tick_head"],
                "entities": len(entities), "commands": len(commands), "migrated_at": now,
            })  # fmt: skip
            self._port.execute(q.INSERT_MIGRATION, (world_id, *(recorded[f] for f in MIGRATION_FIELDS)))  # type: ignore[literal-required]
            event = world["next_event_seq"]
            self._port.execute(q.APPEND_SCHEMA_EVENT, (
                world_id, event, f"schema-migration/{name}/{old}", "schema_migrated", "migrate_components",
                world["tick_head"], now, canonical_json(dict(recorded)),
            ))  # fmt: skip
            return {"migration": recorded, "migrated": True}

        return self._port.transaction(run)

    def _check_rewrites(self, world_id: str, old: str, entities: list[EntityRewrite], commands: list[PayloadRewrite]) -> None:
        """The rewrites cover exactly the entities and open commands naming `old`, name it no
        more, and every component in them is recorded, current and fits its schema."""
        naming_entities = self._entities_naming(world_id, old)
        naming_commands = [r[0] for r in self._port.execute(q.OPEN_COMMANDS_NAMING, (world_id, old))]
        given_entities = sorted(w["entity_id"] for w in entities)
        given_commands = sorted(c["sequence"] for c in commands)
        if given_entities != naming_entities or given_commands != naming_commands:
            raise MigrationConflictError(
                f"the migration of {old} rewrites entities {given_entities} and commands {given_commands}; "
                f"the ledger has entities {naming_entities} and open commands {naming_commands} naming it"
            )
        documents: list[tuple[str, str]] = []
        for write in entities:
            text = write["components"]
            if text is None or old in text or canonical_json(json.loads(text)) != text:
                raise InvalidCommandError(f"entity {write['entity_id']}: migrated components are canonical and name {old} no more")
            documents.append((f"entity {write['entity_id']}", text))
        for rewrite in commands:
            if old in rewrite["payload"] or canonical_json(json.loads(rewrite["payload"])) != rewrite["payload"]:
                raise InvalidCommandError(f"command #{rewrite['sequence']}: a migrated payload is canonical and names {old} no more")
            documents.append((f"command #{rewrite['sequence']}", rewrite["payload"]))
        self._check_components(world_id, documents)

    # -- redrive --
    def redrive(self, world_id: str, command_id: CommandId, scope: str = "", new_command_id: CommandId | None = None,
                actor: Name | None = None) -> Redriven:  # fmt: skip
        """A new command redriving the dead letter `command_id` of `scope`: the same operation,
        payload, principal, priority and attempt budget, none of it spent, due at the next tick,
        linked by `redriven_from`, with its own `redriven` event, naming the operator who asked
        (`actor`; None in-process). The dead record stays as it is but for its `redriven_by`.

        A dead letter is redriven once, and records it on its own row (`redriven_by`), which
        retention never prunes: the same `new_command_id` again (default `<command_id>.redrive`)
        answers the same command, `replayed`, while that command is retained; another id, or any
        once the redrive was pruned, is `RedriveConflictError`. The copied payload passes
        admission's component check (a type a migration superseded: `UnknownComponentError`).
        """
        new_id = new_command_id if new_command_id is not None else f"{command_id[:120]}.redrive"
        if not COMMAND_ID_PATTERN.fullmatch(new_id):
            raise InvalidCommandError(f"command id {new_id!r} must match {COMMAND_ID_PATTERN.pattern}")

        def run() -> Redriven:
            world = self._active_world(world_id)
            rows = self._port.execute(q.GET_COMMAND, (world_id, scope, command_id))
            if not rows:
                raise CommandNotFoundError(f"world {world_id!r} has no command {command_id!r} in this scope")
            dead = cast(CommandRow, named_row(COMMAND_FIELDS, rows[0]))
            if dead["status"] != "DEAD_LETTER":
                raise NotDeadLetteredError(f"command {command_id!r} is {dead['status']}; only a DEAD_LETTER is redriven")
            if dead["redriven_by"] is not None:
                redrive = self._command_at(world_id, dead["redriven_by"])
                if redrive is None or redrive["command_id"] != new_id:
                    named = f"{redrive['command_id']!r}" if redrive else "a command retention has since pruned"
                    raise RedriveConflictError(
                        f"command {command_id!r} was already redriven as #{dead['redriven_by']} ({named})"
                    )
                return self._redriven(redrive, replayed=True)
            if self._port.execute(q.GET_COMMAND, (world_id, scope, new_id)) or self._port.execute(
                q.GET_RESERVATION, (world_id, scope, new_id)
            ):
                raise CommandConflictError(f"command id {new_id!r} is already taken in this scope")
            self._check_components(world_id, [(f"dead letter {command_id!r}, whose payload a redrive copies", dead["payload"])])
            sequence, tick = world["next_sequence"], runs_at(dead["scheduled_tick"], world["tick_head"])
            identity = {**dead, "command_id": new_id, "scheduled_tick": tick}
            now = self._clock.now_ms()
            self._port.execute(q.INSERT_REDRIVE, (sequence, new_id, tick, command_digest(identity), now, now, world_id,
                                                  dead["sequence"]))  # fmt: skip
            self._port.execute(q.MARK_REDRIVEN, (sequence, world_id, dead["sequence"]))
            # numbered as read before the row went in: the world's next event number reads the last
            # command's `admitted` event, and this row, now the last, carries none (its event is written)
            self._write_events(world_id, world["next_event_seq"], canonical_text([sequence]), now, _asked_by(actor))
            created = self._command_at(world_id, sequence)
            assert created is not None
            return self._redriven(created, replayed=False)

        return self._port.transaction(run)

    @staticmethod
    def _redriven(row: CommandRow, *, replayed: bool) -> Redriven:
        assert row["redriven_from"] is not None
        return {"command_id": row["command_id"], "sequence": row["sequence"], "replayed": replayed,
                "digest": row["digest"], "redriven_from": row["redriven_from"]}  # fmt: skip

    # -- destroy --
    def destroy(self, world_id: str, actor: Name | None = None) -> Destroyed:
        """Close admission, cancel every unsettled command, then mark the world DESTROYED; the
        cancellations' events name the `actor` who asked (None in-process, and for a destroy
        someone else finishes: the actor is no one's to remember between the transactions).

        The first transaction makes every later admission fail with WorldClosingError; the next
        ones cancel what was admitted before it, CANCEL_BATCH at a time, the last of them marking
        the world DESTROYED. Re-running finishes an interrupted destroy (runners do so for every
        CLOSING world they meet).
        """

        def close() -> None:
            if self._world(world_id)["status"] == "ACTIVE":
                self._port.execute(q.SET_WORLD_STATUS, ("CLOSING", self._clock.now_ms(), world_id))

        def cancel_batch() -> int | None:
            if self._world(world_id)["status"] == "DESTROYED":
                return None
            sequences = [r[0] for r in self._port.execute(q.OPEN_SEQUENCES, (world_id, CANCEL_BATCH))]
            now = self._clock.now_ms()
            if sequences:
                self._port.execute(q.CANCEL_COMMANDS, ("world destroyed", now, world_id, json.dumps(sequences)))
                self._change_leases(world_id, dict.fromkeys(map(str, sequences)))
                self._append_events(world_id, sequences, now, _asked_by(actor))
            if len(sequences) < CANCEL_BATCH:
                self._port.execute(q.SET_WORLD_STATUS, ("DESTROYED", now, world_id))
            return len(sequences)

        self._port.transaction(close)
        cancelled = 0
        while (count := self._port.transaction(cancel_batch)) is not None:
            cancelled += count
            if count < CANCEL_BATCH:
                break
        return {"cancelled": cancelled}

    # -- reads --
    def command(self, world_id: str, command_id: CommandId, scope: str | None = "") -> CommandRow | None:
        """The command `command_id` of `scope` (a principal's name; '' for trusted callers). With
        scope None, the one command of that id in any scope; `AmbiguousCommandError`, naming their
        principals, when several scopes hold one."""

        def run() -> CommandRow | None:
            self._world(world_id)
            if scope is not None:
                rows = self._port.execute(q.GET_COMMAND, (world_id, scope, command_id))
            else:
                rows = self._port.execute(q.COMMANDS_NAMED, (world_id, command_id, AMBIGUITY_NAMED + 1))
            if len(rows) > 1:
                found = [cast(CommandRow, named_row(COMMAND_FIELDS, r))["principal"] for r in rows[:AMBIGUITY_NAMED]]
                named = ", ".join("trusted callers" if p is None else repr(p) for p in found)
                more = " and more" if len(rows) > AMBIGUITY_NAMED else ""
                raise AmbiguousCommandError(
                    f"world {world_id!r} has commands {command_id!r} of {named}{more}; name the principal (or the trusted callers)"
                )
            return cast(CommandRow, named_row(COMMAND_FIELDS, rows[0])) if rows else None

        return self._port.transaction(run)

    def commands_by_id(self, world_id: str, command_ids: list[CommandId], scope: str = "") -> list[CommandRow]:
        """The commands of `scope` among `command_ids` (1..COMMANDS_BY_ID_LIMIT ids), in sequence
        order: `command` for many ids in one read; an id the scope has not admitted is left out."""
        if not 0 < len(command_ids) <= COMMANDS_BY_ID_LIMIT or not all(
            isinstance(c, str) and COMMAND_ID_PATTERN.fullmatch(c) for c in command_ids
        ):  # fmt: skip
            raise InvalidCommandError(f"commands_by_id takes 1..{COMMANDS_BY_ID_LIMIT} command ids")

        def run() -> list[CommandRow]:
            self._world(world_id)
            rows = self._port.execute(q.GET_COMMANDS, (json.dumps(sorted(set(command_ids))), world_id, scope))
            return [cast(CommandRow, named_row(COMMAND_FIELDS, r)) for r in rows]

        return self._port.transaction(run)

    def history(self, world_id: str, status: str | None = None, after_sequence: Position = 0, limit: PageLimit = 100,
                scope: str | None = None) -> list[CommandRow]:  # fmt: skip
        """Commands in sequence order; `scope` keeps one principal's ('' trusted callers'), None all."""

        def run() -> list[CommandRow]:
            self._world(world_id)
            rows = self._port.execute(q.HISTORY, (world_id, after_sequence, status, status, scope, scope, limit))
            return [cast(CommandRow, named_row(COMMAND_FIELDS, r)) for r in rows]

        return self._port.transaction(run)

    def next_due_tick(self, world_id: str) -> int | None:
        """The lowest scheduled tick among the world's open commands (PENDING, LEASED, RETRYABLE);
        None when none is open. What a host asks to decide whether an idle world needs a tick."""

        def run() -> int | None:
            self._world(world_id)
            rows = self._port.execute(q.NEXT_DUE_TICK, (world_id,))
            return int(rows[0][0]) if rows else None

        return self._port.transaction(run)

    def manifests(self, world_id: str, after_tick: TickPosition = -1, limit: PageLimit = 100) -> list[ManifestRow]:
        def run() -> list[ManifestRow]:
            self._world(world_id)  # an unknown world is refused, as every other read of one world refuses it
            return [_manifest(r[0]) for r in self._port.execute(q.LIST_TICKS, (world_id, after_tick, limit))]

        return self._port.transaction(run)

    # -- outbox --
    def read_outbox(self, world_id: str, after_seq: Position = 0, limit: PageLimit = 100) -> list[OutboxEvent]:
        """Unacknowledged events after `after_seq`, in sequence order, one dict per event."""
        page = self._outbox_page(q.READ_OUTBOX, world_id, after_seq, limit)
        page.sort(key=lambda row: row[2])  # by event_seq: json_each's order, checked, never assumed
        return [cast(OutboxEvent, named_row(OUTBOX_FIELDS, r)) for r in page]

    def read_outbox_columns(self, world_id: str, after_seq: Position = 0, limit: PageLimit = 100) -> dict[str, list[Any]]:
        """The same page as `read_outbox`, column by column (field name -> values): what a columnar
        projector wants, without building a Python object per event."""
        (arrays,) = self._outbox_page(q.READ_OUTBOX_COLUMNS, world_id, after_seq, limit)
        columns = {field: json.loads(array) for field, array in zip(OUTBOX_FIELDS, arrays, strict=True)}
        sequences = columns["event_seq"]
        if sequences != sorted(sequences):  # SQLite keeps the subquery's order; checked, never assumed
            order = sorted(range(len(sequences)), key=sequences.__getitem__)
            columns = {field: [values[i] for i in order] for field, values in columns.items()}
        return columns

    def _outbox_page(self, statement: str, world_id: str, after_seq: int, limit: int) -> list[tuple[Any, ...]]:
        def run() -> list[tuple[Any, ...]]:
            after = max(after_seq, self._world(world_id)["projected_seq"])
            return self._port.execute(statement, (world_id, after, limit))

        return self._port.transaction(run)

    def acknowledge_outbox(self, world_id: str, up_to_seq: Position) -> Watermark:
        """Record that events up to `up_to_seq` are projected; they leave the outbox."""

        def run() -> Watermark:
            world = self._world(world_id)
            if up_to_seq >= world["next_event_seq"]:
                raise InvalidCommandError(f"event {up_to_seq} of world {world_id!r} was never written")
            self._port.execute(q.SET_PROJECTED_SEQ, (up_to_seq, world_id))
            self._port.execute(q.DELETE_OUTBOX_UPTO, (world_id, up_to_seq))
            return self._watermark(world_id)

        return self._port.transaction(run)

    def watermark(self, world_id: str) -> Watermark:
        return self._port.transaction(lambda: self._watermark(world_id))

    def _watermark(self, world_id: str) -> Watermark:
        world = self._world(world_id)
        committed = world["next_event_seq"] - 1
        return {
            "world_id": world_id,
            "committed_seq": committed,
            "projected_seq": world["projected_seq"],
            "pending": committed - world["projected_seq"],
        }

    # -- retention --
    def prune(self, world_id: str, keep_ticks: KeepTicks = DEFAULT_KEEP_TICKS,
              idempotency_window_ms: WindowMs = DEFAULT_IDEMPOTENCY_WINDOW_MS, limit: PruneLimit = PRUNE_LIMIT) -> Pruned:  # fmt: skip
        """Remove what no guarantee needs any more (docs/ledger.md, "Retention"), at most `limit`
        rows of each kind, oldest first; `done` is False while more is left.

        - tick manifests (and quota counters) of ticks older than the newest `keep_ticks`: the
          tick head's manifest always stays, so a publish whose answer was lost is still
          recognised by its commit token;
        - APPLIED, REJECTED and CANCELLED commands settled at least `idempotency_window_ms` ago
          whose every outbox event is acknowledged (their trail is in the audit table); after
          that their command id may be used again. Open commands and dead letters stay;
        - spawn reservations older than the window whose command is gone or never came;
        - state rows no kept tick reads: the state at every kept tick stays readable (`read_state`
          with a tick), and the world's oldest retained tick moves up to the oldest kept one.
        """
        if keep_ticks < 1:
            raise InvalidCommandError("keep_ticks must be at least 1: the tick head's manifest is always kept")
        if idempotency_window_ms < 0:
            raise InvalidCommandError("idempotency_window_ms cannot be negative")
        if not 1 <= limit <= MAX_PRUNE:
            raise InvalidCommandError(f"cannot prune {limit} rows at a time (1..{MAX_PRUNE})")

        def run() -> Pruned:
            world = self._world(world_id)
            oldest_tick = world["tick_head"] - keep_ticks
            horizon = self._clock.now_ms() - idempotency_window_ms
            ((first_pending,),) = self._port.execute(q.FIRST_PENDING_EVENT, (world_id, world["projected_seq"]))
            if first_pending is not None:
                horizon = min(horizon, first_pending - 1)
            ticks = len(self._port.execute(q.PRUNE_TICKS, (world_id, oldest_tick, limit)))
            # the commands pruned may include the last one, whose sequence the next admission reads
            self._port.execute(q.RAISE_SEQUENCE_FLOOR, (world["next_sequence"], world_id))
            commands = len(self._port.execute(q.PRUNE_COMMANDS, (world_id, horizon, limit)))
            # after the commands, so the reservations of the commands just pruned go too
            reservations = len(self._port.execute(q.PRUNE_RESERVATIONS, (world_id, horizon, limit)))
            quota_rows = len(self._port.execute(q.PRUNE_QUOTA_USAGE, (world_id, oldest_tick, limit)))
            pinned = self._port.execute(q.FORK_PINNED_TICK, (world_id,))[0][0]  # a fork being copied reads it
            oldest_kept = oldest_tick + 1 if pinned is None else min(oldest_tick + 1, pinned)
            snapshot_rows, delta_rows = self._prune_state(world_id, oldest_kept, limit)
            state_rows = snapshot_rows + delta_rows
            done = max(ticks, commands, reservations, quota_rows, snapshot_rows, delta_rows) < limit
            return {"world_id": world_id, "ticks": ticks, "commands": commands, "reservations": reservations,
                    "quota_rows": quota_rows, "state_rows": state_rows, "done": done}  # fmt: skip

        return self._port.transaction(run)


    def _prune_state(self, world_id: str, oldest_kept: int, limit: int) -> tuple[int, int]:
        """Keep the state from `oldest_kept` on (never lowering the world's oldest retained tick):
        delete, at most `limit` rows of each table, the snapshots before the one the oldest
        retained tick reads and the deltas before the first it reads. Answers both counts."""
        self._port.execute(q.RAISE_STATE_FROM_TICK, (oldest_kept, world_id))
        at = state_at(self._port, world_id, self._port.execute(q.GET_STATE_FROM_TICK, (world_id,))[0][0])
        snapshots = 0 if at.snapshot_tick is None else len(
            self._port.execute(q.PRUNE_STATE_SNAPSHOTS, (world_id, at.snapshot_tick, limit))
        )
        deltas = len(self._port.execute(q.PRUNE_STATE_DELTAS, (world_id, at.deltas_from, limit)))
        return snapshots, deltas


def _manifest(text: str) -> ManifestRow:
    """A stored manifest as every reader gets it: one stored before the written ids were runs
    (docs/storage.md) lists them, and is answered with the same ids as runs."""
    manifest = json.loads(text)
    if "written_entity_ids" in manifest:
        manifest["written_runs"] = columnar.id_runs(sorted(manifest.pop("written_entity_ids")))
    return cast(ManifestRow, manifest)
