"""The shortest event a settlement can have (ledger_sql.EVENT_CHARS_MIN): the ledger offers a
publication's events to the world row's tail only when that many of them may fit there, so a bound
that is too high would send events that fit to an outbox row of their own."""

import sqlite3

import pytest

from archetype.commands import ledger_sql as q

# every column command_events reads, each as short as it can be (shorter than any command has:
# a one-character id, an empty operation and origin)
SHORTEST = {"world_id": "", "sequence": 1, "command_id": "x", "redriven_from": None, "operation": "",
            "applied_tick": 0, "scheduled_tick": 0, "principal": None, "origin": "", "attempts": 0, "max_attempts": 1,
            "last_error": None}  # fmt: skip


@pytest.mark.parametrize("status", ["APPLIED", "REJECTED", "RETRYABLE", "DEAD_LETTER"])
def test_no_settlement_event_is_shorter_than_the_bound(status):
    conn = sqlite3.connect(":memory:")
    conn.execute(f"CREATE TABLE commands ({', '.join(SHORTEST)}, status)")
    conn.execute(f"INSERT INTO commands VALUES ({', '.join('?' * (len(SHORTEST) + 1))})", (*SHORTEST.values(), status))
    sql = q.command_events(first="1", at="0", sequences="'[1]'", world="''", asked_by="NULL")
    ((events,),) = conn.execute(f"SELECT events FROM ({sql})").fetchall()
    assert len(events) - len("[]") >= q.EVENT_CHARS_MIN, events
    conn.close()
