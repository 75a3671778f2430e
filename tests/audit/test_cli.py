"""`archetype audit project|lag|query` as a user runs them: a real process over a real data directory;
the query's ordering and paging options through the same command in this process (click's runner),
each real process costing seconds of imports (pyiceberg) that prove nothing more about an order."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from archetype.audit.cli import audit
from archetype.commands.port import ManualClock
from archetype.runtime import Runtime
from tests.audit.conftest import populate

pytestmark = pytest.mark.timeout(600)  # ten CLI processes, each importing pyiceberg: minutes on a busy machine


def archetype(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "archetype.cli", "audit", *args], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_project_then_query_from_the_command_line(tmp_path):
    data = tmp_path / "data"
    clock = ManualClock()
    async with await Runtime.open_local(data, clock=clock, owner="runner-a") as rt:
        await populate(rt, clock)

    lag = [json.loads(line) for line in archetype("lag", "--data", str(data), "--json").splitlines()]
    assert {"world_id": "w1", "committed_seq": 5, "projected_seq": 0, "pending": 5} in lag
    table = archetype("lag", "--data", str(data))
    assert "w1 " in table and "pending" in table
    assert "appended 6 events from 2 world(s)" in archetype("project", "--data", str(data), "--batch-size", "2")
    assert [row["pending"] for row in map(json.loads, archetype("lag", "--data", str(data), "--json").splitlines())] == [0, 0]

    lines = archetype("query", "--data", str(data), "w1").splitlines()
    assert [line.split()[2:4] for line in lines] == [
        ["a", "admitted"], ["b", "admitted"], ["a", "applied"], ["b", "rejected"], ["c", "admitted"],
    ]  # fmt: skip
    assert "entity 99 does not exist" in lines[3]
    rows = [json.loads(line) for line in archetype("query", "--data", str(data), "w1", "--command-id", "b", "--tick-from",
                                                   "1", "--status", "REJECTED", "--json").splitlines()]  # fmt: skip
    assert [(r["event_id"], r["principal"], r["tick"]) for r in rows] == [("w1/4", "bob", 1)]
    assert archetype("project", "--data", str(data)).strip().endswith("appended 0 events from 0 world(s)")
    compacted = archetype("compact", "--data", str(data), "--expire-after", "0", "--keep-last", "1")
    assert "compacted 2 partition(s): 4 -> 2 files, 0 duplicate(s) removed" in compacted  # both of w1's days
    assert archetype("query", "--data", str(data), "w1").splitlines() == lines


def test_query_refuses_a_bad_range(tmp_path):
    (tmp_path / "data").mkdir()
    done = subprocess.run([sys.executable, "-m", "archetype.cli", "audit", "query", "--data", str(tmp_path / "data"), "w1",
                           "--tick-from", "5", "--tick-to", "2"], capture_output=True, text=True, timeout=180)  # fmt: skip
    assert done.returncode == 2 and "tick_from 5 is after tick_to 2" in done.stderr


def test_query_lists_newest_first_and_tails(tmp_path):
    data = tmp_path / "data"

    async def populated() -> None:
        clock = ManualClock()
        async with await Runtime.open_local(data, clock=clock, owner="runner-a") as rt:
            await populate(rt, clock)

    asyncio.run(populated())

    def in_process(*args: str) -> str:
        done = CliRunner().invoke(audit, list(args), catch_exceptions=False)
        assert done.exit_code == 0, done.output
        return done.stdout

    in_process("project", "--data", str(data))

    def events(*args: str) -> list[list[str]]:
        return [line.split()[2:4] for line in in_process("query", "--data", str(data), "w1", *args).splitlines()]

    oldest_first = [["a", "admitted"], ["b", "admitted"], ["a", "applied"], ["b", "rejected"], ["c", "admitted"]]
    assert events() == oldest_first
    assert events("--newest-first") == oldest_first[::-1]
    assert events("--newest-first", "--limit", "2") == [["c", "admitted"], ["b", "rejected"]]
    assert events("--tail", "2") == [["b", "rejected"], ["c", "admitted"]]  # the end, in the order it happened
    assert events("--tail", "2", "--newest-first") == [["c", "admitted"], ["b", "rejected"]]
    assert events("--tail", "9", "--command-id", "b") == [["b", "admitted"], ["b", "rejected"]]  # filters still apply
    assert events("--tail", "1", "--tick-to", "0") == [["a", "applied"]]
