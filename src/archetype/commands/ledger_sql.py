"""Every SQL statement of the command ledger (the schema itself is in migrations.py).

Written for the stricter of our two SQLite hosts (the Durable Object): no transaction control,
no ATTACH, no TEMP objects, no PRAGMA, bulk work through `json_each(?)` so no statement binds
more than a handful of parameters. The Durable Object's engine binds every number as REAL
(a JS double), so a bound integer that enters an expression is `CAST(? AS INTEGER)`: compared
with a column it needs nothing, but `'w/' || (? + 1)` would read `w/2.0` there.

Inside the ledger a command is addressed by its per-world `sequence`; its command id is unique
only within its `scope` (the admitting principal, or '' for trusted callers).
"""

OPEN_STATUSES = "('PENDING', 'LEASED', 'RETRYABLE')"

# -- worlds --
WORLD_COLUMNS = (
    "world_id, name, status, tick_head, next_entity_id, writer_epoch, next_sequence, "
    "next_event_seq, projected_seq, guard_sequence, guard_session, created_at, updated_at"
)
GET_WORLD = f"SELECT {WORLD_COLUMNS} FROM worlds WHERE world_id = ?"
LIST_WORLDS = f"SELECT {WORLD_COLUMNS} FROM worlds ORDER BY world_id"
INSERT_WORLD = "INSERT INTO worlds (world_id, name, status, created_at, updated_at) VALUES (?, ?, 'ACTIVE', ?, ?)"
SET_WORLD_STATUS = "UPDATE worlds SET status = ?, updated_at = ? WHERE world_id = ?"
BUMP_WRITER_EPOCH = "UPDATE worlds SET writer_epoch = writer_epoch + 1, updated_at = ? WHERE world_id = ?"
TAKE_ENTITY_IDS = "UPDATE worlds SET next_entity_id = next_entity_id + ?, updated_at = ? WHERE world_id = ?"
TAKE_ADMISSION_SEQS = """UPDATE worlds SET next_sequence = next_sequence + ?, next_event_seq = next_event_seq + ?
    WHERE world_id = ?"""
TAKE_EVENT_SEQS = "UPDATE worlds SET next_event_seq = next_event_seq + ? WHERE world_id = ?"
SET_TICK_HEAD = "UPDATE worlds SET tick_head = ?, updated_at = ? WHERE world_id = ?"
SET_PROJECTED_SEQ = "UPDATE worlds SET projected_seq = ? WHERE world_id = ? AND projected_seq < ?"
SET_GUARD = "UPDATE worlds SET guard_sequence = ?, guard_session = ? WHERE world_id = ?"

# -- commands --
COMMAND_COLUMNS = (
    "command_id, sequence, schema_version, world_id, scheduled_tick, priority, operation, payload, digest, "
    "principal, origin, max_attempts, attempts, reserved_entity_id, status, lease_owner, lease_expires_at, "
    "applied_tick, last_error, created_at, updated_at"
)
# Each inserted command is a JSON array of these fields, in this order: reading an array element
# by position is markedly cheaper for SQLite than looking a key up in an object.
INSERTED_COMMAND_FIELDS = (
    "command_id", "sequence", "scope", "schema_version", "scheduled_tick", "priority", "operation", "payload",
    "digest", "principal", "origin", "max_attempts", "reserved_entity_id",
)  # fmt: skip
INSERT_COMMANDS = f"""INSERT INTO commands (world_id, {", ".join(INSERTED_COMMAND_FIELDS)}, status, created_at, updated_at)
    SELECT ?, {", ".join(f"json_extract(j.value, '$[{i}]')" for i in range(len(INSERTED_COMMAND_FIELDS)))},
        'PENDING', ?, ?
    FROM json_each(?) AS j"""
GET_COMMAND = f"SELECT {COMMAND_COLUMNS} FROM commands WHERE world_id = ? AND scope = ? AND command_id = ?"
GET_COMMAND_BY_SEQUENCE = f"SELECT {COMMAND_COLUMNS} FROM commands WHERE world_id = ? AND sequence = ?"
FIND_COMMANDS = """SELECT c.command_id, c.digest, c.sequence FROM json_each(?) AS j
    CROSS JOIN commands AS c ON c.world_id = ? AND c.scope = ? AND c.command_id = j.value"""
DUE_COMMANDS = f"""SELECT {COMMAND_COLUMNS}, lease_session FROM commands
    WHERE world_id = ? AND status IN {OPEN_STATUSES} AND scheduled_tick <= ?
    ORDER BY scheduled_tick, priority, sequence LIMIT ?"""
LEASE_COMMANDS = """UPDATE commands SET status = 'LEASED', lease_owner = ?, lease_session = ?, lease_expires_at = ?,
        updated_at = ?
    WHERE world_id = ? AND sequence IN (SELECT value FROM json_each(?))"""
# The sequences among these that this runner session holds, in ledger order.
HELD_IN_ORDER = """SELECT sequence, command_id FROM commands
    WHERE world_id = ? AND status = 'LEASED' AND lease_owner = ? AND lease_session = ?
        AND sequence IN (SELECT value FROM json_each(?))
    ORDER BY scheduled_tick, priority, sequence"""
IS_HELD = """SELECT count(*) FROM commands
    WHERE world_id = ? AND sequence = ? AND status = 'LEASED' AND lease_owner = ? AND lease_session = ?"""
# A tick's settlements: one JSON array [sequence, outcome, error] per command. Every settlement is
# an attempt; a failure that spends the budget dead-letters. The settlements are MATERIALIZED so
# the join is driven from them into the primary key: left to itself SQLite scans the world's
# commands and the JSON array for each, quadratic (10,000 settlements: 100 s instead of 50 ms).
SETTLE = """WITH s AS MATERIALIZED (SELECT json_extract(value, '$[0]') AS sequence, json_extract(value, '$[1]') AS outcome,
        json_extract(value, '$[2]') AS error FROM json_each(?3))
    UPDATE commands SET
        status = CASE s.outcome WHEN 'applied' THEN 'APPLIED' WHEN 'rejected' THEN 'REJECTED'
            ELSE CASE WHEN commands.attempts + 1 >= commands.max_attempts THEN 'DEAD_LETTER' ELSE 'RETRYABLE' END END,
        attempts = commands.attempts + 1,
        applied_tick = CASE s.outcome WHEN 'applied' THEN CAST(?1 AS INTEGER) END,
        last_error = s.error, lease_owner = NULL, lease_session = NULL, lease_expires_at = NULL, updated_at = ?2
    FROM s WHERE commands.world_id = ?4 AND commands.sequence = s.sequence"""
# What a session still holds after its tick settled: the drain's unprocessed tail, given back free.
RELEASE_SESSION = """UPDATE commands SET status = CASE WHEN attempts > 0 THEN 'RETRYABLE' ELSE 'PENDING' END,
        lease_owner = NULL, lease_session = NULL, lease_expires_at = NULL, updated_at = ?
    WHERE world_id = ? AND status = 'LEASED' AND lease_owner = ? AND lease_session = ?"""
# The crash guard names a command whose runner died while materializing it: one attempt charged.
CHARGE_CRASH = """UPDATE commands SET attempts = attempts + 1,
        status = CASE WHEN attempts + 1 >= max_attempts THEN 'DEAD_LETTER' ELSE 'RETRYABLE' END,
        last_error = ?, lease_owner = NULL, lease_session = NULL, lease_expires_at = NULL, updated_at = ?
    WHERE world_id = ? AND sequence = ? AND status = 'LEASED'"""
CANCEL_COMMANDS = """UPDATE commands SET status = 'CANCELLED', last_error = ?, lease_owner = NULL, lease_session = NULL,
        lease_expires_at = NULL, updated_at = ?
    WHERE world_id = ? AND sequence IN (SELECT value FROM json_each(?))"""
OPEN_SEQUENCES = f"""SELECT sequence FROM commands WHERE world_id = ? AND status IN {OPEN_STATUSES}
    ORDER BY sequence LIMIT ?"""
HISTORY = f"""SELECT {COMMAND_COLUMNS} FROM commands
    WHERE world_id = ? AND sequence > ? AND (? IS NULL OR status = ?) AND (? IS NULL OR scope = ?)
    ORDER BY sequence LIMIT ?"""

# -- spawn reservations --
GET_RESERVATION = """SELECT entity_id, request_digest FROM spawn_reservations
    WHERE world_id = ? AND scope = ? AND command_id = ?"""
INSERT_RESERVATION = """INSERT INTO spawn_reservations (world_id, scope, command_id, entity_id, request_digest, created_at)
    VALUES (?, ?, ?, ?, ?, ?)"""
FIND_RESERVATIONS = """SELECT r.command_id, r.entity_id, r.request_digest FROM json_each(?) AS j
    CROSS JOIN spawn_reservations AS r ON r.world_id = ? AND r.scope = ? AND r.command_id = j.value"""

# -- ticks and entity state --
GET_TICK_BY_TOKEN = "SELECT tick FROM ticks WHERE world_id = ? AND commit_token = ?"
INSERT_TICK = "INSERT INTO ticks (world_id, tick, commit_token, manifest, published_at) VALUES (?, ?, ?, ?, ?)"
LIST_TICKS = "SELECT manifest FROM ticks WHERE world_id = ? AND tick > ? ORDER BY tick LIMIT ?"
UPSERT_ENTITIES = """INSERT INTO entities (world_id, entity_id, components, updated_tick)
    SELECT ?, json_extract(j.value, '$.entity_id'), json_extract(j.value, '$.components'), ?
    FROM json_each(?) AS j WHERE json_extract(j.value, '$.components') IS NOT NULL
    ON CONFLICT (world_id, entity_id) DO UPDATE SET components = excluded.components, updated_tick = excluded.updated_tick"""
DELETE_ENTITIES = """DELETE FROM entities WHERE world_id = ? AND entity_id IN
    (SELECT json_extract(value, '$.entity_id') FROM json_each(?) WHERE json_extract(value, '$.components') IS NULL)"""
LIST_ENTITIES = "SELECT entity_id, components FROM entities WHERE world_id = ? AND entity_id > ? ORDER BY entity_id LIMIT ?"

# -- outbox: one statement appends one event per command sequence in a JSON array, in array
# order; the event type follows from the status the transition left the command in --
APPEND_EVENTS = """INSERT INTO outbox (world_id, event_seq, event_id, command_id, event_type, status, operation, tick,
        principal, origin, occurred_at, payload)
    SELECT c.world_id, CAST(? AS INTEGER) + j.key, c.world_id || '/' || (CAST(? AS INTEGER) + j.key), c.command_id,
        CASE c.status WHEN 'PENDING' THEN 'admitted' WHEN 'APPLIED' THEN 'applied' WHEN 'REJECTED' THEN 'rejected'
            WHEN 'RETRYABLE' THEN 'retry_scheduled' WHEN 'DEAD_LETTER' THEN 'dead_lettered'
            WHEN 'CANCELLED' THEN 'cancelled' END,
        c.status, c.operation, coalesce(c.applied_tick, c.scheduled_tick), c.principal, c.origin, ?,
        json_object('attempts', c.attempts, 'max_attempts', c.max_attempts, 'error', c.last_error)
    FROM json_each(?) AS j CROSS JOIN commands AS c ON c.world_id = ? AND c.sequence = j.value"""
OUTBOX_COLUMNS = (
    "event_id, world_id, event_seq, command_id, event_type, status, operation, tick, principal, origin, "
    "occurred_at, payload"
)
READ_OUTBOX = f"SELECT {OUTBOX_COLUMNS} FROM outbox WHERE world_id = ? AND event_seq > ? ORDER BY event_seq LIMIT ?"
# The same page as one row of JSON arrays, one per column: no Python tuple per event.
READ_OUTBOX_COLUMNS = (
    "SELECT " + ", ".join(f"json_group_array({column.strip()})" for column in OUTBOX_COLUMNS.split(","))
    + f" FROM ({READ_OUTBOX})"
)
DELETE_OUTBOX_UPTO = "DELETE FROM outbox WHERE world_id = ? AND event_seq <= ?"

# -- component schemas and migrations --
COMPONENT_COLUMNS = "c.name, c.fingerprint, c.schema, c.recorded_at, m.to_fingerprint"
_SUPERSEDED_JOIN = "LEFT JOIN component_migrations AS m ON m.world_id = c.world_id AND m.from_fingerprint = c.fingerprint"
# The recorded schemas among these fingerprints, each with what migrated it away (NULL: current).
FIND_COMPONENTS = f"""SELECT {COMPONENT_COLUMNS} FROM json_each(?) AS j
    CROSS JOIN world_components AS c ON c.world_id = ? AND c.fingerprint = j.value {_SUPERSEDED_JOIN}"""
LIST_COMPONENTS = f"""SELECT {COMPONENT_COLUMNS} FROM world_components AS c {_SUPERSEDED_JOIN}
    WHERE c.world_id = ? ORDER BY c.name, c.recorded_at, c.fingerprint"""
# Each record is a JSON array [fingerprint, name, schema text].
INSERT_COMPONENTS = """INSERT INTO world_components (world_id, fingerprint, name, schema, recorded_at)
    SELECT ?, json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]'), json_extract(j.value, '$[2]'), ?
    FROM json_each(?) AS j WHERE true
    ON CONFLICT (world_id, fingerprint) DO NOTHING"""
MIGRATION_COLUMNS = "name, from_fingerprint, to_fingerprint, tick, entities, commands, migrated_at"
GET_MIGRATION = f"SELECT {MIGRATION_COLUMNS} FROM component_migrations WHERE world_id = ? AND from_fingerprint = ?"
LIST_MIGRATIONS = f"SELECT {MIGRATION_COLUMNS} FROM component_migrations WHERE world_id = ? ORDER BY migrated_at, name"
INSERT_MIGRATION = f"""INSERT INTO component_migrations (world_id, {MIGRATION_COLUMNS})
    VALUES (?, ?, ?, ?, ?, ?, ?, ?)"""
# What a migration must rewrite: a fingerprint is 64 hex digits, so its text found in a payload or
# an entity's components is a reference to it (the ledger then checks each one structurally).
# (through the open-commands index: a world's settled commands are never visited)
OPEN_COMMANDS_NAMING = f"""SELECT sequence FROM commands INDEXED BY commands_due
    WHERE world_id = ? AND status IN {OPEN_STATUSES} AND instr(payload, ?) > 0 ORDER BY sequence"""
ENTITIES_NAMING = "SELECT entity_id FROM entities WHERE world_id = ? AND instr(components, ?) > 0 ORDER BY entity_id"
# Each rewrite is a JSON array [sequence, payload, digest].
REWRITE_PAYLOADS = """WITH r AS MATERIALIZED (SELECT json_extract(value, '$[0]') AS sequence,
        json_extract(value, '$[1]') AS payload, json_extract(value, '$[2]') AS digest FROM json_each(?3))
    UPDATE commands SET payload = r.payload, digest = r.digest, updated_at = ?2
    FROM r WHERE commands.world_id = ?1 AND commands.sequence = r.sequence"""
# A world's own event (no command behind it): the command id names what happened.
APPEND_WORLD_EVENT = """INSERT INTO outbox (world_id, event_seq, event_id, command_id, event_type, status, operation, tick,
        principal, origin, occurred_at, payload)
    VALUES (?1, CAST(?2 AS INTEGER), ?1 || '/' || CAST(?2 AS INTEGER), ?3, ?4, 'APPLIED', ?5, ?6, NULL, 'local', ?7, ?8)"""

# -- quotas --
GET_QUOTA_USAGE = "SELECT used FROM quota_usage WHERE world_id = ? AND principal = ? AND scheduled_tick = ?"
ADD_QUOTA_USAGE = """INSERT INTO quota_usage (world_id, principal, scheduled_tick, used) VALUES (?, ?, ?, ?)
    ON CONFLICT (world_id, principal, scheduled_tick) DO UPDATE SET used = used + excluded.used"""
