"""Every SQL statement of the command ledger (the schema itself is in migrations.py).

Written for the stricter of our two SQLite hosts (the Durable Object): no transaction control,
no ATTACH, no TEMP objects, no PRAGMA, bulk work through `json_each(?)` so no statement binds
more than a handful of parameters (but one command's row: INSERT_COMMAND binds its dozen
fields). The Durable Object's engine binds every number as REAL (a JS double), so a bound
integer that enters an expression is `CAST(? AS INTEGER)`: compared with a column it needs
nothing, but `'w/' || (? + 1)` would read `w/2.0` there.

Inside the ledger a command is addressed by its per-world `sequence`; its command id is unique
only within its `scope` (the admitting principal, or '' for trusted callers).
"""

from archetype.canonical import MAX_SAFE_INTEGER

OPEN_STATUSES = "('PENDING', 'LEASED', 'RETRYABLE')"
# A command's `is_open` is 1 while its status is open, NULL once it is terminal; the index of open
# commands (commands_due) is partial on it, not on the status, so a lease or a release (open to
# open) leaves its entry alone instead of rewriting it (docs/storage.md, "Rows per command"). Every
# statement that sets a status sets `is_open` with it; the reads of open commands say both.
# An open command is found in one of two places (docs/storage.md, "Schema version 20"). One due later
# than the tick after the head when it was inserted (`due_later` = 1) is an entry of commands_due, in
# (scheduled_tick, priority, sequence) order. One due at once (`due_later` NULL: most commands) enters
# no index: the commands' key is their admission order, so it is found by walking the key from the
# world's `due_floor`, the lowest sequence that may still be such an open command. Every command due at
# once is inserted above the floor (a sequence is the world's next), closed commands never reopen, and
# the publication moves the floor up to the first one still open (DUE_FLOOR_EXPR), never past it; a
# floor that lags only makes the walk read closed rows, which it leaves out.
DUE_LATER_EXPR = "is_open = 1 AND due_later = 1"
DUE_AT_ONCE_EXPR = "is_open = 1 AND due_later IS NULL"
# Whether a command due at tick {tick} inserted into world {world} now is due later (1) or at once (NULL).
DUE_LATER_VALUE_EXPR = "CASE WHEN {tick} > (SELECT dw.tick_head + 1 FROM worlds AS dw WHERE dw.world_id = {world}) THEN 1 END"


def open_commands(world: str, columns: str, condition: str = "", first_due: str = "") -> str:
    """A compound SELECT of `columns` of world `world`'s open commands (those matching `condition`),
    from both places they are found: the due index's entries (the first `first_due` in due order,
    when given: the rest cannot come first) and the walk of the key from the world's floor."""
    where = f" AND {condition}" if condition else ""
    later = f"""SELECT {columns} FROM commands INDEXED BY commands_due
        WHERE world_id = {world} AND {DUE_LATER_EXPR} AND status IN {OPEN_STATUSES}{where}"""
    if first_due:
        later = f"SELECT * FROM ({later} ORDER BY scheduled_tick, priority, sequence LIMIT {first_due})"
    at_once = f"""SELECT {columns} FROM commands
        WHERE world_id = {world} AND sequence >= (SELECT fw.due_floor FROM worlds AS fw WHERE fw.world_id = {world})
            AND {DUE_AT_ONCE_EXPR} AND status IN {OPEN_STATUSES}{where}"""
    return f"{later}\n    UNION ALL {at_once}"

# The world's lease map (below, "command leases") without one (owner, session)'s entries (NULL once
# empty); {owner} and {session} name its parameters.
LEASES_WITHOUT_SESSION_EXPR = """(SELECT nullif(json_group_object(l.key, json(l.value)), '{{}}') FROM json_each(worlds.leases) AS l
        WHERE json_extract(l.value, '$[0]') != {owner} OR json_extract(l.value, '$[1]') != {session})"""

# -- worlds --
WORLD_COLUMNS = (
    "world_id, name, status, tick_head, next_entity_id, writer_epoch, next_sequence, "
    "next_event_seq, projected_seq, guard_sequence, guard_session, health, failed_attempts, health_error, "
    "stalled_since, host_owner, host_expires_at, created_at, updated_at, clock_tick, clock_ms, tick_mode, "
    "tick_interval_ms, tick_lag_ms"
)
# A world's next command and event sequence numbers are read off the keys they number (docs/ledger.md,
# "Sequence numbers"): the last command's sequence, the last event's in the outbox and the last
# command's `admitted` event (read off its row since version 21: the last command's is the latest of
# them) and the world row's outbox tail (version 22), one index seek each, so an admission writes no
# world row. The row's columns are floors for what the keys no longer show: prune raises
# `next_sequence` before it deletes commands, and an acknowledgement's `projected_seq` covers the
# events it deleted or cleared off the tail (prune deletes no command whose `admitted` event is not
# acknowledged). A command row carrying no number (a redrive) has its first event numbered as read
# before the row went in, and written to the outbox: read after, the last command would show no
# number and hand out an `admitted` event's again.
# The world's last command: `lc` of a statement that reads the world's row joined to its commands in
# reverse key order, LIMIT 1 (the admission read: one seek for both numbers, the key's last entry
# read as the row), or its columns read by subqueries (one seek each).
LAST_SEQUENCE_EXPR = "(SELECT max(l.sequence) FROM commands AS l WHERE l.world_id = w.world_id)"


def next_numbers(last_sequence: str, last_admitted_event: str) -> tuple[str, str]:
    """The world row `w`'s next command and event sequence numbers, given how the statement reads
    its last command's sequence and `admitted_event_seq` (NULL: it has none)."""
    return (f"max(w.next_sequence, coalesce({last_sequence}, 0) + 1)",
            "max(w.next_event_seq, w.projected_seq + 1, "
            "coalesce((SELECT max(o.last_seq) FROM outbox AS o WHERE o.world_id = w.world_id), 0) + 1, "
            "coalesce(w.tail_first_seq + json_array_length(w.tail_events), 0), "
            f"coalesce({last_admitted_event}, 0) + 1)")  # fmt: skip


NEXT_SEQUENCE_EXPR, NEXT_EVENT_SEQ_EXPR = next_numbers(
    LAST_SEQUENCE_EXPR,
    f"(SELECT a.admitted_event_seq FROM commands AS a WHERE a.world_id = w.world_id AND a.sequence = {LAST_SEQUENCE_EXPR})",
)
WORLD_VALUE_COLUMNS = ", ".join(
    {"next_sequence": NEXT_SEQUENCE_EXPR, "next_event_seq": NEXT_EVENT_SEQ_EXPR}.get(name, f"w.{name}")
    for name in (column.strip() for column in WORLD_COLUMNS.split(","))
)
GET_WORLD = f"SELECT {WORLD_VALUE_COLUMNS} FROM worlds AS w WHERE w.world_id = ?"
LIST_WORLDS = f"SELECT {WORLD_VALUE_COLUMNS} FROM worlds AS w ORDER BY w.world_id"
# The catalog's worlds that have an open command (with the earliest scheduled tick among them): a
# runner's due-time index. It reads both places of open commands (above): the due index's entries, and
# each world's walk from its floor, one seek for a world with none open; never a world's history.
PENDING_WORLDS = f"""SELECT c.world_id, w.status, w.tick_head, min(c.scheduled_tick), w.clock_tick, w.clock_ms,
        w.tick_mode, w.tick_interval_ms, w.tick_lag_ms, w.host_owner, w.host_expires_at
    FROM (SELECT d.world_id, d.scheduled_tick FROM commands AS d INDEXED BY commands_due
            WHERE d.is_open = 1 AND d.due_later = 1 AND d.status IN {OPEN_STATUSES}
        UNION ALL
        SELECT a.world_id, a.scheduled_tick FROM worlds AS fw CROSS JOIN commands AS a ON a.world_id = fw.world_id
            AND a.sequence >= fw.due_floor WHERE a.is_open = 1 AND a.due_later IS NULL AND a.status IN {OPEN_STATUSES}) AS c
    JOIN worlds AS w ON w.world_id = c.world_id GROUP BY c.world_id"""
# A world's clock starts when it is created: tick -1 then (the column's default), tick 0 one interval later.
INSERT_WORLD = """INSERT INTO worlds (world_id, name, status, created_at, updated_at, clock_ms, tick_mode, tick_interval_ms)
    VALUES (?, ?, 'ACTIVE', ?, ?, ?, ?, ?)"""
SET_WORLD_STATUS = "UPDATE worlds SET status = ?, updated_at = ? WHERE world_id = ?"
# A forced writer: it holds no world lease, and any runner's claim fences it in turn.
BUMP_WRITER_EPOCH = """UPDATE worlds SET writer_epoch = writer_epoch + 1, host_owner = NULL, host_expires_at = NULL,
        updated_at = ? WHERE world_id = ?"""
# -- world leases --
# A new host: the world lease changes hands and the writer epoch moves, fencing every earlier writer.
TAKE_WORLD_LEASE = """UPDATE worlds SET host_owner = ?, host_expires_at = ?, writer_epoch = writer_epoch + 1,
        updated_at = ? WHERE world_id = ?"""
# The same host: renewed, resumed after a restart, or given back (expiry = now); the epoch stays.
SET_WORLD_LEASE_EXPIRY = "UPDATE worlds SET host_expires_at = ? WHERE world_id = ?"
# At a takeover, the previous hosts' command leases end at once: their epoch is fenced, so they can
# settle nothing, and the new host's lease takes the rows over as suspects instead of waiting.
# (A lease is an entry of the world's lease map, `worlds.leases`: below, "Command leases".)
EXPIRE_OTHER_OWNERS_LEASES = """UPDATE worlds SET leases = (SELECT json_group_object(l.key,
            CASE WHEN json_extract(l.value, '$[0]') != ?3 AND json_extract(l.value, '$[2]') > ?1
                THEN json_set(l.value, '$[2]', CAST(?1 AS INTEGER)) ELSE json(l.value) END)
        FROM json_each(worlds.leases) AS l)
    WHERE world_id = ?2 AND leases IS NOT NULL"""

# -- the runner registry --
RUNNER_COLUMNS = "runner_id, instance, registered_at, expires_at"
GET_RUNNER = f"SELECT {RUNNER_COLUMNS} FROM runners WHERE runner_id = ?"
# A new registration (or another instance taking an expired one over) starts its registered_at anew;
# a heartbeat of the same instance only moves its expiry.
PUT_RUNNER = """INSERT INTO runners (runner_id, instance, registered_at, expires_at) VALUES (?, ?, ?, ?)
    ON CONFLICT (runner_id) DO UPDATE SET expires_at = excluded.expires_at, instance = excluded.instance,
        registered_at = CASE WHEN runners.instance = excluded.instance THEN runners.registered_at
            ELSE excluded.registered_at END"""
EXPIRE_RUNNER = "UPDATE runners SET expires_at = ? WHERE runner_id = ? AND expires_at > ?"
LIVE_RUNNERS = f"SELECT {RUNNER_COLUMNS} FROM runners WHERE expires_at > ? ORDER BY runner_id"
# Through the worlds_by_host index: the worlds of one runner, not a walk over every world.
HOSTED_WORLDS = f"SELECT {WORLD_COLUMNS} FROM worlds WHERE host_owner = ? ORDER BY world_id"

TAKE_ENTITY_IDS = "UPDATE worlds SET next_entity_id = next_entity_id + ?, updated_at = ? WHERE world_id = ?"
# Before commands are deleted: the next sequence stays above every sequence ever handed out.
RAISE_SEQUENCE_FLOOR = "UPDATE worlds SET next_sequence = ?1 WHERE world_id = ?2 AND next_sequence < ?1"
# -- the outbox's tail on the world row (schema version 22: docs/storage.md, "Schema version 22") --
# The events of one transition of commands: one per command sequence in the JSON array {sequences},
# in array order, numbered from {first}, at time {at}, as one row (world_id, first_seq, occurred_at,
# events: a JSON array), none when there is no command; the event type follows from the status the
# transition left the command in. (A payload enters as plain text, `'' || json_object(...)`, so it is
# read back as the very text written.) An operator's call binds {asked_by}, `{{"actor": ...}}`: its
# events' payloads name who asked.
def command_events(*, first: str, at: str, sequences: str, world: str, asked_by: str) -> str:
    return f"""SELECT {world} AS world_id, CAST({first} AS INTEGER) AS first_seq, {at} AS occurred_at,
        json_group_array(json(event)) AS events
    FROM (SELECT json_array(c.command_id,
            CASE c.status WHEN 'PENDING' THEN CASE WHEN c.redriven_from IS NULL THEN 'admitted' ELSE 'redriven' END
                WHEN 'APPLIED' THEN 'applied' WHEN 'REJECTED' THEN 'rejected'
                WHEN 'RETRYABLE' THEN 'retry_scheduled' WHEN 'DEAD_LETTER' THEN 'dead_lettered'
                WHEN 'CANCELLED' THEN 'cancelled' END,
            c.status, c.operation, coalesce(c.applied_tick, c.scheduled_tick), c.principal, c.origin,
            '' || CASE WHEN {asked_by} IS NULL
                THEN json_object('attempts', c.attempts, 'max_attempts', c.max_attempts, 'error', c.last_error)
                ELSE json_object('attempts', c.attempts, 'max_attempts', c.max_attempts, 'error', c.last_error,
                                 'actor', json_extract({asked_by}, '$.actor')) END,
            CAST({at} AS INTEGER)) AS event
        FROM json_each({sequences}) AS j CROSS JOIN commands AS c ON c.world_id = {world} AND c.sequence = j.value ORDER BY j.key)
    HAVING count(*) > 0"""


# The tail (`tail_first_seq`, `tail_events`: events numbered from the first, as an outbox row's) holds
# the events of publications that fit in OUTBOX_APPEND_LIMIT characters, written in the statement
# that writes the world row anyway (on the Durable Object a row written by two statements counts
# twice). {w} qualifies the world row's columns.
TAIL_LAST_EXPR = "{w}tail_first_seq + json_array_length({w}tail_events) - 1"
# The new events fit when the tail's every event is acknowledged (they take it over) or when they
# follow its last and both stay small; NULL (no event) fits nowhere.
OUTBOX_APPEND_LIMIT = 700
# The fewest characters a command's event takes in a JSON array of them (command_events): its payload
# alone, `{"attempts":0,"max_attempts":1,"error":null}` as an escaped string, is 56. So more than
# OUTBOX_APPEND_LIMIT // EVENT_CHARS_MIN events never fit a tail, and the ledger does not offer them to
# PUBLISH_HEAD, which would read their commands to find that out (APPEND_SPILLED_EVENTS reads them again).
EVENT_CHARS_MIN = 56
WORLD_TAIL_LAST_EXPR = TAIL_LAST_EXPR.format(w="worlds.")
TAIL_TAKEN_OVER_EXPR = f"(worlds.tail_events IS NULL OR {WORLD_TAIL_LAST_EXPR} <= worlds.projected_seq)"
TAIL_FITS_EXPR = f"""length(n.events) + CASE WHEN {TAIL_TAKEN_OVER_EXPR} THEN 0
        WHEN {WORLD_TAIL_LAST_EXPR} = n.first_seq - 1 THEN length(worlds.tail_events) ELSE {OUTBOX_APPEND_LIMIT} + 1 END
        <= {OUTBOX_APPEND_LIMIT}"""
# A published tick: the new head, the crash guard cleared, the publishing session's leases given back
# (its settled commands' and its released tail's), and a lockstep world's clock anchor
# following its head (the tick, when it was due, how late it published), the floor of open commands
# due at once moved up to the first still open (past the last command when none is), and the
# settlements' events (?9: their sequences, numbered from ?8) in the outbox's tail when they fit
# (APPEND_SPILLED_EVENTS appends them to the outbox otherwise). One statement: on the Durable Object
# each is a row written.
DUE_FLOOR_EXPR = """coalesce((SELECT c.sequence FROM commands AS c WHERE c.world_id = worlds.world_id
        AND c.sequence >= worlds.due_floor AND c.is_open = 1 AND c.due_later IS NULL ORDER BY c.sequence LIMIT 1),
    (SELECT max(c.sequence) + 1 FROM commands AS c WHERE c.world_id = worlds.world_id), worlds.due_floor)"""
PUBLISH_HEAD = f"""WITH n AS MATERIALIZED ({command_events(first="?8", at="?2", sequences="?9", world="?5", asked_by="NULL")})
    UPDATE worlds SET tick_head = ?1, updated_at = ?2, guard_sequence = NULL, guard_session = NULL,
        leases = {LEASES_WITHOUT_SESSION_EXPR.format(owner='?6', session='?7')}, due_floor = {DUE_FLOOR_EXPR},
        clock_tick = CASE WHEN tick_mode = 'lockstep' THEN ?1 ELSE clock_tick END,
        clock_ms = CASE WHEN tick_mode = 'lockstep' THEN ?3 ELSE clock_ms END,
        tick_lag_ms = CASE WHEN tick_mode = 'lockstep' THEN ?4 ELSE tick_lag_ms END,
        (tail_first_seq, tail_events) = (SELECT CASE WHEN NOT coalesce({TAIL_FITS_EXPR}, 0) THEN worlds.tail_first_seq
                WHEN {TAIL_TAKEN_OVER_EXPR} THEN n.first_seq ELSE worlds.tail_first_seq END,
            CASE WHEN NOT coalesce({TAIL_FITS_EXPR}, 0) THEN worlds.tail_events WHEN {TAIL_TAKEN_OVER_EXPR} THEN n.events
                ELSE substr(worlds.tail_events, 1, length(worlds.tail_events) - 1) || ',' || substr(n.events, 2) END
            FROM (SELECT 1) LEFT JOIN n ON true)
    WHERE world_id = ?5"""
# The watermark, and with it the last command up to which every `admitted` event read off a command row
# is acknowledged (the first one after it not acknowledged, less one; all of them: the last command):
# the readers of pending events start after it. It walks the commands the watermark passed, once.
SET_PROJECTED_SEQ = f"""UPDATE worlds SET projected_seq = ?1, projected_through_sequence = max(projected_through_sequence,
        coalesce((SELECT c.sequence - 1 FROM commands AS c WHERE c.world_id = ?2
                AND c.sequence > worlds.projected_through_sequence AND c.admitted_event_seq > ?1 ORDER BY c.sequence LIMIT 1),
            (SELECT max(l.sequence) FROM commands AS l WHERE l.world_id = ?2), 0)),
        tail_first_seq = CASE WHEN {WORLD_TAIL_LAST_EXPR} <= ?1 THEN NULL ELSE tail_first_seq END,
        tail_events = CASE WHEN {WORLD_TAIL_LAST_EXPR} <= ?1 THEN NULL ELSE tail_events END
    WHERE world_id = ?2 AND projected_seq < ?1"""
SET_GUARD = "UPDATE worlds SET guard_sequence = ?, guard_session = ? WHERE world_id = ?"
# A tick failed before it was prepared: one more failed attempt; the first one stalls the world.
RECORD_TICK_FAILURE = """UPDATE worlds SET failed_attempts = failed_attempts + 1, health_error = ?,
        stalled_since = coalesce(stalled_since, CAST(? AS INTEGER)), health = 'STALLED', updated_at = ?
    WHERE world_id = ?"""
# An operator's retry: the backoff's count starts again (docs/ledger.md, "World health").
RETRY_WORLD = "UPDATE worlds SET failed_attempts = 0, updated_at = ? WHERE world_id = ?"
# A published tick: the world makes progress again.
CLEAR_HEALTH = """UPDATE worlds SET health = 'ACTIVE', failed_attempts = 0, health_error = NULL, stalled_since = NULL
    WHERE world_id = ?"""

# -- commands --
COMMAND_COLUMNS = (
    "command_id, sequence, schema_version, world_id, scheduled_tick, priority, operation, payload, digest, "
    "principal, origin, max_attempts, attempts, reserved_entity_id, status, lease_owner, lease_expires_at, "
    "applied_tick, last_error, redriven_from, redriven_by, migrated_digest, created_at, updated_at"
)
# -- command leases (docs/storage.md, "Rows per command") --
# A lease is not written on the command's row: the world row's `leases` is a JSON object mapping each
# leased command's sequence to [owner, session, expires_at, leased_at], so leasing 100 commands writes
# one row, not 100 rows and their index entries, and publishing (which writes the world row anyway)
# gives them back. A command row keeps the open status it had (PENDING or RETRYABLE); what a reader
# answers is derived: an open command with an entry is LEASED by its owner and session until its
# expiry, updated when it was leased (or later, if its row was written since). An entry of a command
# that is no longer open means nothing (a settled command's is dropped with its session's).
# A statement reading commands this way starts WITH {HELD_CTE} (the world's entries, read once, as a
# table the join looks up: a path into the JSON object per command would read the object's keys one
# by one, quadratic in a tick of thousands) and reads FROM {COMMANDS_NOW_JOIN}; `c` is a commands row.
HELD_CTE = """held AS MATERIALIZED (SELECT CAST(l.key AS INTEGER) AS sequence, l.value AS lease
        FROM worlds AS lw CROSS JOIN json_each(lw.leases) AS l WHERE lw.world_id = {world})"""
LEASE_ENTRY_EXPR = "CASE WHEN c.is_open = 1 THEN h.lease END"
LEASE_SESSION_EXPR = f"json_extract({LEASE_ENTRY_EXPR}, '$[1]')"
COMMAND_STATUS_EXPR = f"CASE WHEN {LEASE_ENTRY_EXPR} IS NULL THEN c.status ELSE 'LEASED' END"
COMMAND_VALUE_COLUMNS = ", ".join(
    {
        "status": COMMAND_STATUS_EXPR,
        "lease_owner": f"json_extract({LEASE_ENTRY_EXPR}, '$[0]')",
        "lease_expires_at": f"json_extract({LEASE_ENTRY_EXPR}, '$[2]')",
        "updated_at": f"max(c.updated_at, coalesce(json_extract({LEASE_ENTRY_EXPR}, '$[3]'), c.updated_at))",
    }.get(name, f"c.{name}")
    for name in (column.strip() for column in COMMAND_COLUMNS.split(","))
)
COMMANDS_NOW_JOIN = "commands AS c LEFT JOIN held AS h ON h.sequence = c.sequence"
# The map is read, changed and written whole by the ledger (json_patch would look each key up in the
# object one by one: quadratic in a lease of thousands).
GET_LEASES = "SELECT leases FROM worlds WHERE world_id = ?"
SET_LEASES = "UPDATE worlds SET leases = ? WHERE world_id = ?"
# The sequences this (owner, session) holds (their commands open).
SESSION_LEASES = """SELECT CAST(l.key AS INTEGER) FROM worlds AS w CROSS JOIN json_each(w.leases) AS l
    JOIN commands AS c ON c.world_id = w.world_id AND c.sequence = CAST(l.key AS INTEGER)
    WHERE w.world_id = ?1 AND json_extract(l.value, '$[0]') = ?2 AND json_extract(l.value, '$[1]') = ?3 AND c.is_open = 1
    ORDER BY 1"""
DROP_SESSION_LEASES = f"UPDATE worlds SET leases = {LEASES_WITHOUT_SESSION_EXPR.format(owner='?2', session='?3')} WHERE world_id = ?1"
# An admitted command's row is written from these values, in this order: its sequence, its `admitted`
# event's number (the event is read off the row, no outbox row is written: READ_OUTBOX), and the fields
# its caller submitted. What a batch shares is bound once: the world ?1, its scope ?2 (one principal
# per batch), the time ?3, and the last tick a command is due at once for ?4 (the tick after the
# world's head, as the admission read it in the same transaction: DUE_LATER_VALUE_EXPR, without reading
# the world row again per row).
INSERTED_COMMAND_FIELDS = (
    "command_id", "schema_version", "scheduled_tick", "priority", "operation", "payload", "digest", "principal",
    "origin", "max_attempts", "reserved_entity_id",
)  # fmt: skip
ADMITTED_COMMAND_VALUES = ("sequence", "admitted_event_seq", *INSERTED_COMMAND_FIELDS)


def _insert_commands(values: list[str], source: str = "") -> str:
    """The INSERT of admitted commands whose ADMITTED_COMMAND_VALUES are the expressions `values`,
    `source` the rows they are read from (none: one row, of bound values; as VALUES, which SQLite
    runs in 6k instructions fewer a row than a SELECT of no table)."""
    tick = values[ADMITTED_COMMAND_VALUES.index("scheduled_tick")]
    row = f"""?1, ?2, {", ".join(values)}, 'PENDING', 1, ?3, ?3, CASE WHEN {tick} > ?4 THEN 1 END"""
    rows = f"SELECT {row}{source}" if source else f"VALUES ({row})"
    return f"""INSERT INTO commands (world_id, scope, {", ".join(ADMITTED_COMMAND_VALUES)}, status,
        is_open, created_at, updated_at, due_later)
    {rows}"""


# The two statements a port chooses between (SqlPort.execute_rows) to write admitted commands: one
# command's values bound as they are (?5 on), run once per command, or a batch's as one JSON array of
# arrays (?5), run once. Reading a JSON array costs SQLite more than the row's b-tree inserts (the
# array's parse, json_each's cursor and a path per value: callgrind counted 117k instructions a run
# for one row through the JSON, 57k bound), but on the Durable Object every statement is a crossing
# into JavaScript, so there a batch is one statement.
#
# Two of the values are NULL in most batches: a trusted caller's principal, the entity of a spawn that
# fulfils no reservation. Python's sqlite3 binds None through its adaptation protocol (an attribute
# look-up on a type that fails, its AttributeError formatted and cleared: about 3k instructions a value,
# more than binding the row's other values together), so the statements that write a batch none of
# whose rows has one of them say NULL there instead of binding it: ADMITTED_INSERTS, keyed by those
# fields (in NULLABLE_COMMAND_FIELDS' order), holds each pair and the fields its rows bind after the
# sequence and the event number. INSERT_COMMAND and INSERT_COMMANDS bind every value.
NULLABLE_COMMAND_FIELDS = ("principal", "reserved_entity_id")


def _admitted_inserts(nulls: tuple[str, ...]) -> tuple[str, str, tuple[str, ...]]:
    bound = [field for field in ADMITTED_COMMAND_VALUES if field not in nulls]
    each = [f"?{5 + bound.index(field)}" if field in bound else "NULL" for field in ADMITTED_COMMAND_VALUES]
    bulk = [f"json_extract(j.value, '$[{bound.index(field)}]')" if field in bound else "NULL"
            for field in ADMITTED_COMMAND_VALUES]  # fmt: skip
    return (_insert_commands(each), _insert_commands(bulk, "\n    FROM json_each(?5) AS j"),
            tuple(field for field in INSERTED_COMMAND_FIELDS if field in bound))  # fmt: skip


ADMITTED_INSERTS = {
    nulls: _admitted_inserts(nulls)
    for nulls in ((), ("principal",), ("reserved_entity_id",), NULLABLE_COMMAND_FIELDS)
}
INSERT_COMMAND, INSERT_COMMANDS = ADMITTED_INSERTS[()][:2]
# A trusted caller's batch of no reservation: the usual one
INSERT_UNATTRIBUTED_COMMAND, INSERT_UNATTRIBUTED_COMMANDS = ADMITTED_INSERTS[NULLABLE_COMMAND_FIELDS][:2]
GET_COMMAND = f"""WITH {HELD_CTE.format(world="?1")} SELECT {COMMAND_VALUE_COLUMNS} FROM {COMMANDS_NOW_JOIN}
    WHERE c.world_id = ?1 AND c.scope = ?2 AND c.command_id = ?3"""
# the commands of one id in every scope, in scope order (the unique index's), at most ? of them
COMMANDS_NAMED = f"""WITH {HELD_CTE.format(world="?1")} SELECT {COMMAND_VALUE_COLUMNS} FROM {COMMANDS_NOW_JOIN}
    WHERE c.world_id = ?1 AND c.command_id = ?2 ORDER BY c.scope LIMIT ?3"""
# Some commands of one scope by id (a JSON array of distinct ids), in sequence order.
GET_COMMANDS = f"""WITH {HELD_CTE.format(world="?2")} SELECT {COMMAND_VALUE_COLUMNS} FROM json_each(?1) AS j
    JOIN commands AS c ON c.world_id = ?2 AND c.scope = ?3 AND c.command_id = j.value
    LEFT JOIN held AS h ON h.sequence = c.sequence ORDER BY c.sequence"""
GET_COMMAND_BY_SEQUENCE = f"""WITH {HELD_CTE.format(world="?1")} SELECT {COMMAND_VALUE_COLUMNS} FROM {COMMANDS_NOW_JOIN}
    WHERE c.world_id = ?1 AND c.sequence = ?2"""
# (The open commands due at once are all read and sorted with the index's first ?3: a backlog of them
# larger than the limit is read whole, docs/storage.md, "Schema version 20".)
DUE_COMMANDS = f"""WITH {HELD_CTE.format(world="?1")} SELECT {COMMAND_VALUE_COLUMNS}, {LEASE_SESSION_EXPR}
    FROM ({open_commands("?1", "*", "scheduled_tick <= ?2", first_due="?3")}) AS c
    LEFT JOIN held AS h ON h.sequence = c.sequence
    ORDER BY c.scheduled_tick, c.priority, c.sequence LIMIT ?3"""
# The first entry of the commands_due index, in its own order (one row read, however many are due
# later), and the open commands due at once.
NEXT_DUE_TICK = f"""SELECT min(scheduled_tick) FROM ({open_commands("?1", "scheduled_tick", first_due="1")})
    HAVING count(*) > 0"""
# The sequences among these (?4) that this runner session holds, in ledger order.
HELD_IN_ORDER = f"""WITH {HELD_CTE.format(world="?1")} SELECT c.sequence, c.command_id FROM {COMMANDS_NOW_JOIN}
    WHERE c.world_id = ?1 AND json_extract({LEASE_ENTRY_EXPR}, '$[0]') = ?2 AND {LEASE_SESSION_EXPR} = ?3
        AND c.sequence IN (SELECT value FROM json_each(?4))
    ORDER BY c.scheduled_tick, c.priority, c.sequence"""
IS_HELD = f"""WITH {HELD_CTE.format(world="?1")} SELECT count(*) FROM {COMMANDS_NOW_JOIN}
    WHERE c.world_id = ?1 AND c.sequence = ?2 AND json_extract({LEASE_ENTRY_EXPR}, '$[0]') = ?3 AND {LEASE_SESSION_EXPR} = ?4"""
# A tick's settlements: one JSON array [sequence, outcome, error] per command. Every settlement is
# an attempt; a failure that spends the budget dead-letters, and a permanent failure at once. The
# settlements are MATERIALIZED so the join is driven from them into the primary key: left to itself SQLite scans the world's
# commands and the JSON array for each, quadratic (10,000 settlements: 100 s instead of 50 ms).
SETTLE = """WITH s AS MATERIALIZED (SELECT json_extract(value, '$[0]') AS sequence, json_extract(value, '$[1]') AS outcome,
        json_extract(value, '$[2]') AS error FROM json_each(?3))
    UPDATE commands SET
        status = CASE s.outcome WHEN 'applied' THEN 'APPLIED' WHEN 'rejected' THEN 'REJECTED'
            WHEN 'permanent' THEN 'DEAD_LETTER'
            ELSE CASE WHEN commands.attempts + 1 >= commands.max_attempts THEN 'DEAD_LETTER' ELSE 'RETRYABLE' END END,
        is_open = CASE WHEN s.outcome IN ('applied', 'rejected', 'permanent')
            OR commands.attempts + 1 >= commands.max_attempts THEN NULL ELSE 1 END,  -- open: RETRYABLE, as above
        attempts = commands.attempts + 1,
        applied_tick = CASE s.outcome WHEN 'applied' THEN CAST(?1 AS INTEGER) END,
        last_error = s.error, lease_owner = NULL, lease_session = NULL, lease_expires_at = NULL, updated_at = ?2
    FROM s WHERE commands.world_id = ?4 AND commands.sequence = s.sequence"""
# What a session still holds after its tick settled (the drain's unprocessed tail), given back free:
# its rows (a JSON array of sequences) written as released; the entries go with DROP_SESSION_LEASES
# or PUBLISH_HEAD.
RELEASE_ROWS = """UPDATE commands SET status = CASE WHEN attempts > 0 THEN 'RETRYABLE' ELSE 'PENDING' END,
        lease_owner = NULL, lease_session = NULL, lease_expires_at = NULL, updated_at = ?
    WHERE world_id = ? AND is_open = 1 AND sequence IN (SELECT value FROM json_each(?))"""
# The crash guard names a command whose runner died while materializing it: one attempt charged.
# (The ledger checked it is LEASED; its lease entry is removed with it.)
CHARGE_CRASH = """UPDATE commands SET attempts = attempts + 1,
        status = CASE WHEN attempts + 1 >= max_attempts THEN 'DEAD_LETTER' ELSE 'RETRYABLE' END,
        is_open = CASE WHEN attempts + 1 >= max_attempts THEN NULL ELSE 1 END,
        last_error = ?, lease_owner = NULL, lease_session = NULL, lease_expires_at = NULL, updated_at = ?
    WHERE world_id = ? AND sequence = ? AND is_open = 1"""
CANCEL_COMMANDS = """UPDATE commands SET status = 'CANCELLED', is_open = NULL, last_error = ?, lease_owner = NULL, lease_session = NULL,
        lease_expires_at = NULL, updated_at = ?
    WHERE world_id = ? AND sequence IN (SELECT value FROM json_each(?))"""
# Its redrive: a fresh command in the dead letter's scope, due at `tick`, with a fresh budget. (Due at
# the later of the dead letter's tick and the tick after the head, so due later when the former is.)
INSERT_REDRIVE = f"""INSERT INTO commands (world_id, sequence, scope, command_id, schema_version, scheduled_tick, priority,
        operation, payload, digest, principal, origin, max_attempts, reserved_entity_id, status, is_open, redriven_from,
        created_at, updated_at, due_later)
    SELECT world_id, ?, scope, ?, schema_version, ?, priority, operation, payload, ?, principal, origin, max_attempts,
        reserved_entity_id, 'PENDING', 1, sequence, ?, ?,
        {DUE_LATER_VALUE_EXPR.format(tick="commands.scheduled_tick", world="commands.world_id")}
    FROM commands WHERE world_id = ? AND sequence = ?"""
# The dead letter's own mark of its redrive: retention never prunes a dead letter, so it outlives the redrive's row.
MARK_REDRIVEN = "UPDATE commands SET redriven_by = ? WHERE world_id = ? AND sequence = ?"
OPEN_SEQUENCES = f"""SELECT sequence FROM ({open_commands("?1", "sequence")}) ORDER BY sequence LIMIT ?2"""
HISTORY = f"""WITH {HELD_CTE.format(world="?1")} SELECT {COMMAND_VALUE_COLUMNS} FROM {COMMANDS_NOW_JOIN}
    WHERE c.world_id = ?1 AND c.sequence > ?2 AND (?3 IS NULL OR {COMMAND_STATUS_EXPR} = ?4) AND (?5 IS NULL OR c.scope = ?6)
    ORDER BY c.sequence LIMIT ?7"""

# -- spawn reservations --
GET_RESERVATION = """SELECT entity_id, request_digest FROM spawn_reservations
    WHERE world_id = ? AND scope = ? AND command_id = ?"""
INSERT_RESERVATION = """INSERT INTO spawn_reservations (world_id, scope, command_id, entity_id, request_digest, created_at)
    VALUES (?, ?, ?, ?, ?, ?)"""

# -- ticks and entity state --
# A republished tick is its own tick's manifest again (the token digests the tick): found through the
# key, so no index of tokens is written per tick (docs/storage.md, "Rows per command").
GET_TICK_BY_TOKEN = "SELECT tick FROM ticks WHERE world_id = ? AND tick = ? AND commit_token = ?"
INSERT_TICK = "INSERT INTO ticks (world_id, tick, commit_token, manifest, published_at) VALUES (?, ?, ?, ?, ?)"
LIST_TICKS = "SELECT manifest FROM ticks WHERE world_id = ? AND tick > ? ORDER BY tick LIMIT ?"
# World state (docs/storage.md): each snapshot's chunks under the tick that published it, and the
# delta chunks, each under its tick; publication only adds rows (retention deletes them).
INSERT_STATE_CHUNK = "INSERT INTO state_snapshots (world_id, tick, first_entity_id, body) VALUES (?, ?, ?, ?)"
INSERT_STATE_DELTA = "INSERT INTO state_deltas (world_id, tick, part, body, replaces) VALUES (?, ?, ?, ?, ?)"
# The state at tick T ("State at a tick"): the last snapshot at or before T, and the deltas from the
# later of that snapshot's tick (a migration's delta may follow it in its tick) and the last delta
# up to T that replaced the deltas before it, up to T. One index seek each.
STATE_SNAPSHOT_TICK = "SELECT max(tick) FROM state_snapshots WHERE world_id = ? AND tick <= ?"
# (the partial index named: the clustered key, which the planner prefers without statistics, would
# walk back through every delta since the last replacing one)
STATE_REPLACING_TICK = """SELECT max(tick) FROM state_deltas INDEXED BY state_deltas_replacing
    WHERE world_id = ? AND replaces = 1 AND tick <= ?"""
GET_STATE_FROM_TICK = "SELECT state_from_tick FROM worlds WHERE world_id = ?"
# A read of some entities (archetype.commands.state_pages): the snapshot's chunk boundaries (chunk
# i holds the ids from its first up to the next chunk's), a chunk by its first id, each delta's
# opening (which names the id range it covers), and some deltas by (tick, part) in one statement.
STATE_CHUNK_FIRSTS = "SELECT first_entity_id FROM state_snapshots WHERE world_id = ? AND tick = ? ORDER BY first_entity_id"
GET_STATE_CHUNK = "SELECT body FROM state_snapshots WHERE world_id = ? AND tick = ? AND first_entity_id = ?"
STATE_DELTA_HEADS = """SELECT tick, part, substr(body, 1, 64) FROM state_deltas WHERE world_id = ? AND tick >= ? AND tick <= ?
    ORDER BY tick, part"""
# Driven from the deltas asked for (CROSS JOIN keeps that order): left to itself SQLite walked every
# delta the world retains and probed the array for each.
GET_STATE_DELTAS = """SELECT d.body FROM json_each(?) AS j
    CROSS JOIN state_deltas AS d ON d.world_id = ? AND d.tick = json_extract(j.value, '$[0]') AND d.part = json_extract(j.value, '$[1]')
    ORDER BY d.tick, d.part"""
NEXT_STATE_CHUNK = """SELECT first_entity_id, body FROM state_snapshots WHERE world_id = ? AND tick = ? AND first_entity_id > ?
    ORDER BY first_entity_id LIMIT 1"""
LIST_STATE_DELTAS = "SELECT body FROM state_deltas WHERE world_id = ? AND tick >= ? AND tick <= ? ORDER BY tick, part"

# -- outbox: rows of events in sequence order (docs/storage.md, "Rows per command" and "Schema version 19"),
# keyed by the last event's sequence; `events` holds them from `first_seq`, each a JSON array
# [command_id, event_type, status, operation, tick, principal, origin, payload text, occurred_at]
# (an event written before version 19 has no time of its own: its row's, `occurred_at`, is). An
# event's id is `<world id>/<event sequence>`.
#
# An append writes one row. Into the world's last row when that row's every event is acknowledged
# (the row is taken over: its events are gone from the outbox, so an acknowledgement deletes no row
# it could keep for this) or when the new events follow its own and the row stays small; otherwise a
# row of its own. At one command per tick a command's two events share one row that its
# acknowledgement leaves for the next append: no row inserted and deleted per event. Small is
# OUTBOX_APPEND_LIMIT characters of events: an append rewrites the row whole, and a clustered row
# spills to overflow pages past about 1,000 bytes; at 700 a leaf page holds five, and a single
# admission on the local catalog writes no more WAL pages than a row per append did (docs/storage.md).
OUTBOX_TAIL_ACKNOWLEDGED_EXPR = "outbox.last_seq <= (SELECT w.projected_seq FROM worlds AS w WHERE w.world_id = outbox.world_id)"


def outbox_append(new_events: str) -> str:
    """The statement appending the events `new_events` selects: at most one row (world_id,
    first_seq, occurred_at, events: a JSON array), as above."""
    acknowledged = OUTBOX_TAIL_ACKNOWLEDGED_EXPR
    return f"""INSERT INTO outbox (world_id, last_seq, first_seq, occurred_at, events)
    WITH n AS MATERIALIZED ({new_events}),
        tail AS (SELECT o.last_seq, length(o.events) AS size, o.last_seq <= w.projected_seq AS acknowledged
            FROM n JOIN worlds AS w ON w.world_id = n.world_id JOIN outbox AS o ON o.world_id = n.world_id
                AND o.last_seq = (SELECT max(m.last_seq) FROM outbox AS m WHERE m.world_id = n.world_id))
    SELECT n.world_id, CASE WHEN t.acknowledged OR (t.last_seq = n.first_seq - 1
            AND t.size + length(n.events) <= {OUTBOX_APPEND_LIMIT}) THEN t.last_seq
        ELSE n.first_seq + json_array_length(n.events) - 1 END, n.first_seq, n.occurred_at, n.events
    FROM n LEFT JOIN tail AS t ON true WHERE true
    ON CONFLICT (world_id, last_seq) DO UPDATE SET
        last_seq = excluded.first_seq + json_array_length(excluded.events) - 1,
        first_seq = CASE WHEN {acknowledged} THEN excluded.first_seq ELSE outbox.first_seq END,
        occurred_at = CASE WHEN {acknowledged} THEN excluded.occurred_at ELSE outbox.occurred_at END,
        events = CASE WHEN {acknowledged} THEN excluded.events
            ELSE substr(outbox.events, 1, length(outbox.events) - 1) || ',' || substr(excluded.events, 2) END"""


# One event per command sequence in a JSON array (?3), in array order, numbered from ?1, at time ?2
# (an operator's call binds ?5: command_events). The publication's settlements append theirs to the
# world row's tail when they fit there (PUBLISH_HEAD, above), and APPEND_SPILLED_EVENTS the ones
# that did not: when the tail holds ?1 it reads no command and appends nothing.
APPEND_EVENTS = outbox_append(command_events(first="?1", at="?2", sequences="?3", world="?4", asked_by="?5"))
SPILLED_SEQUENCES_EXPR = f"""(SELECT ?3 FROM worlds AS tw WHERE tw.world_id = ?4
        AND NOT coalesce(?1 BETWEEN tw.tail_first_seq AND {TAIL_LAST_EXPR.format(w='tw.')}, 0))"""
APPEND_SPILLED_EVENTS = outbox_append(
    command_events(first="?1", at="?2", sequences=SPILLED_SEQUENCES_EXPR, world="?4", asked_by="NULL"))
OUTBOX_COLUMNS = (
    "event_id, world_id, event_seq, command_id, event_type, status, operation, tick, principal, origin, "
    "occurred_at, payload"
)
# A world's own event (health): no command; `tick` is the tick that failed or published.
APPEND_WORLD_EVENT = outbox_append("""SELECT world_id, CAST(?1 AS INTEGER) AS first_seq, ?4 AS occurred_at,
        json_array(json_array('', ?2, health, 'tick', CAST(?3 AS INTEGER), NULL, 'local',
            '' || json_object('attempts', CAST(?5 AS INTEGER), 'max_attempts', NULL, 'error', ?6,
                'since', CAST(?7 AS INTEGER), 'actor', ?9), CAST(?4 AS INTEGER))) AS events
    FROM worlds WHERE world_id = ?8""")
# -- `admitted` events read off command rows (schema version 21: docs/storage.md, "Schema version 21") --
# An admission writes no outbox row: the command row carries its event's number (`admitted_event_seq`),
# its time is the row's `created_at`, and its fields are what APPEND_EVENTS wrote for a command just
# admitted, each a column no later write changes (id, operation, scheduled tick, principal, origin,
# attempt budget) or a constant then (status PENDING, no attempt, no error, no actor). Event numbers
# follow sequences among these rows (both are taken in admission order), so the pending ones are the
# commands after the world's `projected_through_sequence` (the acknowledgement moves it) whose number
# is past the position read, in key order: a read starts at the first of them.
# {world} and {after} name the statement's parameters; `d` is a commands row.
PENDING_ADMITTED_JOIN = """worlds AS pw CROSS JOIN commands AS d ON d.world_id = pw.world_id
        AND d.sequence > pw.projected_through_sequence
    WHERE pw.world_id = {world} AND d.admitted_event_seq > {after}"""
# The events of the JSON arrays `{rows}.{events}` of `{table}` (the outbox's rows, or the world row's
# tail), each numbered from `{rows}.{first}`; an event's time is its own (index 8) or, written before
# version 19, its row's `{at}`. `e` is the json_each of each array.
def unfolded_events(table: str, rows: str, first: str, events: str, at: str) -> str:
    return f"""SELECT {rows}.{first} + e.key AS event_seq, json_extract(e.value, '$[0]') AS command_id,
            json_extract(e.value, '$[1]') AS event_type, json_extract(e.value, '$[2]') AS status,
            json_extract(e.value, '$[3]') AS operation, json_extract(e.value, '$[4]') AS tick,
            json_extract(e.value, '$[5]') AS principal, json_extract(e.value, '$[6]') AS origin,
            coalesce(json_extract(e.value, '$[8]'), {at}) AS occurred_at, json_extract(e.value, '$[7]') AS payload
        FROM {table} AS {rows} CROSS JOIN json_each({rows}.{events}) AS e"""


# The events after a sequence number, in order: the three streams, each up to the page's limit,
# merged by number. The outbox's from the row holding the next event on (through the key), each
# row's events in array order (json_each's; the ledger checks the order, never assumes it: sorting
# on e.key too would sort the whole backlog before the LIMIT); the world row's tail (version 22); the
# admitted ones from the first pending command on.
READ_OUTBOX = f"""SELECT ?1 || '/' || e.event_seq AS event_id, ?1 AS world_id, e.* FROM (
    SELECT * FROM ({unfolded_events("outbox", "o", "first_seq", "events", "o.occurred_at")}
        WHERE o.world_id = ?1 AND o.last_seq > ?2 AND o.first_seq + e.key > ?2
        ORDER BY o.last_seq LIMIT ?3)
    UNION ALL
    SELECT * FROM ({unfolded_events("worlds", "tw", "tail_first_seq", "tail_events", "NULL")}
        WHERE tw.world_id = ?1 AND tw.tail_first_seq + e.key > ?2 LIMIT ?3)
    UNION ALL
    SELECT * FROM (SELECT d.admitted_event_seq, d.command_id, 'admitted', 'PENDING', d.operation, d.scheduled_tick,
            d.principal, d.origin, d.created_at, '' || json_object('attempts', 0, 'max_attempts', d.max_attempts, 'error', NULL)
        FROM {PENDING_ADMITTED_JOIN.format(world="?1", after="?2")} ORDER BY d.sequence LIMIT ?3)) AS e
    ORDER BY e.event_seq LIMIT ?3"""
# The same page as one row of JSON arrays, one per column: no Python tuple per event.
READ_OUTBOX_COLUMNS = (
    "SELECT " + ", ".join(f"json_group_array({column.strip()})" for column in OUTBOX_COLUMNS.split(","))
    + f" FROM ({READ_OUTBOX})"
)
# An acknowledgement deletes the rows whose every event it covers but the world's last one, which
# the next append takes over (above); a row it covers in part stays, and reads skip its
# acknowledged events (they read after the watermark).
DELETE_OUTBOX_UPTO = """DELETE FROM outbox WHERE world_id = ?1 AND last_seq <= ?2
    AND last_seq < (SELECT max(o.last_seq) FROM outbox AS o WHERE o.world_id = ?1)"""
# The catalog's worlds with events left to project, with their watermarks: a skip-scan of the outbox
# key and of the commands' (an admission's event is read off its command row), one look-up per world
# holding a row. An acknowledgement leaves a world's last row for its
# next append (above), so the worlds that ever had events are visited, one seek each, and those
# with nothing pending left out; a world without events (or one only forked) costs nothing. A world
# whose events pending are on its row's tail (version 22) is among those holding commands: the tail
# holds settlements' events, and prune keeps a command whose settlement event is pending there
# (FIRST_PENDING_EVENT reads the earliest of the tail's pending events, whatever the clock did).
BACKLOG_WORLDS = f"""WITH RECURSIVE in_outbox(world_id) AS (
        SELECT min(world_id) FROM outbox
        UNION ALL
        SELECT (SELECT min(o.world_id) FROM outbox AS o WHERE o.world_id > in_outbox.world_id) FROM in_outbox
        WHERE in_outbox.world_id IS NOT NULL),
    in_commands(world_id) AS (
        SELECT min(world_id) FROM commands
        UNION ALL
        SELECT (SELECT min(k.world_id) FROM commands AS k WHERE k.world_id > in_commands.world_id) FROM in_commands
        WHERE in_commands.world_id IS NOT NULL)
    SELECT * FROM (SELECT w.world_id, w.status, w.health, {NEXT_EVENT_SEQ_EXPR} - 1 AS committed_seq, w.projected_seq
        FROM (SELECT world_id FROM in_outbox UNION SELECT world_id FROM in_commands) AS pending
        JOIN worlds AS w ON w.world_id = pending.world_id)
    WHERE committed_seq > projected_seq ORDER BY world_id"""

# -- component schemas and migrations --
COMPONENT_COLUMNS = "c.name, c.fingerprint, c.schema, c.recorded_at, m.to_fingerprint"
_SUPERSEDED_JOIN = "LEFT JOIN component_migrations AS m ON m.world_id = c.world_id AND m.from_fingerprint = c.fingerprint"
# The recorded schemas among these fingerprints, each with what migrated it away (NULL: current).
FIND_COMPONENTS = f"""SELECT {COMPONENT_COLUMNS} FROM json_each(?1) AS j
    CROSS JOIN world_components AS c ON c.world_id = ?2 AND c.fingerprint = j.value {_SUPERSEDED_JOIN}"""
# The same as a fork at tick ?3 sees them: superseded only by the migrations of ticks up to it.
FIND_COMPONENTS_AT_TICK = f"{FIND_COMPONENTS} AND m.tick <= ?3"
# Everything an admission reads, in one statement (each statement is a round of the SQL engine, and
# on the Durable Object a crossing into JavaScript): rows tagged by what they answer.
# - 'world': the world's status, its next command and event sequence numbers (its last command joined:
#   one seek for both) and its tick head (no row: no world);
# - 'command': a command id of the batch (?3) already admitted in this scope (?2), or bound to a
#   spawn reservation there: its digest and sequence, the reserved entity and the request digest
#   (NULLs where there is none); ids with neither are not answered;
# - 'component': a recorded schema among the fingerprints ?4, as FIND_COMPONENTS answers it;
# - 'quota': this scope's admitted count for the tick each target tick in ?5 runs at (a passed tick runs
#   at the next one: max(target, tick head + 1)), for those that have one; target ticks running at
#   one tick answer it once each, with the same count (DISTINCT would sort every admission's rows in
#   a temporary b-tree, with a quota or not: a quarter of this statement's cost).
# The first part's columns are named by short aliases: Python's sqlite3 decodes every column's name
# into the cursor's description on each execute, and an expression's name is its whole text (1k
# instructions a read for the next numbers' expressions).
# An admission without a quota reads no counters: ADMISSION_READ_UNCOUNTED, the same statement without
# its 'quota' part and ?5 (the part's cursors cost an eighth of the statement even over no tick).
# ?3 and ?4 are JSON arrays; a batch of one command, or naming one component type, binds that id or
# that fingerprint as it is instead (ADMISSION_READS): json_each's parse and cursor were about a
# sixth of the statement for one value (5.5k instructions each, of 73k).
def _admission_read(*, counted: bool, one_id: bool, one_component: bool) -> str:
    ids = "(SELECT ?3 AS value)" if one_id else "json_each(?3)"
    fingerprints = "(SELECT ?4 AS value)" if one_component else "json_each(?4)"
    next_sequence, next_event_seq = next_numbers("lc.sequence", "lc.admitted_event_seq")
    read = f"""SELECT * FROM (SELECT 'world' AS k, w.status AS a, {next_sequence} AS b, {next_event_seq} AS c,
        w.tick_head AS d, NULL AS e
    FROM worlds AS w LEFT JOIN commands AS lc ON lc.world_id = w.world_id WHERE w.world_id = ?1
    ORDER BY lc.sequence DESC LIMIT 1)
    UNION ALL
    SELECT 'command', j.value, c.digest, c.sequence, r.entity_id, r.request_digest FROM {ids} AS j
        LEFT JOIN commands AS c ON c.world_id = ?1 AND c.scope = ?2 AND c.command_id = j.value
        LEFT JOIN spawn_reservations AS r ON r.world_id = ?1 AND r.scope = ?2 AND r.command_id = j.value
        WHERE c.digest IS NOT NULL OR r.entity_id IS NOT NULL
    UNION ALL
    SELECT 'component', {COMPONENT_COLUMNS} FROM {fingerprints} AS j
        CROSS JOIN world_components AS c ON c.world_id = ?1 AND c.fingerprint = j.value {_SUPERSEDED_JOIN}"""
    if not counted:
        return read
    return f"""{read}
    UNION ALL
    SELECT 'quota', u.scheduled_tick, u.used, NULL, NULL, NULL FROM json_each(?5) AS j
        CROSS JOIN worlds AS w ON w.world_id = ?1
        CROSS JOIN quota_usage AS u ON u.world_id = ?1 AND u.principal = ?2 AND u.scheduled_tick = max(j.value, w.tick_head + 1)"""


# keyed by (counted, one id, one component type)
ADMISSION_READS = {
    (counted, one_id, one_component): _admission_read(counted=counted, one_id=one_id, one_component=one_component)
    for counted in (False, True) for one_id in (False, True) for one_component in (False, True)
}  # fmt: skip
ADMISSION_READ_UNCOUNTED = ADMISSION_READS[False, False, False]
ADMISSION_READ = ADMISSION_READS[True, False, False]
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
# (where open commands are found: the due index and the walk from the floor, so a world's settled
# commands are visited only above its floor)
OPEN_COMMANDS_NAMING = f"""SELECT sequence FROM ({open_commands("?1", "sequence", "instr(payload, ?2) > 0")})
    ORDER BY sequence"""
# (the entities naming it are found in the state load_state reads: snapshot chunks under their deltas)
# A migration's rewritten entities are a delta at the world's tick head, after that tick's own parts.
NEXT_DELTA_PART = "SELECT coalesce(max(part) + 1, 0) FROM state_deltas WHERE world_id = ? AND tick = ?"
# Each rewrite is a JSON array [sequence, payload, digest]. The digest the command was admitted with
# stays (replays compare against it); the rewritten row's is `migrated_digest`.
REWRITE_PAYLOADS = """WITH r AS MATERIALIZED (SELECT json_extract(value, '$[0]') AS sequence,
        json_extract(value, '$[1]') AS payload, json_extract(value, '$[2]') AS digest FROM json_each(?3))
    UPDATE commands SET payload = r.payload, migrated_digest = r.digest, updated_at = ?2
    FROM r WHERE commands.world_id = ?1 AND commands.sequence = r.sequence"""
# A schema event (no command behind it): the command id names what happened.
APPEND_SCHEMA_EVENT = outbox_append("""SELECT ?1 AS world_id, CAST(?2 AS INTEGER) AS first_seq, ?7 AS occurred_at,
        json_array(json_array(?3, ?4, 'APPLIED', ?5, CAST(?6 AS INTEGER), NULL, 'local', ?8, CAST(?7 AS INTEGER))) AS events""")

# -- quotas: a principal's admitted commands per world and the tick they run at (a column named
# scheduled_tick: the target tick, or the next tick for one already past) --
GET_QUOTA_USAGE = "SELECT used FROM quota_usage WHERE world_id = ? AND principal = ? AND scheduled_tick = ?"
ADD_QUOTA_USAGE = """INSERT INTO quota_usage (world_id, principal, scheduled_tick, used) VALUES (?, ?, ?, ?)
    ON CONFLICT (world_id, principal, scheduled_tick) DO UPDATE SET used = used + excluded.used"""

# -- forks (docs/ledger.md, "Forks"): a new world made of another's state at a tick, in one
# transaction; its sequence numbers continue the source's, so a command admitted to both after the
# fork gets the same number in each --
GET_FORK_ORIGIN = "SELECT forked_from, forked_at_tick FROM worlds WHERE world_id = ?"
# (the source's values bound: on the Durable Object the fork's object has no source row)
INSERT_FORK = """INSERT INTO worlds (world_id, name, status, tick_head, next_entity_id, writer_epoch, next_sequence,
        next_event_seq, projected_seq, created_at, updated_at, clock_tick, clock_ms, tick_mode, tick_interval_ms,
        state_from_tick, forked_from, forked_at_tick, due_floor, projected_through_sequence)
    VALUES (?1, ?2, 'ACTIVE', CAST(?3 AS INTEGER), CAST(?4 AS INTEGER), 0, CAST(?5 AS INTEGER), CAST(?6 AS INTEGER),
        CAST(?6 AS INTEGER) - 1, ?7, ?7, CAST(?3 AS INTEGER), ?7, ?8, CAST(?9 AS INTEGER), CAST(?3 AS INTEGER), ?10,
        CAST(?3 AS INTEGER), CAST(?5 AS INTEGER), CAST(?5 AS INTEGER) - 1)"""
COPY_STATE_SNAPSHOT = """INSERT INTO state_snapshots (world_id, tick, first_entity_id, body)
    SELECT ?1, tick, first_entity_id, body FROM state_snapshots WHERE world_id = ?2 AND tick = ?3"""
COPY_STATE_DELTAS = """INSERT INTO state_deltas (world_id, tick, part, body, replaces)
    SELECT ?1, tick, part, body, replaces FROM state_deltas WHERE world_id = ?2 AND tick >= ?3 AND tick <= ?4"""
COPY_COMPONENTS = """INSERT INTO world_components (world_id, fingerprint, name, schema, recorded_at)
    SELECT ?1, fingerprint, name, schema, recorded_at FROM world_components WHERE world_id = ?2"""
COPY_MIGRATIONS = """INSERT INTO component_migrations (world_id, from_fingerprint, name, to_fingerprint, tick, entities,
        commands, migrated_at)
    SELECT ?1, from_fingerprint, name, to_fingerprint, tick, entities, commands, migrated_at
    FROM component_migrations WHERE world_id = ?2 AND tick <= ?3"""
# When the world left tick T: the publication of the first tick after it (none: it is still at T).
LEFT_TICK_AT = "SELECT min(published_at) FROM ticks WHERE world_id = ? AND tick > ?"
# The commands scheduled after T that were open at T: admitted before the world left T and not
# cancelled by then (a command scheduled after T settles no earlier than the tick it runs at).
OPEN_AT_TICK = f"""SELECT {COMMAND_COLUMNS}, scope FROM commands
    WHERE world_id = ?1 AND scheduled_tick > ?2 AND created_at <= ?3 AND NOT (status = 'CANCELLED' AND updated_at <= ?3)
    ORDER BY sequence"""
# Each forked command is a JSON array [scope, sequence, <INSERTED_COMMAND_FIELDS>..., forked_from]. The
# copies are below the fork's floor (its next sequence: INSERT_FORK) and in the due index whatever their
# tick (on the Durable Object they are written before the fork's world row).
INSERT_FORKED_COMMANDS = f"""INSERT INTO commands (world_id, scope, sequence, {", ".join(INSERTED_COMMAND_FIELDS)},
        forked_from, status, is_open, due_later, created_at, updated_at)
    SELECT ?1, {", ".join(f"json_extract(j.value, '$[{i}]')" for i in range(len(INSERTED_COMMAND_FIELDS) + 3))},
        'PENDING', 1, 1, ?2, ?2
    FROM json_each(?3) AS j"""

# -- forks on the Durable Object (docs/ledger.md, "Forks on the Durable Object"): the source fixes a
# plan and freezes what could change, the fork's object asks for it page by page --
GET_FORK_PLAN = "SELECT plan, released FROM fork_plans WHERE world_id = ? AND fork_world_id = ?"
INSERT_FORK_PLAN = "INSERT INTO fork_plans (world_id, fork_world_id, at_tick, plan) VALUES (?, ?, ?, ?)"
RELEASE_FORK_PLAN = "UPDATE fork_plans SET released = 1 WHERE world_id = ? AND fork_world_id = ?"
# The oldest tick an unfinished fork of the world copies the state of: retention keeps it.
FORK_PINNED_TICK = "SELECT min(at_tick) FROM fork_plans WHERE world_id = ? AND released = 0"
FREEZE_FORK_COMPONENTS = """INSERT INTO fork_rows (world_id, fork_world_id, kind, n, body)
    SELECT ?1, ?2, 'component', row_number() OVER (ORDER BY fingerprint), json_array(fingerprint, name, schema, recorded_at)
    FROM world_components WHERE world_id = ?1"""
FREEZE_FORK_MIGRATIONS = """INSERT INTO fork_rows (world_id, fork_world_id, kind, n, body)
    SELECT ?1, ?2, 'migration', row_number() OVER (ORDER BY from_fingerprint),
        json_array(from_fingerprint, name, to_fingerprint, tick, entities, commands, migrated_at)
    FROM component_migrations WHERE world_id = ?1 AND tick <= ?3"""
# The copies, each a JSON array as INSERT_FORKED_COMMANDS takes it, numbered by sequence.
FREEZE_FORK_COMMANDS = """INSERT INTO fork_rows (world_id, fork_world_id, kind, n, body)
    SELECT ?1, ?2, 'command', json_extract(j.value, '$[1]'), j.value FROM json_each(?3) AS j"""
DROP_FORK_ROWS = "DELETE FROM fork_rows WHERE world_id = ? AND fork_world_id = ?"
# One page of each part of a fork's copy, after the last row copied, in key order.
FORK_SNAPSHOT_PAGE = """SELECT first_entity_id, body FROM state_snapshots WHERE world_id = ?1 AND tick = ?2
    AND first_entity_id > ?3 ORDER BY first_entity_id LIMIT ?4"""
FORK_DELTAS_PAGE = """SELECT tick, part, body, replaces FROM state_deltas WHERE world_id = ?1
    AND (tick > ?2 OR (tick = ?2 AND part > ?3)) AND (tick < ?4 OR (tick = ?4 AND part <= ?5))
    ORDER BY tick, part LIMIT ?6"""
FORK_ROWS_PAGE = """SELECT kind, n, body FROM fork_rows WHERE world_id = ?1 AND fork_world_id = ?2
    AND (kind > ?3 OR (kind = ?3 AND n > ?4)) ORDER BY kind, n LIMIT ?5"""
# On the fork's object: the copy in progress (the cursor: the page to ask for next; NULL: all copied).
GET_FORK_COPY = "SELECT plan, cursor FROM fork_copies WHERE world_id = ?"
INSERT_FORK_COPY = "INSERT INTO fork_copies (world_id, plan, cursor) VALUES (?, ?, ?)"
ADVANCE_FORK_COPY = "UPDATE fork_copies SET cursor = ? WHERE world_id = ?"
DROP_FORK_COPY = "DELETE FROM fork_copies WHERE world_id = ?"
INSERT_FORKED_COMPONENT = "INSERT INTO world_components (world_id, fingerprint, name, schema, recorded_at) VALUES (?, ?, ?, ?, ?)"
INSERT_FORKED_MIGRATION = """INSERT INTO component_migrations (world_id, from_fingerprint, name, to_fingerprint, tick,
        entities, commands, migrated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"""
FORKED_SEQUENCES = "SELECT sequence FROM commands WHERE world_id = ? ORDER BY sequence"

# -- retention (docs/ledger.md, "Retention"); every statement deletes at most a limit of rows,
# oldest first, so one prune transaction stays small however far behind it is, and answers one
# row per row deleted (RETURNING: the ports have no portable changes count) --
PRUNABLE_STATUSES = "('APPLIED', 'REJECTED', 'CANCELLED')"
# The first unacknowledged event's time: a command settled no earlier than this may still have an
# event in the outbox, so it is not yet readable from the audit table. (Through the key: the first
# row holding one, and the least time of its pending events, which is the first's: the clock does
# not go backwards. A minimum over the whole backlog would read all of it.) The first pending
# `admitted` event read off a command row is the first command's after the world's
# `projected_through_sequence` whose number is past the watermark: one more seek. The world row's
# tail (version 22) holds a few events: the earliest of its pending ones, so a command whose
# settlement event is pending there is never pruned, even if the clock stepped back between two of
# them (the audit projector's backlog finds the world by its commands: BACKLOG_WORLDS).
FIRST_PENDING_EVENT = f"""SELECT min(at) FROM (
    SELECT min(coalesce(json_extract(e.value, '$[8]'), o.occurred_at)) AS at
    FROM (SELECT first_seq, occurred_at, events FROM outbox WHERE world_id = ?1 AND last_seq > ?2
        ORDER BY last_seq LIMIT 1) AS o CROSS JOIN json_each(o.events) AS e
    WHERE o.first_seq + e.key > ?2
    UNION ALL
    SELECT min(json_extract(e.value, '$[8]')) FROM worlds AS tw CROSS JOIN json_each(tw.tail_events) AS e
    WHERE tw.world_id = ?1 AND tw.tail_first_seq + e.key > ?2
    UNION ALL
    SELECT * FROM (SELECT d.created_at FROM {PENDING_ADMITTED_JOIN.format(world="?1", after="?2")}
        ORDER BY d.sequence LIMIT 1))"""
PRUNE_TICKS = """DELETE FROM ticks WHERE world_id = ?1 AND tick IN
    (SELECT tick FROM ticks WHERE world_id = ?1 AND tick <= ?2 ORDER BY tick LIMIT ?3) RETURNING 1"""
# The prunable commands, oldest settlement first, without an index of settlements (schema version 18:
# docs/storage.md, "Rows per command"; a settlement would write an entry there). A command settled by the
# horizon was admitted by it, and sequences follow admission time (the ledger's clock, as the horizon
# reads it, does not go backwards), so they all come before the first command admitted after it: the
# key is walked up to that one (none admitted since: past every sequence), which reads the commands
# older than the horizon (what prune takes, and what it never takes: dead letters, commands still
# open), never the window's. (Nor any command from the first whose `admitted` event, read off its row, is
# pending: that command was admitted after the horizon, which is before the first pending event.)
PRUNE_COMMANDS = f"""DELETE FROM commands WHERE world_id = ?1 AND sequence IN
    (SELECT sequence FROM commands WHERE world_id = ?1
        AND sequence < coalesce((SELECT sequence FROM commands WHERE world_id = ?1 AND created_at > ?2
            ORDER BY sequence LIMIT 1), {MAX_SAFE_INTEGER + 1})
        AND status IN {PRUNABLE_STATUSES} AND updated_at <= ?2
        ORDER BY updated_at, sequence LIMIT ?3) RETURNING 1"""
# A reservation whose command was pruned, or whose admission never came within the window.
PRUNE_RESERVATIONS = """DELETE FROM spawn_reservations WHERE rowid IN
    (SELECT rowid FROM spawn_reservations WHERE world_id = ?1 AND created_at <= ?2
        AND NOT EXISTS (SELECT 1 FROM commands AS c WHERE c.world_id = spawn_reservations.world_id
            AND c.scope = spawn_reservations.scope AND c.command_id = spawn_reservations.command_id)
        ORDER BY created_at, scope, command_id LIMIT ?3) RETURNING 1"""
# State no retained tick reads (docs/storage.md, "State at a tick"): the snapshots before the one the
# oldest retained tick reads, and the deltas before the first it reads. The floor moves first.
RAISE_STATE_FROM_TICK = "UPDATE worlds SET state_from_tick = max(state_from_tick, ?) WHERE world_id = ?"
# (The state tables are clustered on their keys: a row is named by its key, they have no rowid.)
PRUNE_STATE_SNAPSHOTS = """DELETE FROM state_snapshots WHERE world_id = ?1 AND (tick, first_entity_id) IN
    (SELECT tick, first_entity_id FROM state_snapshots WHERE world_id = ?1 AND tick < ?2 ORDER BY tick, first_entity_id LIMIT ?3)
    RETURNING 1"""
PRUNE_STATE_DELTAS = """DELETE FROM state_deltas WHERE world_id = ?1 AND (tick, part) IN
    (SELECT tick, part FROM state_deltas WHERE world_id = ?1 AND tick < ?2 ORDER BY tick, part LIMIT ?3) RETURNING 1"""
PRUNE_QUOTA_USAGE = """DELETE FROM quota_usage WHERE rowid IN
    (SELECT rowid FROM quota_usage WHERE world_id = ?1 AND scheduled_tick <= ?2 ORDER BY scheduled_tick, principal LIMIT ?3) RETURNING 1"""
