"""Every SQL statement of the command ledger, in one readable place.

Written for the stricter of our two SQLite hosts (the Durable Object): no transaction control,
no ATTACH, no TEMP objects, no PRAGMA user_version (the schema version is a row in `meta`),
bulk work through `json_each(?)` so no statement binds more than a handful of parameters.
"""

SCHEMA_VERSION = 1


SCHEMA = (
    """CREATE TABLE IF NOT EXISTS meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS worlds (
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
    """CREATE TABLE IF NOT EXISTS commands (
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
    "CREATE UNIQUE INDEX IF NOT EXISTS commands_by_sequence ON commands (world_id, sequence)",
    """CREATE INDEX IF NOT EXISTS commands_due ON commands (world_id, scheduled_tick, priority, sequence)
        WHERE status IN ('PENDING', 'LEASED', 'RETRYABLE')""",
    """CREATE TABLE IF NOT EXISTS spawn_reservations (
        world_id TEXT NOT NULL,
        command_id TEXT NOT NULL,
        entity_id INTEGER NOT NULL,
        request_digest TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (world_id, command_id))""",
    """CREATE TABLE IF NOT EXISTS ticks (
        world_id TEXT NOT NULL,
        tick INTEGER NOT NULL,
        commit_token TEXT NOT NULL,
        manifest TEXT NOT NULL,
        published_at INTEGER NOT NULL,
        PRIMARY KEY (world_id, tick))""",
    "CREATE UNIQUE INDEX IF NOT EXISTS ticks_by_token ON ticks (world_id, commit_token)",
    """CREATE TABLE IF NOT EXISTS entities (
        world_id TEXT NOT NULL,
        entity_id INTEGER NOT NULL,
        components TEXT NOT NULL,
        updated_tick INTEGER NOT NULL,
        PRIMARY KEY (world_id, entity_id))""",
    """CREATE TABLE IF NOT EXISTS outbox (
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
    """CREATE TABLE IF NOT EXISTS quota_usage (
        world_id TEXT NOT NULL,
        principal TEXT NOT NULL,
        scheduled_tick INTEGER NOT NULL,
        used INTEGER NOT NULL,
        PRIMARY KEY (world_id, principal, scheduled_tick))""",
)

GET_SCHEMA_VERSION = "SELECT value FROM meta WHERE key = 'schema_version'"
SET_SCHEMA_VERSION = "INSERT INTO meta (key, value) VALUES ('schema_version', ?)"

# -- worlds --
WORLD_COLUMNS = (
    "world_id, name, status, tick_head, next_entity_id, writer_epoch, next_sequence, "
    "next_event_seq, projected_seq, created_at, updated_at"
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

# -- commands --
COMMAND_COLUMNS = (
    "command_id, sequence, schema_version, world_id, scheduled_tick, priority, operation, payload, digest, "
    "principal, origin, max_attempts, attempts, reserved_entity_id, status, lease_owner, lease_expires_at, "
    "applied_tick, last_error, created_at, updated_at"
)
GET_COMMAND = f"SELECT {COMMAND_COLUMNS} FROM commands WHERE world_id = ? AND command_id = ?"
FIND_COMMANDS = """SELECT c.command_id, c.digest, c.sequence FROM json_each(?) AS j
    CROSS JOIN commands AS c ON c.world_id = ? AND c.command_id = j.value"""
# Each inserted command is a JSON array of these fields, in this order: reading an array element
# by position is markedly cheaper for SQLite than looking a key up in an object.
INSERTED_COMMAND_FIELDS = (
    "command_id", "sequence", "schema_version", "scheduled_tick", "priority", "operation", "payload", "digest",
    "principal", "origin", "max_attempts", "reserved_entity_id",
)  # fmt: skip
INSERT_COMMANDS = f"""INSERT INTO commands (world_id, {", ".join(INSERTED_COMMAND_FIELDS)}, status, created_at, updated_at)
    SELECT ?, {", ".join(f"json_extract(j.value, '$[{i}]')" for i in range(len(INSERTED_COMMAND_FIELDS)))},
        'PENDING', ?, ?
    FROM json_each(?) AS j"""
DUE_COMMANDS = f"""SELECT {COMMAND_COLUMNS} FROM commands
    WHERE world_id = ? AND status IN ('PENDING', 'LEASED', 'RETRYABLE') AND scheduled_tick <= ?
    ORDER BY scheduled_tick, priority, sequence LIMIT ?"""
LEASE_COMMANDS = """UPDATE commands SET status = 'LEASED', lease_owner = ?, lease_expires_at = ?,
        attempts = attempts + ?, updated_at = ?
    WHERE world_id = ? AND command_id IN (SELECT value FROM json_each(?))"""
RELEASE_COMMANDS = """UPDATE commands SET status = CASE WHEN attempts - 1 > 0 THEN 'RETRYABLE' ELSE 'PENDING' END,
        attempts = attempts - 1, lease_owner = NULL, lease_expires_at = NULL, updated_at = ?
    WHERE world_id = ? AND status = 'LEASED' AND lease_owner = ? AND command_id IN (SELECT value FROM json_each(?))"""
SETTLE_COMMANDS = """UPDATE commands SET status = ?, applied_tick = ?, last_error = ?, lease_owner = NULL,
        lease_expires_at = NULL, updated_at = ?
    WHERE world_id = ? AND command_id IN (SELECT value FROM json_each(?))"""
COUNT_LEASED_BY = """SELECT count(*) FROM commands WHERE world_id = ? AND status = 'LEASED' AND lease_owner = ?
    AND command_id IN (SELECT value FROM json_each(?))"""
OPEN_COMMAND_IDS = """SELECT command_id FROM commands WHERE world_id = ? AND status IN ('PENDING', 'LEASED', 'RETRYABLE')
    ORDER BY sequence"""
HISTORY = f"""SELECT {COMMAND_COLUMNS} FROM commands
    WHERE world_id = ? AND sequence > ? AND (? IS NULL OR status = ?)
    ORDER BY sequence LIMIT ?"""

# -- spawn reservations --
GET_RESERVATION = "SELECT entity_id, request_digest FROM spawn_reservations WHERE world_id = ? AND command_id = ?"
INSERT_RESERVATION = """INSERT INTO spawn_reservations (world_id, command_id, entity_id, request_digest, created_at)
    VALUES (?, ?, ?, ?, ?)"""
FIND_RESERVATIONS = """SELECT r.command_id, r.entity_id FROM json_each(?) AS j
    CROSS JOIN spawn_reservations AS r ON r.world_id = ? AND r.command_id = j.value"""

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

# -- outbox: one statement appends the event of every command named in a JSON array --
# The Durable Object binds every number as REAL, and `'/' || (1.0 + 0)` is '/1.0': the first
# sequence is cast before it enters the event id (event_seq's INTEGER column converts it anyway).
APPEND_EVENTS = """INSERT INTO outbox (world_id, event_seq, event_id, command_id, event_type, status, operation, tick,
        principal, origin, occurred_at, payload)
    SELECT c.world_id, ? + j.key, c.world_id || '/' || (CAST(? AS INTEGER) + j.key), c.command_id, ?, c.status,
        c.operation,
        coalesce(c.applied_tick, c.scheduled_tick), c.principal, c.origin, ?,
        json_object('attempts', c.attempts, 'max_attempts', c.max_attempts, 'error', c.last_error)
    FROM json_each(?) AS j CROSS JOIN commands AS c ON c.world_id = ? AND c.command_id = j.value"""
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

# -- quotas --
GET_QUOTA_USAGE = "SELECT used FROM quota_usage WHERE world_id = ? AND principal = ? AND scheduled_tick = ?"
ADD_QUOTA_USAGE = """INSERT INTO quota_usage (world_id, principal, scheduled_tick, used) VALUES (?, ?, ?, ?)
    ON CONFLICT (world_id, principal, scheduled_tick) DO UPDATE SET used = used + excluded.used"""
