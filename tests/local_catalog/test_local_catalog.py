"""The local authority: one SQLite catalog file per storage directory, WAL, schema-version row."""

import sqlite3

import pytest

from archetype.commands.errors import LedgerSchemaError
from archetype.commands.migrations import SCHEMA_VERSION
from archetype.commands.port import ManualClock
from local_catalog import CATALOG_FILE, SqliteSqlPort, open_local_authority


async def test_one_catalog_file_holds_every_world_of_a_storage_directory(tmp_path):
    authority = open_local_authority(tmp_path, clock=ManualClock())
    for name in ("a", "b", "c"):
        await authority.create_world(world_id=name, name=name)
    await authority.close()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(CATALOG_FILE + "-")) == [CATALOG_FILE]
    with sqlite3.connect(tmp_path / CATALOG_FILE) as db:
        assert [r[0] for r in db.execute("SELECT world_id FROM worlds ORDER BY world_id")] == ["a", "b", "c"]
        assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (str(SCHEMA_VERSION),)
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_durability_defaults_to_full_and_is_configurable(tmp_path):
    assert SqliteSqlPort(tmp_path / "a.db").execute("PRAGMA synchronous") == [(2,)]  # FULL
    assert SqliteSqlPort(tmp_path / "b.db", synchronous="NORMAL").execute("PRAGMA synchronous") == [(1,)]
    with pytest.raises(ValueError):
        SqliteSqlPort(tmp_path / "c.db", synchronous="OFF")


async def test_a_catalog_from_another_schema_version_is_refused(tmp_path):
    await open_local_authority(tmp_path).close()
    with sqlite3.connect(tmp_path / CATALOG_FILE) as db:
        db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(LedgerSchemaError, match="schema version 99"):
        open_local_authority(tmp_path)


def test_a_transaction_rolls_back_on_any_exception(tmp_path):
    port = SqliteSqlPort(tmp_path / "t.db")
    port.execute("CREATE TABLE t (x INTEGER)")

    def write_then_fail():
        port.execute("INSERT INTO t VALUES (1)")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        port.transaction(write_then_fail)
    assert port.execute("SELECT count(*) FROM t") == [(0,)]
    assert port.transaction(lambda: port.transaction(lambda: port.execute("INSERT INTO t VALUES (2)"))) == []
    assert port.execute("SELECT x FROM t") == [(2,)]
