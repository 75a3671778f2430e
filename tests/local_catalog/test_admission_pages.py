"""What an admission commit writes (docs/performance.md, "Admission against raw sqlite3 and the SQLite
queues"): the b-trees of its pages, read from the WAL frames it appends. A b-tree that admission
starts touching again (the world row, say) fails here, not only as a slower benchmark."""

import itertools
import json

import pytest

from archetype.bench import wal_pages_by_btree
from archetype.commands.errors import InvalidComponentDataError, UnknownComponentError
from archetype.commands.ledger import Ledger
from archetype.commands.port import ManualClock
from durable_world.port import DurableObjectSqlPort
from local_catalog import SqliteSqlPort
from tests.support.durable_object_standin import SqliteEngine

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
    # (the local port steps one prepared INSERT_COMMAND per row, where the Durable Object runs a
    # batch as one INSERT_COMMANDS: test_a_batch_is_one_statement_on_the_durable_object)
    read, insert = q.ADMISSION_READ[:40], q.INSERT_COMMAND[:40]
    shapes = [s.split()[0] if s.split()[0] in ("BEGIN", "COMMIT") else s[:40] for s in statements]
    assert not any("json_each" in s for s in statements if s.startswith(insert))  # never the JSON array's statement
    runs = [(shape, len(list(group))) for shape, group in itertools.groupby(shapes)]
    quota = q.ADD_QUOTA_USAGE[:40]
    assert runs == [("BEGIN", 1), (read, 1), (insert, 1), ("COMMIT", 1),
                    ("BEGIN", 1), (read, 1), (quota, 1), (insert, 100), ("COMMIT", 1),
                    ("BEGIN", 1), (read, 1), ("COMMIT", 1)], runs  # fmt: skip
    port.close()


class _Statements:
    """A Durable Object engine (the stand-in's) noting each statement it runs."""

    def __init__(self, engine: SqliteEngine) -> None:
        self.engine, self.run = engine, []
        self.transactionSync = engine.transactionSync

    @property
    def sql(self) -> "_Statements":
        return self

    def exec(self, query: str, *bindings: object) -> object:
        self.run.append(query)
        return self.engine.sql.exec(query, *bindings)


def test_a_batch_is_one_statement_on_the_durable_object(tmp_path):
    """On the Durable Object every statement is a crossing into JavaScript: a batch's rows are one
    INSERT_COMMANDS, a command alone one INSERT_COMMAND (its values bound, no JSON to parse)."""
    from archetype.commands import ledger_sql as q

    engine = _Statements(SqliteEngine(tmp_path / "object.sqlite3"))
    ledger = Ledger(DurableObjectSqlPort(engine), ManualClock())
    ledger.create_world("w", "w")
    engine.run.clear()
    ledger.admit("w", [_row(0)])
    ledger.admit("w", [_row(i) for i in range(1, 101)], quota=1_000)
    # (a trusted caller's commands of no reservation: their principal and reserved entity the literal NULL)
    # (a command alone binds its id, not a JSON array of one; these payloads name no component type)
    assert engine.run == [q.ADMISSION_READS[False, True, False], q.INSERT_UNATTRIBUTED_COMMAND, q.ADMISSION_READ,
                          q.ADD_QUOTA_USAGE, q.INSERT_UNATTRIBUTED_COMMANDS]  # fmt: skip
    assert [r["sequence"] for r in ledger.history("w", limit=200)] == list(range(1, 102))
    engine.engine.close()


class _BatchAsJson(SqliteSqlPort):
    """The local catalog writing a batch as the Durable Object does: one INSERT_COMMANDS."""

    execute_rows = DurableObjectSqlPort.execute_rows


def test_a_command_admitted_alone_is_stored_as_one_admitted_in_a_batch(tmp_path):
    """A command's row bound alone (ledger_sql.INSERT_COMMAND), bound in a batch (the local
    catalog's: one statement stepped per row) and read from a batch's JSON array (INSERT_COMMANDS,
    the Durable Object's batch) is stored the same, value and type, column by column."""
    port = SqliteSqlPort(tmp_path / "catalog.db")
    ledgers = {"alone": Ledger(port, ManualClock()), "batch": Ledger(port, ManualClock())}
    json_port = _BatchAsJson(tmp_path / "catalog.db")
    ledgers["json"] = Ledger(json_port, ManualClock())
    rows = [_row(1), {**_row(2), "scheduled_tick": 0, "principal": "alice", "priority": -3},  # due later; due at once
            {**_row(3), "payload": '{"note":"\\u00e9 \\"quoted\\"","world_id":"w"}', "max_attempts": 1}]  # fmt: skip
    for row in rows:
        for how, ledger in ledgers.items():
            ledger.create_world(f"{how}-{row['command_id']}", "w")
            # a world event first (world_stalled, number 1), so a command's sequence and its event's number differ
            epoch = ledger.acquire_writer(f"{how}-{row['command_id']}")["writer_epoch"]
            ledger.record_tick_failure(f"{how}-{row['command_id']}", "o", "s", epoch, 0, "failed")
            around = [{**_row(i), "principal": row["principal"]} for i in (8, 9)]
            batch = [row] if how == "alone" else [around[0], row, around[1]]
            ledger.admit(f"{how}-{row['command_id']}", batch)
    # every column but the world's id, the digest (which covers the world's id) and the sequence (the
    # batches' second command)
    names = [name for (name,) in port.execute("SELECT name FROM pragma_table_info('commands')")
             if name not in ("world_id", "digest", "sequence", "admitted_event_seq")]  # fmt: skip
    compared = ", ".join(f"{name}, typeof({name})" for name in names)
    stored = {world_id: values for world_id, *values in port.execute(
        f"SELECT world_id, {compared} FROM commands WHERE command_id NOT IN ('c-8', 'c-9')")}  # fmt: skip
    assert len(stored) == len(ledgers) * len(rows)
    for row in rows:
        assert stored[f"alone-{row['command_id']}"] == stored[f"batch-{row['command_id']}"] == stored[f"json-{row['command_id']}"]
    assert {values[2 * names.index("due_later")] for values in stored.values()} == {1, None}  # both places an open command is found
    numbers = port.execute("SELECT sequence, admitted_event_seq FROM commands WHERE world_id LIKE '%-c-3' ORDER BY world_id, sequence")
    assert numbers == [(1, 2)] + [(1, 2), (2, 3), (3, 4)] * 2, numbers  # alone-, batch-, json-
    json_port.close()
    port.close()


# Batches of (principal, reserved entity) per row: the statements that say NULL for a field none of a
# batch's rows has (ledger_sql.ADMITTED_INSERTS) and those that bind it, a row alone and with others.
NULLABLE_BATCHES = [
    [(None, None)], [(None, None), (None, None)], [("alice", None)], [("alice", None), ("alice", None)],
    [(None, 7)], [(None, None), (None, 7)], [(None, 7), (None, None)], [("alice", 7), ("alice", None)],
    [("alice", None), ("alice", 7)],
]  # fmt: skip


@pytest.mark.parametrize("port_class", [SqliteSqlPort, _BatchAsJson], ids=["each", "bulk"])
def test_a_principal_and_a_reserved_entity_are_stored_as_admitted_whatever_the_batch_holds(tmp_path, port_class):
    port = port_class(tmp_path / "catalog.db")
    ledger = Ledger(port, ManualClock())
    for index, batch in enumerate(NULLABLE_BATCHES):
        world_id = f"w{index}"
        ledger.create_world(world_id, "w")
        rows = [{**_row(i), "principal": principal, "reserved_entity_id": reserved} for i, (principal, reserved) in enumerate(batch)]
        ledger.admit(world_id, rows)
        stored = port.execute("SELECT principal, reserved_entity_id FROM commands WHERE world_id = ? ORDER BY sequence", (world_id,))
        assert stored == batch, (batch, stored)
    port.close()


def _spawn(i: int, payload: str) -> dict[str, object]:
    return {**_row(i), "operation": "spawn", "payload": payload}


def _health(hp: object, fingerprint: str | None = None) -> str:
    from tests.component_modules.alpha import Health

    component = {"data": {"hp": hp}, "fingerprint": fingerprint or Health.component_fingerprint(), "name": "Health"}
    return json.dumps({"components": [component], "operation": "spawn", "world_id": "w"}, sort_keys=True)


# A batch's payloads and what admitting it raises: a new row's payload that does not parse is refused
# before any row's components are checked, and a component refusal names the command it is in.
REFUSED_BATCHES = [
    ([_health(5), _health(5, "0" * 64)], UnknownComponentError, "recorded no component 'Health' .*command 'c-1'"),
    ([_health(5), _health("five")], InvalidComponentDataError, r"Health .*, command 'c-1'\)"),
    ([_health(5, "0" * 64), _health("five"), "{not json"], json.JSONDecodeError, "Expecting property name"),
    ([_health("five"), _health(5, "0" * 64)], InvalidComponentDataError, r"command 'c-0'\)"),
    # a refusal names where in the payload its component is (found only for the refusal)
    ([_health(5), _health(5, "0" * 64)], UnknownComponentError, r"^\$\.components\[0\]: world 'w'"),
    ([_health("five")], InvalidComponentDataError, r"^\$\.components\[0\]\.data\.hp"),
]


@pytest.mark.parametrize(("payloads", "error", "message"), REFUSED_BATCHES)
def test_a_refused_batch_names_its_command_and_admits_nothing(tmp_path, payloads, error, message):
    from archetype.commands.scheduler import schema_row
    from tests.component_modules.alpha import Health

    port = SqliteSqlPort(tmp_path / "catalog.db")
    ledger = Ledger(port, ManualClock())
    ledger.create_world("w", "w")
    ledger.record_components("w", [schema_row(Health)])
    with pytest.raises(error, match=message):
        ledger.admit("w", [_spawn(i, payload) for i, payload in enumerate(payloads)])
    assert ledger.history("w") == []
    port.close()
