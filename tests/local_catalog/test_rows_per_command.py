"""What schema version 13 stores to write fewer rows per command (docs/storage.md, "Rows per
command"), held where the behaviour alone would not show a drift: the reads of open commands say
both `is_open` and the status, so a statement that set a terminal status and forgot `is_open`
would change no answer, only leave the command in the open-commands index for good."""

import json
import sqlite3

from archetype.commands import ledger_sql
from archetype.commands.ledger import Ledger
from archetype.commands.port import ManualClock
from archetype.runtime import Runtime
from archetype.world import CreateWorld
from local_catalog import CATALOG_FILE, SqliteSqlPort, open_local_authority
from tests.conformance.helpers import at, fail_next, probe, step
from tests.conformance.scenario import run_scenario


async def test_is_open_follows_the_status_through_every_transition_of_the_scenario(tmp_path):
    clock = ManualClock()
    authority = open_local_authority(tmp_path, clock=clock)
    open_statuses = ledger_sql.OPEN_STATUSES
    with sqlite3.connect(tmp_path / CATALOG_FILE) as db:  # every row any statement writes is checked as written
        for event in ("INSERT", "UPDATE"):
            db.execute(f"""CREATE TRIGGER is_open_follows_{event.lower()} AFTER {event} ON commands
                WHEN (NEW.is_open IS 1) != (NEW.status IN {open_statuses})
                BEGIN SELECT RAISE(ABORT, 'is_open does not follow the status'); END""")  # fmt: skip
    try:
        await run_scenario(authority, clock)  # every ledger path: settlements, retries, crashes, releases, destroy
    finally:
        await authority.close()
    with sqlite3.connect(tmp_path / CATALOG_FILE) as db:
        statuses = {status for (status,) in db.execute("SELECT status FROM commands")}
        transitions = {event for (event,) in db.execute("SELECT DISTINCT json_extract(e.value, '$[1]') "
                                                         "FROM outbox, json_each(outbox.events) AS e")}  # fmt: skip
    assert {"APPLIED", "REJECTED", "DEAD_LETTER", "CANCELLED", "PENDING"} <= statuses, statuses
    assert "retry_scheduled" in transitions, transitions


def _row(i: int, tick: int) -> dict[str, object]:
    return {"command_id": f"c-{i}", "schema_version": 1, "scheduled_tick": tick, "priority": 0, "operation": "despawn",
            "payload": f'{{"entity_id":{i},"world_id":"w"}}', "principal": None, "origin": "local", "max_attempts": 3,
            "reserved_entity_id": None, "request_digest": None}  # fmt: skip


def test_the_outbox_holds_a_row_per_append_and_reads_its_events_one_by_one(tmp_path):
    """An append is one row however many events it holds; admissions append none (schema version 20:
    each command row carries its `admitted` event), and a read merges both by number."""
    port = SqliteSqlPort(tmp_path / CATALOG_FILE)
    ledger = Ledger(port, ManualClock())
    ledger.create_world("w", "w")
    ledger.admit("w", [_row(i, 0) for i in range(50)])

    def rows() -> list[tuple[int, int]]:
        return port.execute("SELECT first_seq, last_seq FROM outbox WHERE world_id = 'w' ORDER BY last_seq")

    assert rows() == []
    ledger.destroy("w")  # 50 cancellations: one append
    assert rows() == [(51, 100)]
    events = ledger.read_outbox("w", limit=1000)
    assert [e["event_seq"] for e in events] == list(range(1, 101))
    assert [e["event_id"] for e in events[:2]] == ["w/1", "w/2"] and events[7]["command_id"] == "c-7"
    assert [e["event_type"] for e in events] == ["admitted"] * 50 + ["cancelled"] * 50
    assert [e["command_id"] for e in events[50:]] == [f"c-{i}" for i in range(50)]
    # pages across both: the admitted events' and the outbox row's
    assert [e["event_seq"] for e in ledger.read_outbox("w", after_seq=48, limit=4)] == [49, 50, 51, 52]
    ledger.acknowledge_outbox("w", 20)
    assert [e["event_seq"] for e in ledger.read_outbox("w", limit=1000)] == list(range(21, 101))
    assert [e["event_seq"] for e in ledger.read_outbox("w", after_seq=40, limit=3)] == [41, 42, 43]
    # a watermark inside a row: the row stays, its acknowledged events are not read again
    ledger.acknowledge_outbox("w", 75)
    assert rows() == [(51, 100)]
    assert [e["event_seq"] for e in ledger.read_outbox("w", limit=1000)] == list(range(76, 101))
    assert ledger.world_info("w")["next_event_seq"] == 101
    port.close()


# Schema 17: a command's lease is an entry of its world row's lease map, never a write of its own row.


async def test_no_statement_writes_a_lease_on_a_command_row(tmp_path):
    """Every ledger path of the scenario (leases, renewals, takeovers, crashes charged, releases,
    settlements, destroy) leaves a command row's stored status open or terminal and its lease
    columns empty: who holds a command is only in the world's lease map."""
    clock = ManualClock()
    authority = open_local_authority(tmp_path, clock=clock)
    with sqlite3.connect(tmp_path / CATALOG_FILE) as db:
        for event in ("INSERT", "UPDATE"):
            db.execute(f"""CREATE TRIGGER no_lease_on_rows_{event.lower()} AFTER {event} ON commands
                WHEN NEW.status = 'LEASED' OR coalesce(NEW.lease_owner, NEW.lease_session, NEW.lease_expires_at) IS NOT NULL
                BEGIN SELECT RAISE(ABORT, 'a lease was written on a command row'); END""")  # fmt: skip
    try:
        await run_scenario(authority, clock)
    finally:
        await authority.close()


def test_a_lease_is_an_entry_of_the_world_row_until_its_tick_publishes(tmp_path):
    clock = ManualClock()
    port = SqliteSqlPort(tmp_path / CATALOG_FILE)
    ledger = Ledger(port, clock)
    ledger.create_world("w", "w")
    epoch = ledger.acquire_writer("w")["writer_epoch"]
    ledger.admit("w", [_row(i, 0) for i in range(3)])
    admitted_at = clock.now_ms()
    clock.advance(10)
    leased = ledger.lease("w", "o", "s", epoch, 0, 10, 5_000)
    assert [r["sequence"] for r in leased] == [1, 2, 3]

    def stored() -> list[tuple]:
        return port.execute("SELECT status, lease_owner, lease_expires_at, updated_at FROM commands ORDER BY sequence")

    def lease_map() -> dict | None:
        (text,), = port.execute("SELECT leases FROM worlds WHERE world_id = 'w'")
        return None if text is None else json.loads(text)

    leased_at = clock.now_ms()
    assert stored() == [("PENDING", None, None, admitted_at)] * 3  # the rows are as admitted
    assert lease_map() == {str(s): ["o", "s", leased_at + 5_000, leased_at] for s in (1, 2, 3)}
    answered = ledger.command("w", "c-1")
    assert answered is not None
    assert (answered["status"], answered["lease_owner"], answered["lease_expires_at"], answered["updated_at"]) == (
        "LEASED", "o", leased_at + 5_000, leased_at)
    assert [r["command_id"] for r in ledger.history("w", status="LEASED")] == ["c-0", "c-1", "c-2"]
    assert ledger.history("w", status="PENDING") == []

    clock.advance(10)
    settlements = [{"sequence": r["sequence"], "command_id": r["command_id"], "outcome": "applied", "error": None}
                   for r in leased[:2]]  # fmt: skip
    manifest = {"world_id": "w", "tick": 0, "writer_epoch": epoch, "settlements": settlements, "written_runs": [],
                "commit_token": "t0"}  # fmt: skip
    ledger.publish("w", "o", "s", manifest, {"snapshot": False, "chunks": []})
    published_at = clock.now_ms()
    # the settled rows and the released tail are written; the map keeps nothing of the session
    assert lease_map() is None
    assert stored() == [("APPLIED", None, None, published_at)] * 2 + [("PENDING", None, None, published_at)]
    assert [r["status"] for r in ledger.history("w")] == ["APPLIED", "APPLIED", "PENDING"]
    port.close()


# Schema 20: a command due at once is in no index; it is found by walking the key from its world's floor.


async def test_every_open_command_is_in_the_due_index_or_at_or_above_its_world_s_floor(tmp_path):
    """Held as every ledger path of the scenario writes (docs/storage.md, "Schema version 20"): a
    command due at once is inserted at or above its world's floor, a closed command never reopens, a
    command never changes place, and the floor never passes an open command due at once. Together:
    every open command is in the due index or where the walk from the floor finds it."""
    clock = ManualClock()
    authority = open_local_authority(tmp_path, clock=clock)
    below_floor = "sequence < (SELECT w.due_floor FROM worlds AS w WHERE w.world_id = NEW.world_id)"
    with sqlite3.connect(tmp_path / CATALOG_FILE) as db:
        db.execute(f"""CREATE TRIGGER inserted_above_the_floor AFTER INSERT ON commands
            WHEN NEW.is_open = 1 AND NEW.due_later IS NULL AND NEW.{below_floor}
            BEGIN SELECT RAISE(ABORT, 'an open command due at once was inserted below its floor'); END""")
        db.execute("""CREATE TRIGGER never_reopened AFTER UPDATE ON commands
            WHEN (OLD.is_open IS NULL AND NEW.is_open IS NOT NULL) OR NEW.due_later IS NOT OLD.due_later
            BEGIN SELECT RAISE(ABORT, 'a closed command reopened, or a command changed place'); END""")
        db.execute("""CREATE TRIGGER floor_below_every_open_command AFTER UPDATE OF due_floor ON worlds
            WHEN EXISTS (SELECT 1 FROM commands AS c WHERE c.world_id = NEW.world_id AND c.is_open = 1
                AND c.due_later IS NULL AND c.sequence < NEW.due_floor)
            BEGIN SELECT RAISE(ABORT, 'the floor passed an open command due at once'); END""")
    try:
        await run_scenario(authority, clock)  # (it admits most of its commands for later ticks)
        await _commands_due_at_once_out_of_order(authority)
    finally:
        await authority.close()
    with sqlite3.connect(tmp_path / CATALOG_FILE) as db:
        places = {later for (later,) in db.execute("SELECT DISTINCT due_later FROM commands")}
        floors = [floor for (floor,) in db.execute("SELECT due_floor FROM worlds")]
    assert places == {1, None}, places  # both places were used
    assert max(floors) > 1, floors  # and the floor moved


async def _commands_due_at_once_out_of_order(authority) -> None:
    """Ticks of commands due at once settled out of their admission order (priorities, a lease limit
    of two, failures left retryable behind later settlements), among commands due later."""
    rt = Runtime(authority, owner="runner-floor", lease_ms=1_000)
    rt.scheduler.lease_limit = 2
    await rt.dispatcher.apply(CreateWorld(name="floor", world_id="floor"))
    for round_ in range(6):
        head = (await authority.world_info("floor"))["tick_head"]
        for i, priority in enumerate((1, 0, 3)):
            label = f"r{round_}-{i}"
            if i < 2 and round_ % 2 == 0:
                fail_next(label, RuntimeError("transient"))
            await rt.dispatcher.defer(probe("floor", label), at(max(head, 0), priority=priority), command_id=label)
        await rt.dispatcher.defer(probe("floor", f"later-{round_}"), at(head + 3, priority=-1), command_id=f"later-{round_}")
        await step(rt, "floor")
    while await authority.next_due_tick("floor") is not None:
        await step(rt, "floor")
    await rt.close()


# Schema 21: an admission's `admitted` event is its command row, which prune must keep until it is delivered.


def test_prune_keeps_a_command_whose_admitted_event_is_pending_even_after_the_clock_stepped_back(tmp_path):
    """The horizon reads the ledger's clock as not going backwards (docs/ledger.md, "Retention"): when
    it steps back, a settled command may be pruned while its settlement event, an outbox row, is
    pending. Its `admitted` event is the row itself: the first pending event's time that the horizon
    stays under is that event's, so prune's walk stops at its command."""
    clock = ManualClock(10_000)
    port = SqliteSqlPort(tmp_path / CATALOG_FILE)
    ledger = Ledger(port, clock)
    ledger.create_world("w", "w")
    epoch = ledger.acquire_writer("w")["writer_epoch"]
    ledger.record_tick_failure("w", "o", "s", epoch, 0, "boom")  # event 1, an outbox row at 10,000
    clock.advance(-9_000)  # the clock steps back
    ledger.admit("w", [_row(0, 0)])  # event 2, at 1,000: the command row
    leased = ledger.lease("w", "o", "s", epoch, 0, 10, 5_000)
    settlements = [{"sequence": r["sequence"], "command_id": r["command_id"], "outcome": "applied", "error": None}
                   for r in leased]  # fmt: skip
    manifest = {"world_id": "w", "tick": 0, "writer_epoch": epoch, "settlements": settlements, "written_runs": [],
                "commit_token": "t0"}  # fmt: skip
    ledger.publish("w", "o", "s", manifest, {"snapshot": False, "chunks": []})  # c-0 applied at 1,000
    assert ledger.prune("w", keep_ticks=1, idempotency_window_ms=0)["commands"] == 0
    events = [(e["event_seq"], e["command_id"], e["event_type"]) for e in ledger.read_outbox("w")]
    assert events[:3] == [(1, "", "world_stalled"), (2, "c-0", "admitted"), (3, "c-0", "applied")], events
    ledger.acknowledge_outbox("w", ledger.watermark("w")["committed_seq"])
    assert ledger.prune("w", keep_ticks=1, idempotency_window_ms=0)["commands"] == 1  # delivered: it goes
    port.close()


def test_prune_keeps_the_commands_of_the_world_row_s_pending_tail_after_the_clock_stepped_back(tmp_path):
    """Schema 22 (docs/storage.md, "Schema version 22"): the settlements' events of two publications
    share the world row's tail, the second's written after the clock stepped back, so it is earlier
    than the first. The horizon stays under the earliest pending event of the tail, not its first, so
    neither command is pruned before its event is delivered (the audit projector's backlog finds the
    world by its commands)."""
    clock = ManualClock(1_000)
    port = SqliteSqlPort(tmp_path / CATALOG_FILE)
    ledger = Ledger(port, clock)
    ledger.create_world("w", "w")
    epoch = ledger.acquire_writer("w")["writer_epoch"]
    ledger.admit("w", [_row(0, 0), _row(1, 1)])  # events 1 and 2, at 1,000
    for tick, step_ms in ((0, 9_000), (1, -9_000)):  # the clock steps on, then back
        clock.advance(step_ms)
        (leased,) = ledger.lease("w", "o", "s", epoch, tick, 10, 5_000)
        settlement = {"sequence": leased["sequence"], "command_id": leased["command_id"], "outcome": "applied", "error": None}
        manifest = {"world_id": "w", "tick": tick, "writer_epoch": epoch, "settlements": [settlement],
                    "written_runs": [], "commit_token": f"t{tick}"}  # fmt: skip
        ledger.publish("w", "o", "s", manifest, {"snapshot": False, "chunks": []})  # c-0 at 10,000, c-1 at 1,000
    assert port.execute("SELECT tail_first_seq, json_array_length(tail_events) FROM worlds") == [(3, 2)]
    assert port.execute("SELECT 1 FROM outbox") == []
    ledger.acknowledge_outbox("w", 2)  # the admissions'
    assert ledger.prune("w", keep_ticks=1, idempotency_window_ms=0)["commands"] == 0
    events = [(e["event_seq"], e["command_id"], e["event_type"], e["occurred_at"]) for e in ledger.read_outbox("w")]
    assert events == [(3, "c-0", "applied", 10_000), (4, "c-1", "applied", 1_000)]
    ledger.acknowledge_outbox("w", 4)
    assert port.execute("SELECT tail_events FROM worlds") == [(None,)]
    clock.advance(9_000)
    assert ledger.prune("w", keep_ticks=1, idempotency_window_ms=0)["commands"] == 2  # delivered: they go
    port.close()
