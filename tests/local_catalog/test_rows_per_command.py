"""What schema version 13 stores to write fewer rows per command (docs/storage.md, "Rows per
command"), held where the behaviour alone would not show a drift: the reads of open commands say
both `is_open` and the status, so a statement that set a terminal status and forgot `is_open`
would change no answer, only leave the command in the open-commands index for good."""

import sqlite3

from archetype.commands import ledger_sql
from archetype.commands.ledger import Ledger
from archetype.commands.port import ManualClock
from local_catalog import CATALOG_FILE, SqliteSqlPort, open_local_authority
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
    port = SqliteSqlPort(tmp_path / CATALOG_FILE)
    ledger = Ledger(port, ManualClock())
    ledger.create_world("w", "w")
    ledger.admit("w", [_row(i, 0) for i in range(50)])
    ledger.admit("w", [_row(50, 0)])

    def rows() -> list[tuple[int, int]]:
        return port.execute("SELECT first_seq, last_seq FROM outbox WHERE world_id = 'w' ORDER BY last_seq")

    assert rows() == [(1, 50), (51, 51)]
    events = ledger.read_outbox("w", limit=1000)
    assert [e["event_seq"] for e in events] == list(range(1, 52))
    assert [e["event_id"] for e in events[:2]] == ["w/1", "w/2"] and events[7]["command_id"] == "c-7"
    # a watermark inside a row: the row stays, its acknowledged events are not read again
    ledger.acknowledge_outbox("w", 20)
    assert rows() == [(1, 50), (51, 51)]
    assert [e["event_seq"] for e in ledger.read_outbox("w", limit=1000)] == list(range(21, 52))
    assert [e["event_seq"] for e in ledger.read_outbox("w", after_seq=40, limit=3)] == [41, 42, 43]
    ledger.acknowledge_outbox("w", 50)
    assert rows() == [(51, 51)]
    assert ledger.world_info("w")["next_event_seq"] == 52
    port.close()
