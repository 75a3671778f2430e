"""The ledger's schema, as versioned forward-only migrations.

A catalog records its schema version in `meta`; opening it runs every migration above that
version, in order, in ONE transaction (so an interrupted upgrade leaves the old version intact).
A fresh catalog runs them all from version 0. Both authorities migrate on open: the local catalog
when it is opened, the Durable Object in its constructor.

The statements follow the Durable Object's rules (no transaction control, no PRAGMA, nothing
that touches the temp schema, which ALTER TABLE RENAME does), so a table whose primary key
changes is rebuilt without a rename: copy it aside, drop it, create it anew, copy back.
Each migration is written once and never edited after it ships; a change is a new migration.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Migration:
    version: int
    summary: str
    statements: tuple[str, ...]


V1_SCHEMA = Migration(1, "the first schema", (
    """CREATE TABLE meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL)""",
    """CREATE TABLE worlds (
        world_id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('ACTIVE', 'CLOSING', 'DESTROYED')),
        tick_head INTEGER NOT NULL DEFAULT -1,
        next_entity_id INTEGER NOT NULL DEFAULT 1,
        writer_epoch INTEGER NOT NULL DEFAULT 0,
        next_sequence INTEGER NOT NULL DEFAULT 1,
        next_event_seq INTEGER NOT NULL DEFAULT 1,
        projected_seq INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL)""",
    """CREATE TABLE commands (
        world_id TEXT NOT NULL,
        command_id TEXT NOT NULL,
        sequence INTEGER NOT NULL,
        schema_version INTEGER NOT NULL,
        scheduled_tick INTEGER NOT NULL,
        priority INTEGER NOT NULL,
        operation TEXT NOT NULL,
        payload TEXT NOT NULL,
        digest TEXT NOT NULL,
        principal TEXT,
        origin TEXT NOT NULL,
        max_attempts INTEGER NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        reserved_entity_id INTEGER,
        status TEXT NOT NULL,
        lease_owner TEXT,
        lease_expires_at INTEGER,
        applied_tick INTEGER,
        last_error TEXT,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (world_id, command_id))""",
    "CREATE UNIQUE INDEX commands_by_sequence ON commands (world_id, sequence)",
    """CREATE INDEX commands_due ON commands (world_id, scheduled_tick, priority, sequence)
        WHERE status IN ('PENDING', 'LEASED', 'RETRYABLE')""",
    """CREATE TABLE spawn_reservations (
        world_id TEXT NOT NULL,
        command_id TEXT NOT NULL,
        entity_id INTEGER NOT NULL,
        request_digest TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (world_id, command_id))""",
    """CREATE TABLE ticks (
        world_id TEXT NOT NULL,
        tick INTEGER NOT NULL,
        commit_token TEXT NOT NULL,
        manifest TEXT NOT NULL,
        published_at INTEGER NOT NULL,
        PRIMARY KEY (world_id, tick))""",
    "CREATE UNIQUE INDEX ticks_by_token ON ticks (world_id, commit_token)",
    """CREATE TABLE entities (
        world_id TEXT NOT NULL,
        entity_id INTEGER NOT NULL,
        components TEXT NOT NULL,
        updated_tick INTEGER NOT NULL,
        PRIMARY KEY (world_id, entity_id))""",
    """CREATE TABLE outbox (
        world_id TEXT NOT NULL,
        event_seq INTEGER NOT NULL,
        event_id TEXT NOT NULL,
        command_id TEXT NOT NULL,
        event_type TEXT NOT NULL,
        status TEXT NOT NULL,
        operation TEXT NOT NULL,
        tick INTEGER,
        principal TEXT,
        origin TEXT NOT NULL,
        occurred_at INTEGER NOT NULL,
        payload TEXT NOT NULL,
        PRIMARY KEY (world_id, event_seq)) WITHOUT ROWID""",
    """CREATE TABLE quota_usage (
        world_id TEXT NOT NULL,
        principal TEXT NOT NULL,
        scheduled_tick INTEGER NOT NULL,
        used INTEGER NOT NULL,
        PRIMARY KEY (world_id, principal, scheduled_tick))""",
))  # fmt: skip

# Version 2: exactly-once under faults (docs/ledger.md).
# - Command ids are scoped to the admitting principal (`scope`: the principal, '' for trusted
#   callers), so the ledger addresses a command by its per-world sequence.
# - Leases name the runner's session (its incarnation) beside its stable owner.
# - A world row carries the crash guard: the command a runner was materializing in guarded mode.
# - Attempts are charged at settlement, not at lease: a v1 LEASED row gives back the attempt its
#   lease charged, and its lease (of a runner without a session) is recovered like a crashed one.
# - Tick manifests list settlements (sequence, command id, outcome) instead of applied ids.
V2_EXACTLY_ONCE = Migration(2, "principal-scoped ids, runner sessions, crash guard, settlement manifests", (
    "CREATE TABLE commands_v1 AS SELECT * FROM commands",
    "DROP TABLE commands",
    """CREATE TABLE commands (
        world_id TEXT NOT NULL,
        sequence INTEGER NOT NULL,
        scope TEXT NOT NULL,
        command_id TEXT NOT NULL,
        schema_version INTEGER NOT NULL,
        scheduled_tick INTEGER NOT NULL,
        priority INTEGER NOT NULL,
        operation TEXT NOT NULL,
        payload TEXT NOT NULL,
        digest TEXT NOT NULL,
        principal TEXT,
        origin TEXT NOT NULL,
        max_attempts INTEGER NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        reserved_entity_id INTEGER,
        status TEXT NOT NULL,
        lease_owner TEXT,
        lease_session TEXT,
        lease_expires_at INTEGER,
        applied_tick INTEGER,
        last_error TEXT,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (world_id, sequence))""",
    """INSERT INTO commands (world_id, sequence, scope, command_id, schema_version, scheduled_tick, priority,
            operation, payload, digest, principal, origin, max_attempts, attempts, reserved_entity_id, status,
            lease_owner, lease_session, lease_expires_at, applied_tick, last_error, created_at, updated_at)
        SELECT world_id, sequence, coalesce(principal, ''), command_id, schema_version, scheduled_tick, priority,
            operation, payload, digest, principal, origin, max_attempts,
            CASE WHEN status = 'LEASED' THEN max(attempts - 1, 0) ELSE attempts END, reserved_entity_id, status,
            lease_owner, NULL, lease_expires_at, applied_tick, last_error, created_at, updated_at
        FROM commands_v1""",
    "DROP TABLE commands_v1",
    "CREATE UNIQUE INDEX commands_by_id ON commands (world_id, scope, command_id)",
    """CREATE INDEX commands_due ON commands (world_id, scheduled_tick, priority, sequence)
        WHERE status IN ('PENDING', 'LEASED', 'RETRYABLE')""",
    # what a runner session holds, found without scanning the world's settled commands
    """CREATE INDEX commands_leased ON commands (world_id, lease_owner, lease_session)
        WHERE status = 'LEASED'""",
    "CREATE TABLE spawn_reservations_v1 AS SELECT * FROM spawn_reservations",
    "DROP TABLE spawn_reservations",
    """CREATE TABLE spawn_reservations (
        world_id TEXT NOT NULL,
        scope TEXT NOT NULL,
        command_id TEXT NOT NULL,
        entity_id INTEGER NOT NULL,
        request_digest TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (world_id, scope, command_id))""",
    # v1 kept no principal on a reservation; an admitted spawn's command row has it.
    """INSERT INTO spawn_reservations (world_id, scope, command_id, entity_id, request_digest, created_at)
        SELECT r.world_id, coalesce((SELECT c.scope FROM commands AS c
                WHERE c.world_id = r.world_id AND c.command_id = r.command_id), ''),
            r.command_id, r.entity_id, r.request_digest, r.created_at
        FROM spawn_reservations_v1 AS r""",
    "DROP TABLE spawn_reservations_v1",
    "ALTER TABLE worlds ADD COLUMN guard_sequence INTEGER",
    "ALTER TABLE worlds ADD COLUMN guard_session TEXT",
    """UPDATE ticks SET manifest = json_object(
            'world_id', json_extract(manifest, '$.world_id'),
            'tick', json_extract(manifest, '$.tick'),
            'writer_epoch', json_extract(manifest, '$.writer_epoch'),
            'settlements', (SELECT json_group_array(json_object(
                    'sequence', c.sequence, 'command_id', c.command_id, 'outcome', 'applied', 'error', NULL))
                FROM json_each(json_extract(ticks.manifest, '$.applied_command_ids')) AS j
                CROSS JOIN commands AS c ON c.world_id = ticks.world_id AND c.command_id = j.value),
            'written_entity_ids', json_extract(manifest, '$.written_entity_ids'),
            'commit_token', json_extract(manifest, '$.commit_token'))""",
))  # fmt: skip

# Version 3: world state in chunks (docs/storage.md). A tick writes O(chunks) rows, not a row per
# entity: `state_chunks` is the last snapshot a runner published (disjoint, ordered entity ranges,
# keyed by each chunk's first entity id), `state_deltas` the delta chunks published since, which
# overlay it. Each v2 entity row becomes a one-entity snapshot chunk; the runner's first snapshot
# repacks them.
V3_STATE_CHUNKS = Migration(3, "world state as snapshot and delta chunks", (
    """CREATE TABLE state_chunks (
        world_id TEXT NOT NULL,
        first_entity_id INTEGER NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (world_id, first_entity_id))""",
    """CREATE TABLE state_deltas (
        world_id TEXT NOT NULL,
        tick INTEGER NOT NULL,
        part INTEGER NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (world_id, tick, part))""",
    """INSERT INTO state_chunks (world_id, first_entity_id, body)
        SELECT world_id, entity_id, '[[' || entity_id || ',' || components || ']]' FROM entities""",
    "DROP TABLE entities",
))  # fmt: skip


# Version 4: failures you can see and steer (docs/ledger.md, "World health" and "Redrive").
# - A world row carries its health: ACTIVE, or STALLED since a tick failed before it was prepared,
#   with the failed attempts and the last error, so every authority reports it identically.
# - A command may be the redrive of a dead-lettered one (`redriven_from`: that command's
#   sequence); at most one command redrives a given dead letter.
V4_HEALTH_AND_REDRIVE = Migration(4, "world health, dead-letter redrive", (
    "ALTER TABLE worlds ADD COLUMN health TEXT NOT NULL DEFAULT 'ACTIVE'",  # ACTIVE | STALLED, written only by the ledger
    "ALTER TABLE worlds ADD COLUMN failed_attempts INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE worlds ADD COLUMN health_error TEXT",
    "ALTER TABLE worlds ADD COLUMN stalled_since INTEGER",
    "ALTER TABLE commands ADD COLUMN redriven_from INTEGER",
    "CREATE UNIQUE INDEX commands_redrives ON commands (world_id, redriven_from) WHERE redriven_from IS NOT NULL",
))  # fmt: skip


# Version 5: retention (docs/ledger.md, "Retention"). `prune` finds the settled commands past the
# idempotency window, the quota counters of old ticks and the lapsed reservations through these
# indexes, without reading a busy world's retained rows. DEAD_LETTER is left out of the first:
# dead letters wait for an operator and are never pruned.
V5_RETENTION = Migration(5, "indexes of what retention prunes: settled commands, quota counters, reservations", (
    """CREATE INDEX commands_settled ON commands (world_id, updated_at, sequence)
        WHERE status IN ('APPLIED', 'REJECTED', 'CANCELLED')""",
    "CREATE INDEX quota_usage_by_tick ON quota_usage (world_id, scheduled_tick, principal)",
    "CREATE INDEX spawn_reservations_by_time ON spawn_reservations (world_id, created_at, scope, command_id)",
))  # fmt: skip


# Version 6: component schemas recorded per world (docs/components.md, "Component schemas") and the
# declared component migrations applied (docs/guide/schema-evolution.md).
V6_COMPONENT_SCHEMAS = Migration(6, "component schemas recorded per world, declared component migrations", (
    # content-addressed: a fingerprint is the digest of its schema, so a row never changes
    """CREATE TABLE world_components (
        world_id TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        name TEXT NOT NULL,
        schema TEXT NOT NULL,
        recorded_at INTEGER NOT NULL,
        PRIMARY KEY (world_id, fingerprint)) WITHOUT ROWID""",
    """CREATE TABLE component_migrations (
        world_id TEXT NOT NULL,
        from_fingerprint TEXT NOT NULL,
        name TEXT NOT NULL,
        to_fingerprint TEXT NOT NULL,
        tick INTEGER NOT NULL,
        entities INTEGER NOT NULL,
        commands INTEGER NOT NULL,
        migrated_at INTEGER NOT NULL,
        PRIMARY KEY (world_id, from_fingerprint)) WITHOUT ROWID""",
))  # fmt: skip


# Version 7: the world's tick clock, anchored in its row (docs/ledger.md, "Idle worlds"): the clock
# read `clock_tick` at `clock_ms`, and every host of the world (serve's runner, the Durable Object's
# alarm), restarted or evicted meanwhile, reads the same clock from it (archetype.commands.clock).
# A new world's clock starts at its creation; an existing one's at its tick head, when it last changed.
V7_TICK_CLOCK = Migration(7, "the world's tick clock anchor", (
    "ALTER TABLE worlds ADD COLUMN clock_tick INTEGER NOT NULL DEFAULT -1",
    "ALTER TABLE worlds ADD COLUMN clock_ms INTEGER NOT NULL DEFAULT 0",
    "UPDATE worlds SET clock_tick = tick_head, clock_ms = updated_at",
))  # fmt: skip

# Version 8: world leases (docs/ledger.md, "World leases"): the world's host and until when it holds
# the world. A released lease keeps its owner with an expiry of the release time, so that owner
# claims it back without moving the writer epoch; NULL owner: never claimed, or forced by
# acquire_writer.
V8_WORLD_LEASES = Migration(8, "world leases: the host of each world and its expiry", (
    "ALTER TABLE worlds ADD COLUMN host_owner TEXT",
    "ALTER TABLE worlds ADD COLUMN host_expires_at INTEGER",
))  # fmt: skip

# Version 9: sequence numbers read off the keys they number (docs/ledger.md, "Sequence numbers"), so
# an admission commit writes no world row. The schema is unchanged and every existing counter is
# already a valid floor; the version moves so that an older archetype, which would take its
# numbers from those floors and collide with the rows admitted since, refuses the catalog.
V9_DERIVED_SEQUENCES = Migration(9, "a world's next sequence numbers derived from its commands and outbox", ())

# Version 10: the runner registry (docs/ledger.md, "The runner registry"): the runners that split the
# worlds, local and remote alike, each under its id until its registration expires. A row outlives
# its runner's death (expired), so a restart of the same instance finds it and resumes at once.
V10_RUNNER_REGISTRY = Migration(10, "the runner registry: live runners, each under its id until it expires", (
    """CREATE TABLE runners (
        runner_id TEXT PRIMARY KEY,
        instance TEXT NOT NULL,
        registered_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL) WITHOUT ROWID""",
    # the worlds a runner hosts (`hosted_worlds`): what the survivors move when it dies, without a walk over every world
    "CREATE INDEX worlds_by_host ON worlds (host_owner) WHERE host_owner IS NOT NULL",
))  # fmt: skip

# Version 11: facts that must outlive the rows retention prunes, and identities a migration must not
# rewrite (docs/ledger.md, "Redrive" and "Component schemas and migrations").
# - A dead letter records its redrive (`redriven_by`: that command's sequence) on its own row, which
#   is never pruned: the redrive's row goes with retention, the "redriven once" stays. Each dead
#   letter whose redrive is still retained gets it here; one whose redrive was pruned already is
#   past recovering (a known gap of catalogs before this version).
# - A command whose payload a component migration rewrites keeps the digest it was admitted with
#   (`digest`, which replays compare against) and gets the rewritten row's in `migrated_digest`, which
#   materialization verifies. Commands migrated before this version kept only the rewritten digest.
V11_DURABLE_FACTS = Migration(11, "a dead letter records its redrive; a migrated command keeps its admitted digest", (
    "ALTER TABLE commands ADD COLUMN redriven_by INTEGER",
    "ALTER TABLE commands ADD COLUMN migrated_digest TEXT",
    """UPDATE commands SET redriven_by = r.sequence
        FROM (SELECT world_id, sequence, redriven_from FROM commands WHERE redriven_from IS NOT NULL) AS r
        WHERE commands.world_id = r.world_id AND commands.sequence = r.redriven_from""",
))  # fmt: skip

# Version 12: tick modes (docs/ledger.md, "Tick modes"): how each world's ticks follow time, recorded at
# its creation. A world created before keeps exactly what it did: realtime (the wall clock, empty
# ticks coalesced), at its host's interval (NULL: `serve --tick-rate`, the Worker's TICK_INTERVAL_MS),
# its clock anchor as version 7 set it. `tick_lag_ms`: how late a lockstep world's head tick published
# after it was due (its clock anchor's third part; 0 for a realtime world).
V12_TICK_MODES = Migration(12, "tick modes: lockstep or realtime, and the interval, per world", (
    # no CHECK: adding a column with one makes SQLite verify the rows with a query whose columns the
    # stand-in's engine reports and the real one does not; create_world checks the mode (and nothing
    # else writes it)
    "ALTER TABLE worlds ADD COLUMN tick_mode TEXT NOT NULL DEFAULT 'realtime'",
    "ALTER TABLE worlds ADD COLUMN tick_interval_ms INTEGER",
    "ALTER TABLE worlds ADD COLUMN tick_lag_ms INTEGER NOT NULL DEFAULT 0",
))  # fmt: skip

_V12_COMMAND_COLUMNS = (
    "world_id, sequence, scope, command_id, schema_version, scheduled_tick, priority, operation, payload, digest, "
    "principal, origin, max_attempts, attempts, reserved_entity_id, status, lease_owner, lease_session, "
    "lease_expires_at, applied_tick, last_error, created_at, updated_at, redriven_from, redriven_by, migrated_digest"
)
# Version 13: fewer rows written per command (docs/storage.md, "Rows per command"; on the Durable
# Object each row written, index entries included, is billed).
# - The outbox holds a row per statement that appended events, not a row per event: a tick settling
#   100 commands writes one outbox row for their events, and the acknowledgement that delivers them
#   deletes one. Events, their numbers, ids and order are unchanged: each existing event becomes a
#   row of its own.
# - `commands` and `ticks` are clustered on their keys (WITHOUT ROWID): a row is its key's entry, one
#   b-tree fewer to write per admission and per published tick. The tables are rebuilt (copied aside
#   and back), their indexes as they were, but for one:
# - the index of open commands (commands_due) is partial on a new column, `is_open` (1 while the
#   status is open, NULL once terminal), not on the status: a lease (PENDING -> LEASED) changed the
#   status and so rewrote the command's entry there; now only a settlement touches it.
V13_FEWER_ROWS = Migration(13, "the outbox as a row per append of events; commands and ticks clustered on their "
                           "keys; the index of open commands on `is_open`", (
    "CREATE TABLE outbox_v12 AS SELECT * FROM outbox",
    "DROP TABLE outbox",
    # events: [[command_id, event_type, status, operation, tick, principal, origin, payload text], ...]
    # numbered first_seq, first_seq + 1, ..., last_seq; an event's id is `<world id>/<its number>`
    """CREATE TABLE outbox (
        world_id TEXT NOT NULL,
        last_seq INTEGER NOT NULL,
        first_seq INTEGER NOT NULL,
        occurred_at INTEGER NOT NULL,
        events TEXT NOT NULL,
        PRIMARY KEY (world_id, last_seq)) WITHOUT ROWID""",
    """INSERT INTO outbox (world_id, last_seq, first_seq, occurred_at, events)
        SELECT world_id, event_seq, event_seq, occurred_at,
            json_array(json_array(command_id, event_type, status, operation, tick, principal, origin, payload))
        FROM outbox_v12""",
    "DROP TABLE outbox_v12",
    "CREATE TABLE commands_v12 AS SELECT * FROM commands",
    "DROP TABLE commands",
    """CREATE TABLE commands (
        world_id TEXT NOT NULL,
        sequence INTEGER NOT NULL,
        scope TEXT NOT NULL,
        command_id TEXT NOT NULL,
        schema_version INTEGER NOT NULL,
        scheduled_tick INTEGER NOT NULL,
        priority INTEGER NOT NULL,
        operation TEXT NOT NULL,
        payload TEXT NOT NULL,
        digest TEXT NOT NULL,
        principal TEXT,
        origin TEXT NOT NULL,
        max_attempts INTEGER NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        reserved_entity_id INTEGER,
        status TEXT NOT NULL,
        lease_owner TEXT,
        lease_session TEXT,
        lease_expires_at INTEGER,
        applied_tick INTEGER,
        last_error TEXT,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        redriven_from INTEGER,
        redriven_by INTEGER,
        migrated_digest TEXT,
        is_open INTEGER,
        PRIMARY KEY (world_id, sequence)) WITHOUT ROWID""",
    f"""INSERT INTO commands ({_V12_COMMAND_COLUMNS}, is_open)
        SELECT {_V12_COMMAND_COLUMNS}, CASE WHEN status IN ('PENDING', 'LEASED', 'RETRYABLE') THEN 1 END FROM commands_v12""",
    "DROP TABLE commands_v12",
    "CREATE UNIQUE INDEX commands_by_id ON commands (world_id, scope, command_id)",
    "CREATE INDEX commands_due ON commands (world_id, scheduled_tick, priority, sequence) WHERE is_open = 1",
    """CREATE INDEX commands_leased ON commands (world_id, lease_owner, lease_session)
        WHERE status = 'LEASED'""",
    "CREATE UNIQUE INDEX commands_redrives ON commands (world_id, redriven_from) WHERE redriven_from IS NOT NULL",
    """CREATE INDEX commands_settled ON commands (world_id, updated_at, sequence)
        WHERE status IN ('APPLIED', 'REJECTED', 'CANCELLED')""",
    "CREATE TABLE ticks_v12 AS SELECT * FROM ticks",
    "DROP TABLE ticks",
    """CREATE TABLE ticks (
        world_id TEXT NOT NULL,
        tick INTEGER NOT NULL,
        commit_token TEXT NOT NULL,
        manifest TEXT NOT NULL,
        published_at INTEGER NOT NULL,
        PRIMARY KEY (world_id, tick)) WITHOUT ROWID""",
    """INSERT INTO ticks (world_id, tick, commit_token, manifest, published_at)
        SELECT world_id, tick, commit_token, manifest, published_at FROM ticks_v12""",
    "DROP TABLE ticks_v12",
    "CREATE UNIQUE INDEX ticks_by_token ON ticks (world_id, commit_token)",
))  # fmt: skip

# Version 14: state history (docs/storage.md, "State at a tick"): a world's published state at any tick
# of its retention window, read from the snapshots and deltas published up to it, which publication
# no longer deletes (retention does). `state_snapshots` keys each snapshot's chunks by the tick that
# published it; a delta that replaced the deltas since its snapshot says so (`replaces`), so a read
# at a later tick skips the deltas it replaced and one at an earlier tick still reads them.
# `state_from_tick` is the oldest tick whose state is retained: a world upgraded to this version has
# only its state at its tick head (its existing snapshot is given tick -1, under its deltas).
# A world forked from another (`fork_world`, docs/ledger.md "Forks") names its source and the tick
# it was forked at; a command the fork copied names the source command's sequence.
V14_STATE_HISTORY = Migration(14, "state history: snapshots by tick, replacing deltas marked, the oldest retained tick; forks", (
    """CREATE TABLE state_snapshots (
        world_id TEXT NOT NULL,
        tick INTEGER NOT NULL,
        first_entity_id INTEGER NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (world_id, tick, first_entity_id))""",
    """INSERT INTO state_snapshots (world_id, tick, first_entity_id, body)
        SELECT world_id, -1, first_entity_id, body FROM state_chunks""",
    "DROP TABLE state_chunks",
    "ALTER TABLE state_deltas ADD COLUMN replaces INTEGER NOT NULL DEFAULT 0",
    "CREATE INDEX state_deltas_replacing ON state_deltas (world_id, tick) WHERE replaces = 1",
    "ALTER TABLE worlds ADD COLUMN state_from_tick INTEGER NOT NULL DEFAULT -1",
    "UPDATE worlds SET state_from_tick = tick_head",
    "ALTER TABLE worlds ADD COLUMN forked_from TEXT",
    "ALTER TABLE worlds ADD COLUMN forked_at_tick INTEGER",
    "ALTER TABLE commands ADD COLUMN forked_from INTEGER",
))  # fmt: skip

# Version 15: a command id looked up in every scope (docs/ledger.md, "Isolation": an analyst or an
# administrator reading a command without naming its principal). The unique index of command ids
# puts the id before the scope: lookups naming a scope use all three columns as before, and one
# naming none reads the id's few entries, with no extra index for admission to write.
V15_COMMAND_ID_FIRST = Migration(15, "command ids indexed before their scope, for a lookup in every scope", (
    "DROP INDEX commands_by_id",
    "CREATE UNIQUE INDEX commands_by_id ON commands (world_id, command_id, scope)",
))  # fmt: skip

# Version 16: forks on the Durable Object (docs/ledger.md, "Forks on the Durable Object"), a copy
# between two objects. On the source: each fork's plan, fixed with its `world_forked` event (a
# source world's state rows at ticks up to a plan's tick are kept until its fork releases it), and
# what later activity could change, frozen then (schemas, migrations, the open commands' copies). On
# the fork: the copy in progress, its plan and the page to ask for next, until it activates.
V16_FORK_COPIES = Migration(16, "forks copied between Durable Objects: the source's plans and frozen rows, the fork's progress", (
    """CREATE TABLE fork_plans (
        world_id TEXT NOT NULL,
        fork_world_id TEXT NOT NULL,
        at_tick INTEGER NOT NULL,
        plan TEXT NOT NULL,
        released INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (world_id, fork_world_id)) WITHOUT ROWID""",
    """CREATE TABLE fork_rows (
        world_id TEXT NOT NULL,
        fork_world_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        n INTEGER NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (world_id, fork_world_id, kind, n))""",
    """CREATE TABLE fork_copies (
        world_id TEXT PRIMARY KEY,
        plan TEXT NOT NULL,
        cursor TEXT)""",
))  # fmt: skip

# Version 17: fewer rows written per tick and per command (docs/storage.md, "Rows per command").
# - Command leases move to the world row: `leases`, a JSON object of each leased command's sequence to
#   [owner, session, expires_at, leased_at]. A lease writes that one row instead of every leased
#   command's row and its `commands_leased` entry (which goes), and the publication that settles them
#   writes the world row anyway. Each LEASED row becomes an entry, its row the open status a release
#   would give it back (readers derive LEASED from the entry).
# - `ticks_by_token` goes: a republished tick is recognised by its own tick's manifest (the commit
#   token digests the tick, so a token names one tick), read through the key; an index entry fewer
#   per published tick.
V17_LEASE_MAP = Migration(17, "command leases as a map on the world row; no index of commit tokens", (
    "ALTER TABLE worlds ADD COLUMN leases TEXT",
    """UPDATE worlds SET leases = (SELECT json_group_object(CAST(c.sequence AS TEXT),
            json_array(c.lease_owner, c.lease_session, c.lease_expires_at, c.updated_at))
        FROM commands AS c WHERE c.world_id = worlds.world_id AND c.status = 'LEASED')
    WHERE world_id IN (SELECT world_id FROM commands WHERE status = 'LEASED')""",
    """UPDATE commands SET status = CASE WHEN attempts > 0 THEN 'RETRYABLE' ELSE 'PENDING' END,
        lease_owner = NULL, lease_session = NULL, lease_expires_at = NULL
    WHERE status = 'LEASED'""",
    "DROP INDEX commands_leased",
    "DROP INDEX ticks_by_token",
))  # fmt: skip

# Version 18: a settlement enters no index (docs/storage.md, "Rows per command"). `commands_settled` goes:
# prune finds the prunable commands by walking the commands' key up to the first command admitted
# after its horizon (sequences follow admission time), so a settled command is its row alone: one row
# fewer per command on the Durable Object.
V18_NO_SETTLED_INDEX = Migration(18, "no index of settled commands: prune walks the key up to its horizon", (
    "DROP INDEX commands_settled",
))  # fmt: skip

# Version 19: fewer rows written per tick (docs/storage.md, "Schema version 19").
# - An outbox row takes more events after it was written: an append goes into the world's last row
#   when that row's every event is acknowledged (taken over) or when it follows the row's events and
#   the row is small, and an acknowledgement leaves the world's last row for that. An event carries
#   its own time (a row's events may be appended at different times); an event written before has
#   none, and its row's time is its own, as before (so no statement for this: the version moving is
#   what makes an older archetype, which would read every event at its row's time, refuse the catalog).
# - The state tables are clustered on their keys (WITHOUT ROWID), as `commands` and `ticks` are since
#   version 13: a state chunk written is one row, not a row and its key's entry. They are rebuilt
#   (copied aside and back), the index of replacing deltas as it was.
V19_OUTBOX_TAIL = Migration(19, "outbox rows that take appends, each event's own time; state tables clustered on their keys", (
    "CREATE TABLE state_snapshots_v18 AS SELECT * FROM state_snapshots",
    "DROP TABLE state_snapshots",
    """CREATE TABLE state_snapshots (
        world_id TEXT NOT NULL,
        tick INTEGER NOT NULL,
        first_entity_id INTEGER NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (world_id, tick, first_entity_id)) WITHOUT ROWID""",
    """INSERT INTO state_snapshots (world_id, tick, first_entity_id, body)
        SELECT world_id, tick, first_entity_id, body FROM state_snapshots_v18""",
    "DROP TABLE state_snapshots_v18",
    "CREATE TABLE state_deltas_v18 AS SELECT * FROM state_deltas",
    "DROP TABLE state_deltas",
    """CREATE TABLE state_deltas (
        world_id TEXT NOT NULL,
        tick INTEGER NOT NULL,
        part INTEGER NOT NULL,
        body TEXT NOT NULL,
        replaces INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (world_id, tick, part)) WITHOUT ROWID""",
    """INSERT INTO state_deltas (world_id, tick, part, body, replaces)
        SELECT world_id, tick, part, body, replaces FROM state_deltas_v18""",
    "DROP TABLE state_deltas_v18",
    "CREATE INDEX state_deltas_replacing ON state_deltas (world_id, tick) WHERE replaces = 1",
))  # fmt: skip

# Version 20: a command due at once enters no index (docs/storage.md, "Schema version 20"). A command
# scheduled at or before the tick after the head when it is inserted is found by walking the commands'
# key from the world's `due_floor` (the lowest sequence that may still be such an open command; the
# publication moves it up); only a command due later (`due_later` = 1) enters `commands_due`, now
# partial on it too: one index entry fewer per command admitted at once. The upgrade marks the open
# commands due after the tick after their world's head as due later and sets each world's floor to
# its lowest open command due at once (past its last command when there is none), which is what the
# code of this version would have written.
V20_DUE_FLOOR = Migration(20, "commands due at once found from a floor on the world row; the due index holds those due later", (
    "ALTER TABLE commands ADD COLUMN due_later INTEGER",
    "ALTER TABLE worlds ADD COLUMN due_floor INTEGER NOT NULL DEFAULT 0",
    """UPDATE commands SET due_later = 1
    WHERE is_open = 1 AND scheduled_tick > (SELECT w.tick_head + 1 FROM worlds AS w WHERE w.world_id = commands.world_id)""",
    """UPDATE worlds SET due_floor = coalesce(
        (SELECT min(c.sequence) FROM commands AS c WHERE c.world_id = worlds.world_id AND c.is_open = 1 AND c.due_later IS NULL),
        (SELECT max(c.sequence) + 1 FROM commands AS c WHERE c.world_id = worlds.world_id), 0)""",
    "DROP INDEX commands_due",
    "CREATE INDEX commands_due ON commands (world_id, scheduled_tick, priority, sequence) WHERE is_open = 1 AND due_later = 1",
))  # fmt: skip

# Version 21: an admission writes no outbox row (docs/storage.md, "Schema version 21"). Its `admitted`
# event is read off the command row it inserts: `admitted_event_seq` is that event's number (its time
# is the row's `created_at`, its fields what the row held when admitted, none of which changes after).
# NULL for every row written before (its events are outbox rows) and for the rows whose first event
# is still written (a redrive's `redriven`, a fork's copies). `projected_through_sequence` on the
# world row: every command up to it has its `admitted` event acknowledged, so the readers of pending
# events start after it (an acknowledgement moves it, in the world-row write it makes anyway); an
# upgraded world starts it at its last command.
V21_ADMITTED_EVENTS = Migration(21, "admitted events read off the command rows, not written to the outbox", (
    "ALTER TABLE commands ADD COLUMN admitted_event_seq INTEGER",
    "ALTER TABLE worlds ADD COLUMN projected_through_sequence INTEGER NOT NULL DEFAULT 0",
    """UPDATE worlds SET projected_through_sequence = coalesce(
        (SELECT max(c.sequence) FROM commands AS c WHERE c.world_id = worlds.world_id), 0)""",
))  # fmt: skip

# Version 22: the outbox's tail on the world row (docs/storage.md, "Schema version 22"). A publication
# whose settlements' events fit in a small tail (`tail_events`, numbered from `tail_first_seq`, as an
# outbox row's) writes them in the world-row write it makes anyway, and the acknowledgement that
# covers them clears them in its own: at one command per tick no outbox row is written. No row moves:
# the outbox's rows stay where they are, and a world starts without a tail.
V22_WORLD_ROW_TAIL = Migration(22, "the publication's events kept on the world row while they are few", (
    "ALTER TABLE worlds ADD COLUMN tail_first_seq INTEGER",
    "ALTER TABLE worlds ADD COLUMN tail_events TEXT",
))  # fmt: skip

MIGRATIONS = (V1_SCHEMA, V2_EXACTLY_ONCE, V3_STATE_CHUNKS, V4_HEALTH_AND_REDRIVE, V5_RETENTION, V6_COMPONENT_SCHEMAS,
              V7_TICK_CLOCK, V8_WORLD_LEASES, V9_DERIVED_SEQUENCES, V10_RUNNER_REGISTRY, V11_DURABLE_FACTS,
              V12_TICK_MODES, V13_FEWER_ROWS, V14_STATE_HISTORY, V15_COMMAND_ID_FIRST, V16_FORK_COPIES,
              V17_LEASE_MAP, V18_NO_SETTLED_INDEX, V19_OUTBOX_TAIL, V20_DUE_FLOOR, V21_ADMITTED_EVENTS,
              V22_WORLD_ROW_TAIL)  # fmt: skip
SCHEMA_VERSION = MIGRATIONS[-1].version

HAS_META = "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
GET_SCHEMA_VERSION = "SELECT value FROM meta WHERE key = 'schema_version'"
SET_SCHEMA_VERSION = """INSERT INTO meta (key, value) VALUES ('schema_version', ?)
    ON CONFLICT (key) DO UPDATE SET value = excluded.value"""
