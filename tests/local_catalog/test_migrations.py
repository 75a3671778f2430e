"""Versioned ledger migrations: a catalog written by the code before schema version 2 (a fixture
kept byte for byte, tests/local_catalog/fixtures) upgrades on open, losing nothing, identically
on the local catalog, the Durable Object stand-in's engine and the real Durable Object engine."""

from __future__ import annotations

import json
import shutil
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from archetype.commands import ActorCtx, CommandConflictError, DurableOptions, Role, ledger_sql
from archetype.commands.authority import InProcessAuthority
from archetype.commands.errors import LedgerSchemaError, RedriveConflictError, StorageUnavailableError
from archetype.commands.ledger import Ledger
from archetype.commands.migrations import MIGRATIONS, SCHEMA_VERSION
from archetype.commands.port import ManualClock
from archetype.runtime import Runtime
from archetype.world import Spawn
from archetype.world.columnar import id_runs
from durable_world.port import DurableObjectSqlPort
from local_catalog import CATALOG_FILE, SqliteSqlPort
from tests.component_modules.alpha import Health, Position
from tests.conformance.helpers import step
from tests.support.durable_object_standin import SqliteEngine
from tests.support.workerd.engine import WorkerdSqlEngine, shared_server

FIXTURE = Path(__file__).parent / "fixtures" / "catalog-v1.sqlite3"
WORLDS = ("v1-world", "v1-gone")


def v1_statements() -> list[str]:
    """The fixture as SQL statements, to load it into a Durable Object engine (transaction control dropped)."""
    with sqlite3.connect(FIXTURE) as db:
        return [s for s in db.iterdump() if s not in ("BEGIN TRANSACTION;", "COMMIT;")]


def open_local(tmp_path: Path) -> Ledger:
    tmp_path.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURE, tmp_path / CATALOG_FILE)
    return Ledger(SqliteSqlPort(tmp_path / CATALOG_FILE), ManualClock())


def open_durable(engine) -> Ledger:
    for statement in v1_statements():
        engine.sql.exec(statement)
    return Ledger(DurableObjectSqlPort(_Storage(engine)), ManualClock())


class _Storage:
    """`ctx.storage` as DurableObjectSqlPort uses it."""

    def __init__(self, engine) -> None:
        self.sql = engine.sql
        self.transactionSync = engine.transactionSync


def everything(ledger: Ledger) -> dict:
    return {
        world_id: {
            "info": ledger.world_info(world_id),
            "commands": ledger.history(world_id, limit=1000),
            "manifests": ledger.manifests(world_id, limit=1000),
            "outbox": ledger.read_outbox(world_id, limit=1000),
            "state": ledger.load_state(world_id),
        }
        for world_id in WORLDS
    }


def test_the_fixture_is_a_version_1_catalog():
    with sqlite3.connect(FIXTURE) as db:
        assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("1",)


def test_a_version_1_catalog_upgrades_losing_nothing(tmp_path):
    with sqlite3.connect(FIXTURE) as db:
        before = {r[0]: r for r in db.execute("SELECT command_id, status, attempts, principal, sequence, payload FROM commands")}
        events = db.execute("SELECT count(*) FROM outbox").fetchone()[0]
        v1_entities = db.execute("SELECT entity_id, components FROM entities ORDER BY entity_id").fetchall()
        v1_manifests = [json.loads(r[0]) for r in db.execute("SELECT manifest FROM ticks ORDER BY world_id, tick")]
        v1_clocks = dict(db.execute("SELECT world_id, updated_at FROM worlds").fetchall())
    ledger = open_local(tmp_path)
    with sqlite3.connect(tmp_path / CATALOG_FILE) as db:
        assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (str(SCHEMA_VERSION),)
    after = everything(ledger)
    commands = {r["command_id"]: r for w in WORLDS for r in after[w]["commands"]}
    assert set(commands) == set(before)
    for command_id, (_, status, attempts, principal, sequence, payload) in before.items():
        row = commands[command_id]
        assert (row["status"], row["principal"], row["sequence"], row["payload"]) == (status, principal, sequence, payload)
        # a v1 lease charged an attempt; a v2 lease does not, so a LEASED row gives it back
        assert row["attempts"] == (attempts - 1 if status == "LEASED" else attempts)
    assert sum(len(after[w]["outbox"]) for w in WORLDS) == events
    manifests = after["v1-world"]["manifests"]
    assert [[s["command_id"] for s in m["settlements"]] for m in manifests] == [
        m["applied_command_ids"] for m in v1_manifests
    ]
    # a manifest stored before the written ids were runs is read with the same ids, as runs
    assert [{k: m[k] for k in ("tick", "writer_epoch", "commit_token", "written_runs")} for m in manifests] == [
        {**{k: m[k] for k in ("tick", "writer_epoch", "commit_token")}, "written_runs": id_runs(sorted(m["written_entity_ids"]))}
        for m in v1_manifests
    ]
    assert {s["outcome"] for m in manifests for s in m["settlements"]} == {"applied"}
    assert [(e["entity_id"], e["components"]) for e in after["v1-world"]["state"]["entities"]] == v1_entities
    assert after["v1-world"]["info"]["tick_head"] == 2
    # the tick clock of a world older than its anchor starts at its tick head, when it last changed
    assert {w: (after[w]["info"]["clock_tick"], after[w]["info"]["clock_ms"]) for w in WORLDS} == {
        w: (after[w]["info"]["tick_head"], v1_clocks[w]) for w in WORLDS
    }
    assert ledger.command("v1-world", "spawn-hero", scope="pat")["status"] == "APPLIED"
    # a world from before tick modes keeps what it did: realtime, at its host's interval (none recorded)
    assert {w: (after[w]["info"]["tick_mode"], after[w]["info"]["tick_interval_ms"], after[w]["info"]["tick_lag_ms"])
            for w in WORLDS} == dict.fromkeys(WORLDS, ("realtime", None, 0))  # fmt: skip


async def test_an_upgraded_catalog_keeps_working(tmp_path):
    ledger = open_local(tmp_path)
    rt = Runtime(InProcessAuthority(ledger), owner="runner-v1", lease_ms=1_000)
    # the v1 runner died holding `leased-at-crash`: its own id recovers it at once, uncharged
    assert await step(rt, "v1-world") == 1
    assert (await rt.scheduler.command("v1-world", "leased-at-crash")).attempts == 1
    # identities survive: the actor's spawn replays, with its reservation
    pat = ActorCtx(principal="pat", roles={Role.player})
    hero = Spawn(world_id="v1-world", components=[Position(x=1.5, y=-0.0), Health(hp=10)])
    replay = await rt.dispatcher.defer_spawn_as(pat, hero, DurableOptions(tick=0), command_id="spawn-hero")
    assert replay.command.replayed and replay.entity_id == 1
    with pytest.raises(CommandConflictError):  # the bare reservation still binds its command id
        await rt.dispatcher.defer_spawn(Spawn(world_id="v1-world", components=[Health(hp=1)]), DurableOptions(tick=9),
                                        command_id="reserved-only")  # fmt: skip


def test_the_upgrade_is_the_same_on_every_sqlite_host(tmp_path):
    local = everything(open_local(tmp_path / "local"))
    standin = SqliteEngine(tmp_path / "standin.sqlite3")
    try:
        assert everything(open_durable(standin)) == local
    finally:
        standin.close()
    assert everything(open_durable(WorkerdSqlEngine(shared_server(), f"migration-{uuid.uuid4().hex}"))) == local


def test_an_interrupted_upgrade_leaves_the_old_version_intact(tmp_path):
    shutil.copy(FIXTURE, tmp_path / CATALOG_FILE)

    class DiesMidMigration(SqliteSqlPort):
        def execute(self, sql, params=()):
            if sql.startswith("DROP TABLE commands_v1"):
                raise sqlite3.OperationalError("disk I/O error")
            return super().execute(sql, params)

    port = DiesMidMigration(tmp_path / CATALOG_FILE)
    with pytest.raises(StorageUnavailableError):  # an I/O error is typed (docs/errors.md)
        Ledger(port, ManualClock())
    port.close()
    with sqlite3.connect(tmp_path / CATALOG_FILE) as db:
        assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("1",)
        assert "scope" not in {r[1] for r in db.execute("PRAGMA table_info(commands)")}
    assert open_local(tmp_path / "again").command("v1-world", "later")["status"] == "PENDING"


def test_a_newer_catalog_is_refused_and_migrations_only_go_forward(tmp_path):
    versions = [m.version for m in MIGRATIONS]
    assert versions == list(range(1, len(versions) + 1)) and SCHEMA_VERSION == versions[-1]
    ledger = open_local(tmp_path)
    ledger._port.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    with pytest.raises(LedgerSchemaError, match="newer"):
        Ledger(SqliteSqlPort(tmp_path / CATALOG_FILE), ManualClock())
    assert json.loads(json.dumps(MIGRATIONS[0].summary))  # every migration says what it does


@contextmanager
def ledgers_on_every_host(tmp_path: Path, write: Callable[[Callable[[str], Any]], None]) -> Iterator[list[Ledger]]:
    """Ledgers opened (so upgraded) over the catalog `write` leaves through an `execute(statement)`,
    on every SQLite host: the local catalog, the stand-in's engine and the real Durable Object
    engine, in that order; the two that hold files are closed on exit."""
    local = SqliteSqlPort(tmp_path / CATALOG_FILE)
    standin = SqliteEngine(tmp_path / "standin.sqlite3")
    engines = [standin, WorkerdSqlEngine(shared_server(), f"upgrade-{uuid.uuid4().hex}")]
    try:
        write(local.execute)
        for engine in engines:
            write(engine.sql.exec)
        yield [Ledger(local, ManualClock())] + [Ledger(DurableObjectSqlPort(_Storage(e)), ManualClock()) for e in engines]
    finally:
        local.close()
        standin.close()


def version_10_with_a_redrive(execute) -> None:
    """A catalog as version 10 left it: a dead letter `d` whose redrive `d.redrive` is retained
    (only the redrive's row says so then), and a dead letter `never` nobody redrove."""
    for migration in MIGRATIONS[:10]:
        for statement in migration.statements:
            execute(statement)
    execute("INSERT INTO meta (key, value) VALUES ('schema_version', '10')")
    execute("INSERT INTO worlds (world_id, name, status, created_at, updated_at) VALUES ('w', 'w', 'ACTIVE', 1, 1)")
    for sequence, command_id, status, redriven_from in ((1, "d", "DEAD_LETTER", None), (2, "never", "DEAD_LETTER", None),
                                                        (3, "d.redrive", "PENDING", 1)):  # fmt: skip
        execute(f"""INSERT INTO commands (world_id, sequence, scope, command_id, schema_version, scheduled_tick, priority,
                operation, payload, digest, origin, max_attempts, status, redriven_from, created_at, updated_at)
            VALUES ('w', {sequence}, '', '{command_id}', 1, 0, 0, 'despawn', '{{}}', 'x', 'local', 1, '{status}',
                {redriven_from or 'NULL'}, 1, 1)""")  # fmt: skip


def test_version_11_marks_each_retained_redrive_on_its_dead_letter(tmp_path):
    """The dead letter records its redrive from version 11 on (docs/ledger.md, "Redrive"): an
    upgrade marks every dead letter whose redrive is still retained, alike on every SQLite host."""
    with ledgers_on_every_host(tmp_path, version_10_with_a_redrive) as ledgers:
        for ledger in ledgers:
            marks = {r["command_id"]: (r["redriven_by"], r["migrated_digest"]) for r in ledger.history("w")}
            assert marks == {"d": (3, None), "never": (None, None), "d.redrive": (None, None)}
        with pytest.raises(RedriveConflictError):
            ledgers[0].redrive("w", "d", new_command_id="another")


def version_16_with_leases(execute) -> None:
    """A catalog as version 16 left it: `held` LEASED (never attempted), `again` LEASED after a failed
    attempt, `free` PENDING."""
    for migration in MIGRATIONS[:16]:
        for statement in migration.statements:
            execute(statement)
    execute("INSERT INTO meta (key, value) VALUES ('schema_version', '16')")
    execute("INSERT INTO worlds (world_id, name, status, created_at, updated_at) VALUES ('w', 'w', 'ACTIVE', 1, 1)")
    for sequence, command_id, status, attempts, lease in ((1, "held", "LEASED", 0, "'o', 's', 9000"),
                                                         (2, "again", "LEASED", 1, "'o', 's', 9000"),
                                                         (3, "free", "PENDING", 0, "NULL, NULL, NULL")):  # fmt: skip
        execute(f"""INSERT INTO commands (world_id, sequence, scope, command_id, schema_version, scheduled_tick, priority,
                operation, payload, digest, origin, max_attempts, attempts, status, is_open, lease_owner, lease_session,
                lease_expires_at, created_at, updated_at)
            VALUES ('w', {sequence}, '', '{command_id}', 1, 0, 0, 'despawn', '{{}}', 'x', 'local', 3, {attempts},
                '{status}', 1, {lease}, 1, {sequence * 10})""")  # fmt: skip


def test_version_17_moves_each_lease_to_the_world_row(tmp_path):
    """A LEASED command keeps its holder, expiry and time through the upgrade (docs/storage.md, "Rows
    per command"), alike on every SQLite host; released, it goes back as it would have before."""
    with ledgers_on_every_host(tmp_path, version_16_with_leases) as ledgers:
        for ledger in ledgers:
            held = {r["command_id"]: (r["status"], r["lease_owner"], r["lease_expires_at"], r["updated_at"])
                    for r in ledger.history("w")}  # fmt: skip
            assert held == {"held": ("LEASED", "o", 9000, 10), "again": ("LEASED", "o", 9000, 20),
                            "free": ("PENDING", None, None, 30)}  # fmt: skip
            assert ledger.release("w", "o", "s", 0) == 2
            assert [r["status"] for r in ledger.history("w")] == ["PENDING", "RETRYABLE", "PENDING"]


def version_18_with_events(execute) -> None:
    """A catalog as version 18 left it: world `w` with one outbox row of two events (numbers 1 and
    2), written at time 5, none acknowledged (its events have no time of their own), and state rows."""
    for migration in MIGRATIONS[:18]:
        for statement in migration.statements:
            execute(statement)
    execute("INSERT INTO meta (key, value) VALUES ('schema_version', '18')")
    execute("INSERT INTO worlds (world_id, name, status, created_at, updated_at) VALUES ('w', 'w', 'ACTIVE', 1, 1)")
    event = """json_array('{0}', 'admitted', 'PENDING', 'despawn', 0, NULL, 'local', '{{"attempts":0}}')"""
    execute(f"""INSERT INTO outbox (world_id, last_seq, first_seq, occurred_at, events)
        VALUES ('w', 2, 1, 5, json_array({event.format("a")}, {event.format("b")}))""")
    for tick, first, body in STATE_SNAPSHOTS_V18:
        execute(f"INSERT INTO state_snapshots (world_id, tick, first_entity_id, body) VALUES ('w', {tick}, {first}, '{body}')")
    for tick, part, body, replaces in STATE_DELTAS_V18:
        execute(f"INSERT INTO state_deltas (world_id, tick, part, body, replaces) VALUES ('w', {tick}, {part}, '{body}', {replaces})")


STATE_SNAPSHOTS_V18 = [(3, 1, "s3-1"), (3, 40, "s3-40"), (6, 1, "s6-1")]
STATE_DELTAS_V18 = [(4, 0, "d4-0", 0), (4, 1, "d4-1", 0), (5, 0, "d5-0", 1), (7, 0, "d7-0", 0)]


def test_version_19_keeps_each_event_and_its_time_and_every_state_row(tmp_path):
    """Events written before version 19 keep their numbers, fields and their row's time; an event
    appended to their row has its own; the state rows move to the clustered tables as they were
    (docs/storage.md, "Schema version 19"), alike on every SQLite host."""
    with ledgers_on_every_host(tmp_path, version_18_with_events) as ledgers:
        for ledger in ledgers:
            port, now = ledger._port, ledger._clock.now_ms()
            ledger.record_tick_failure("w", "o", "s", 0, 0, "boom")  # an outbox append (an admission's is not, from 20)
            events = ledger.read_outbox("w")
            assert [(e["event_seq"], e["command_id"], e["event_type"], e["occurred_at"]) for e in events] == [
                (1, "a", "admitted", 5), (2, "b", "admitted", 5), (3, "", "world_stalled", now)]
            assert [tuple(r) for r in port.execute("SELECT first_seq, last_seq FROM outbox")] == [(1, 3)]  # appended
            ledger.acknowledge_outbox("w", 3)
            assert ledger.read_outbox("w") == [] and ledger.watermark("w")["pending"] == 0
            assert [tuple(r) for r in port.execute("SELECT first_seq, last_seq FROM outbox")] == [(1, 3)]  # kept
            assert ledger.world_info("w")["next_event_seq"] == 4
            # the state tables, rebuilt clustered, hold what they held, and their reads find it
            snapshots = port.execute("SELECT tick, first_entity_id, body FROM state_snapshots ORDER BY 1, 2")
            assert [tuple(r) for r in snapshots] == STATE_SNAPSHOTS_V18
            deltas = port.execute("SELECT tick, part, body, replaces FROM state_deltas ORDER BY 1, 2")
            assert [tuple(r) for r in deltas] == STATE_DELTAS_V18
            assert [tuple(r) for r in port.execute(ledger_sql.STATE_REPLACING_TICK, ("w", 6))] == [(5,)]


def version_19_with_open_commands(execute) -> None:
    """A catalog as version 19 left it: world `w` at tick head 5 with a settled command and open ones
    due at once (scheduled at or before tick 6) and due later, every open one in the due index."""
    for migration in MIGRATIONS[:19]:
        for statement in migration.statements:
            execute(statement)
    execute("INSERT INTO meta (key, value) VALUES ('schema_version', '19')")
    execute("INSERT INTO worlds (world_id, name, status, tick_head, created_at, updated_at) VALUES ('w', 'w', 'ACTIVE', 5, 1, 1)")
    for sequence, command_id, status, tick, priority, attempts in OPEN_COMMANDS_V19:
        execute(f"""INSERT INTO commands (world_id, sequence, scope, command_id, schema_version, scheduled_tick, priority,
                operation, payload, digest, origin, max_attempts, attempts, status, is_open, created_at, updated_at)
            VALUES ('w', {sequence}, '', '{command_id}', 1, {tick}, {priority}, 'despawn', '{{}}', 'x', 'local', 3,
                {attempts}, '{status}', {"NULL" if status == "APPLIED" else 1}, 1, 1)""")  # fmt: skip


# (sequence, command id, status, scheduled tick, priority, attempts)
OPEN_COMMANDS_V19 = [(1, "done", "APPLIED", 2, 0, 1), (2, "soon", "PENDING", 3, 5, 0), (3, "later", "PENDING", 9, 0, 0),
                     (4, "retry", "RETRYABLE", 6, 0, 1), (5, "last", "PENDING", 20, 0, 0)]  # fmt: skip


def test_version_20_keeps_every_open_command_due_in_its_order(tmp_path):
    """The upgrade to version 20 (docs/storage.md, "Schema version 20") leaves the open commands due
    after the tick after the head in the due index and the others above the world's floor: every one
    is still leased, in (scheduled tick, priority, sequence) order, and the earliest is still the next
    due tick, alike on every SQLite host."""
    with ledgers_on_every_host(tmp_path, version_19_with_open_commands) as ledgers:
        for ledger in ledgers:
            port = ledger._port
            kinds = port.execute("SELECT sequence, due_later FROM commands WHERE is_open = 1 ORDER BY sequence")
            assert [tuple(r) for r in kinds] == [(2, None), (3, 1), (4, None), (5, 1)]
            assert port.execute("SELECT due_floor FROM worlds")[0][0] == 2
            indexed = port.execute("SELECT sequence FROM commands INDEXED BY commands_due WHERE world_id = 'w' "
                                   "AND is_open = 1 AND due_later = 1 ORDER BY sequence")  # fmt: skip
            assert [r[0] for r in indexed] == [3, 5]
            assert ledger.next_due_tick("w") == 3
            epoch = ledger.acquire_writer("w")["writer_epoch"]
            leased = ledger.lease("w", "o", "s", epoch, 9, 10, 30_000)
            assert [r["command_id"] for r in leased] == ["soon", "retry", "later"]
            leased = ledger.lease("w", "o", "s", epoch, 20, 10, 30_000)
            assert [r["command_id"] for r in leased] == ["soon", "retry", "later", "last"]


def version_20_with_pending_and_acknowledged_events(execute) -> None:
    """A catalog as version 20 left it: world `w` with 40 commands of long ago (`old-0`..`old-39`,
    settled, their events acknowledged and deleted), `a` (41, settled) and `b` (42, pending); its
    outbox holds one row of events 41 (a admitted, acknowledged), 42 (b admitted) and 43 (a applied),
    each at its own time, the watermark at 41."""
    for migration in MIGRATIONS[:20]:
        for statement in migration.statements:
            execute(statement)
    execute("INSERT INTO meta (key, value) VALUES ('schema_version', '20')")
    execute("""INSERT INTO worlds (world_id, name, status, projected_seq, created_at, updated_at)
        VALUES ('w', 'w', 'ACTIVE', 41, 1, 1)""")
    rows = [(i + 1, f"old-{i}", "APPLIED", "NULL") for i in range(40)] + [(41, "a", "APPLIED", "NULL"), (42, "b", "PENDING", 1)]
    for sequence, command_id, status, is_open in rows:
        execute(f"""INSERT INTO commands (world_id, sequence, scope, command_id, schema_version, scheduled_tick, priority,
                operation, payload, digest, origin, max_attempts, status, is_open, created_at, updated_at)
            VALUES ('w', {sequence}, '', '{command_id}', 1, 0, 0, 'despawn', '{{}}', 'x', 'local', 3, '{status}',
                {is_open}, {sequence}, {sequence})""")  # fmt: skip
    admitted = """json_array('{0}', 'admitted', 'PENDING', 'despawn', 0, NULL, 'local',
        '{{"attempts":0,"max_attempts":3,"error":null}}', {1})"""
    applied = """json_array('a', 'applied', 'APPLIED', 'despawn', 0, NULL, 'local',
        '{"attempts":1,"max_attempts":3,"error":null}', 43)"""
    execute(f"""INSERT INTO outbox (world_id, last_seq, first_seq, occurred_at, events)
        VALUES ('w', 43, 41, 41, json_array({admitted.format("a", 41)}, {admitted.format("b", 42)}, {applied}))""")


def test_version_21_reads_admitted_events_off_the_command_rows_keeping_every_event(tmp_path):
    """From version 21 an admission writes no outbox row (docs/storage.md, "Schema version 21"): the
    events an upgraded catalog holds, pending or acknowledged, read as they did, a new admission's
    event follows them in number and reads with the same fields, and the readers of pending events
    start after the world's last command of the upgrade, never walking the commands before it;
    alike on every SQLite host."""
    with ledgers_on_every_host(tmp_path, version_20_with_pending_and_acknowledged_events) as ledgers:
        for ledger in ledgers:
            port, now = ledger._port, ledger._clock.now_ms()
            assert [tuple(r) for r in port.execute("SELECT projected_through_sequence FROM worlds")] == [(42,)]
            fields = ("event_id", "event_seq", "command_id", "event_type", "status", "tick", "occurred_at", "payload")
            pending = [tuple(e[f] for f in fields) for e in ledger.read_outbox("w")]  # type: ignore[literal-required]
            assert pending == [("w/42", 42, "b", "admitted", "PENDING", 0, 42, '{"attempts":0,"max_attempts":3,"error":null}'),
                               ("w/43", 43, "a", "applied", "APPLIED", 0, 43, '{"attempts":1,"max_attempts":3,"error":null}')]  # fmt: skip
            assert ledger.watermark("w") == {"world_id": "w", "committed_seq": 43, "projected_seq": 41, "pending": 2}
            (admitted,) = ledger.admit("w", [{"command_id": "c", "schema_version": 1, "scheduled_tick": 0, "priority": 0,
                                              "operation": "despawn", "payload": '{"entity_id":1,"world_id":"w"}',
                                              "principal": None, "origin": "local", "max_attempts": 3,
                                              "reserved_entity_id": None, "request_digest": None}])  # fmt: skip
            assert admitted["sequence"] == 43
            events = ledger.read_outbox("w")
            assert [tuple(e[f] for f in fields) for e in events] == pending + [  # type: ignore[literal-required]
                ("w/44", 44, "c", "admitted", "PENDING", 0, now, '{"attempts":0,"max_attempts":3,"error":null}')]
            assert events[0].keys() == events[2].keys() and events[2]["origin"] == "local" and events[2]["principal"] is None
            assert [tuple(r) for r in port.execute("SELECT first_seq, last_seq FROM outbox")] == [(41, 43)]  # no append
            assert [e["event_seq"] for e in ledger.read_outbox("w", after_seq=42, limit=1)] == [43]
            ledger.acknowledge_outbox("w", 43)
            assert [e["event_seq"] for e in ledger.read_outbox("w")] == [44]
            ledger.acknowledge_outbox("w", 44)
            assert ledger.read_outbox("w") == [] and ledger.watermark("w")["pending"] == 0
            assert ledger.world_info("w")["next_event_seq"] == 45
            assert [tuple(r) for r in port.execute("SELECT projected_through_sequence FROM worlds")] == [(43,)]


def version_21_with_pending_and_acknowledged_events(execute) -> None:
    """A catalog as version 21 left it: world `w` whose outbox holds events 41 (`a` admitted,
    acknowledged), 42 (`b` admitted, before version 21) and 43 (`a` applied), and whose command `c`
    carries its `admitted` event 44 on its row; `b` and `c` pending for tick 0, the watermark at 41."""
    version_20_with_pending_and_acknowledged_events(execute)
    for statement in MIGRATIONS[20].statements:
        execute(statement)
    execute("UPDATE meta SET value = '21' WHERE key = 'schema_version'")
    execute("""INSERT INTO commands (world_id, sequence, scope, command_id, schema_version, scheduled_tick, priority,
            operation, payload, digest, origin, max_attempts, status, is_open, admitted_event_seq, created_at, updated_at)
        VALUES ('w', 43, '', 'c', 1, 0, 0, 'despawn', '{}', 'x', 'local', 3, 'PENDING', 1, 44, 44, 44)""")


def test_version_22_keeps_every_event_and_puts_a_publication_s_on_the_world_row(tmp_path):
    """From version 22 a publication's few events are written on the world row's tail (docs/storage.md,
    "Schema version 22"): an upgraded catalog's events, pending or acknowledged, read as they did; a
    publication's follow them in number, on the tail, not in the outbox; a partial acknowledgement
    keeps the tail, a whole one clears it; alike on every SQLite host."""
    with ledgers_on_every_host(tmp_path, version_21_with_pending_and_acknowledged_events) as ledgers:
        for ledger in ledgers:
            port, now = ledger._port, ledger._clock.now_ms()
            assert [tuple(r) for r in port.execute("SELECT tail_first_seq, tail_events FROM worlds")] == [(None, None)]
            fields = ("event_id", "event_seq", "command_id", "event_type", "status", "tick", "occurred_at")
            pending = [tuple(e[f] for f in fields) for e in ledger.read_outbox("w")]  # type: ignore[literal-required]
            assert pending == [("w/42", 42, "b", "admitted", "PENDING", 0, 42), ("w/43", 43, "a", "applied", "APPLIED", 0, 43),
                               ("w/44", 44, "c", "admitted", "PENDING", 0, 44)]  # fmt: skip
            epoch = ledger.acquire_writer("w")["writer_epoch"]
            leased = ledger.lease("w", "o", "s", epoch, 0, 10, 30_000)
            assert [r["command_id"] for r in leased] == ["b", "c"]
            settlements = [{"sequence": r["sequence"], "command_id": r["command_id"], "outcome": "applied", "error": None}
                           for r in leased]  # fmt: skip
            manifest = {"world_id": "w", "tick": 0, "writer_epoch": epoch, "settlements": settlements,
                        "written_runs": [], "commit_token": "t0"}  # fmt: skip
            ledger.publish("w", "o", "s", manifest, {"snapshot": False, "chunks": []})
            assert [tuple(r) for r in port.execute("SELECT first_seq, last_seq FROM outbox")] == [(41, 43)]  # no append
            assert port.execute("SELECT tail_first_seq FROM worlds")[0][0] == 45
            events = [tuple(e[f] for f in fields) for e in ledger.read_outbox("w")]  # type: ignore[literal-required]
            assert events == pending + [("w/45", 45, "b", "applied", "APPLIED", 0, now),
                                        ("w/46", 46, "c", "applied", "APPLIED", 0, now)]  # fmt: skip
            assert [e["event_seq"] for e in ledger.read_outbox("w", after_seq=43, limit=2)] == [44, 45]
            assert ledger.watermark("w") == {"world_id": "w", "committed_seq": 46, "projected_seq": 41, "pending": 5}
            ledger.acknowledge_outbox("w", 45)
            assert [e["event_seq"] for e in ledger.read_outbox("w")] == [46]
            assert port.execute("SELECT tail_first_seq FROM worlds")[0][0] == 45  # covered in part: kept
            ledger.acknowledge_outbox("w", 46)
            assert ledger.read_outbox("w") == [] and ledger.watermark("w")["pending"] == 0
            assert [tuple(r) for r in port.execute("SELECT tail_first_seq, tail_events FROM worlds")] == [(None, None)]
            assert ledger.world_info("w")["next_event_seq"] == 47
