"""What an admission commit writes (docs/performance.md, "Admission against raw sqlite3 and the SQLite
queues"): the b-trees of its pages, read from the WAL frames it appends. A b-tree that admission
starts touching again (the world row, say) fails here, not only as a slower benchmark."""

import sqlite3
import struct
from pathlib import Path

from archetype.commands.ledger import Ledger
from archetype.commands.port import ManualClock
from local_catalog import SqliteSqlPort

# the command row, its two keys (sequence, scoped command id), the due index, the outbox event;
# sqlite_schema is page 1, written when the file grows
ADMISSION_BTREES = {"commands", "sqlite_autoindex_commands_1", "commands_by_id", "commands_due", "outbox", "sqlite_schema"}


def _row(i: int) -> dict[str, object]:
    return {"command_id": f"c-{i}", "schema_version": 1, "scheduled_tick": 2**40, "priority": 0, "operation": "despawn",
            "payload": f'{{"entity_id":{i},"world_id":"w"}}', "principal": None, "origin": "local", "max_attempts": 3,
            "reserved_entity_id": None, "request_digest": None}  # fmt: skip


def _wal_pages(db: Path) -> list[int]:
    data = (db.parent / f"{db.name}-wal").read_bytes()
    page_size = struct.unpack(">I", data[8:12])[0]
    return [struct.unpack(">I", data[at : at + 4])[0] for at in range(32, len(data) - page_size, 24 + page_size)]


def test_an_admission_commit_writes_the_command_its_keys_and_its_event_and_no_world_row(tmp_path):
    db = tmp_path / "catalog.db"
    port = SqliteSqlPort(db)
    ledger = Ledger(port, ManualClock())
    ledger.create_world("w", "w")
    ledger.admit("w", [_row(i) for i in range(500)])
    port.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    commits = 20
    for i in range(commits):
        ledger.admit("w", [_row(500 + i)])
    pages = _wal_pages(db)
    names = dict(sqlite3.connect(db).execute("SELECT pageno, name FROM dbstat").fetchall())
    touched = {names[p] for p in pages}
    assert touched <= ADMISSION_BTREES, touched
    assert "worlds" not in touched
    assert len(pages) / commits < 6, len(pages) / commits
    port.close()
