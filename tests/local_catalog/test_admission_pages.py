"""What an admission commit writes (docs/performance.md, "Admission against raw sqlite3 and the SQLite
queues"): the b-trees of its pages, read from the WAL frames it appends. A b-tree that admission
starts touching again (the world row, say) fails here, not only as a slower benchmark."""

from archetype.bench import wal_pages_by_btree
from archetype.commands.ledger import Ledger
from archetype.commands.port import ManualClock
from local_catalog import SqliteSqlPort

# the command row (clustered on its key, the sequence: schema version 13), its scoped command id,
# the due index; sqlite_schema is page 1, written when the file grows. No outbox: the `admitted`
# event is read off the command row (schema version 21)
ADMISSION_BTREES = {"commands", "commands_by_id", "commands_due", "sqlite_schema"}


def _row(i: int) -> dict[str, object]:
    return {"command_id": f"c-{i}", "schema_version": 1, "scheduled_tick": 2**40, "priority": 0, "operation": "despawn",
            "payload": f'{{"entity_id":{i},"world_id":"w"}}', "principal": None, "origin": "local", "max_attempts": 3,
            "reserved_entity_id": None, "request_digest": None}  # fmt: skip


def test_an_admission_commit_writes_the_command_and_its_keys_and_no_world_or_outbox_row(tmp_path):
    db = tmp_path / "catalog.db"
    port = SqliteSqlPort(db)
    ledger = Ledger(port, ManualClock())
    ledger.create_world("w", "w")
    ledger.admit("w", [_row(i) for i in range(500)])
    port.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    commits = 20
    for i in range(commits):
        ledger.admit("w", [_row(500 + i)])
    pages = wal_pages_by_btree(db)
    assert set(pages) <= ADMISSION_BTREES, pages
    assert "worlds" not in pages and "outbox" not in pages
    assert sum(pages.values()) / commits < 5, pages
    port.close()


def test_an_admission_transaction_is_one_read_one_write(tmp_path):
    """One statement reads everything admission checks (the world, replays and reservations, the
    recorded schemas, quota counters); the command rows, carrying their events, are one write,
    however many the batch holds. A look-up that creeps back in as a statement of its own fails here."""
    from archetype.commands import ledger_sql as q

    port = SqliteSqlPort(tmp_path / "catalog.db")
    ledger = Ledger(port, ManualClock())
    ledger.create_world("w", "w")
    statements: list[str] = []
    port._conn.set_trace_callback(statements.append)
    ledger.admit("w", [_row(0)])
    ledger.admit("w", [_row(i) for i in range(1, 101)], quota=1_000)
    ledger.admit("w", [_row(0)])  # a replay reads and writes nothing more
    port._conn.set_trace_callback(None)
    shapes = [s.split()[0] if s.split()[0] in ("BEGIN", "COMMIT") else s[:40] for s in statements]
    read, insert = q.ADMISSION_READ[:40], q.INSERT_COMMANDS[:40]
    quota = q.ADD_QUOTA_USAGE[:40]
    assert shapes == ["BEGIN", read, insert, "COMMIT",
                      "BEGIN", read, quota, insert, "COMMIT",
                      "BEGIN", read, "COMMIT"], shapes  # fmt: skip
    port.close()


def test_a_command_admitted_alone_is_stored_as_one_admitted_in_a_batch(tmp_path):
    """A single admission binds its row's fields (ledger_sql.INSERT_COMMAND), a batch reads them from
    one JSON array (INSERT_COMMANDS): the rows they store are the same, value and type, column by column."""
    port = SqliteSqlPort(tmp_path / "catalog.db")
    ledger = Ledger(port, ManualClock())
    rows = [_row(1), {**_row(2), "scheduled_tick": 0, "principal": "alice", "priority": -3},  # due later; due at once
            {**_row(3), "payload": '{"note":"\\u00e9 \\"quoted\\"","world_id":"w"}', "max_attempts": 1}]  # fmt: skip
    for row in rows:
        ledger.create_world(f"alone-{row['command_id']}", "w")
        ledger.create_world(f"batch-{row['command_id']}", "w")
        ledger.admit(f"alone-{row['command_id']}", [row])
        ledger.admit(f"batch-{row['command_id']}", [row, {**_row(9), "principal": row["principal"]}])
    # every column but the world's id and the digest (which covers the world's id)
    names = [name for (name,) in port.execute("SELECT name FROM pragma_table_info('commands')") if name not in ("world_id", "digest")]
    compared = ", ".join(f"{name}, typeof({name})" for name in names)
    stored = {world_id: values for world_id, *values in port.execute(
        f"SELECT world_id, {compared} FROM commands WHERE command_id != 'c-9'")}  # fmt: skip
    assert len(stored) == 2 * len(rows)
    for row in rows:
        assert stored[f"alone-{row['command_id']}"] == stored[f"batch-{row['command_id']}"]
    assert {values[2 * names.index("due_later")] for values in stored.values()} == {1, None}  # both places an open command is found
    port.close()
