"""`archetype serve` applies the retention policy periodically: a busy world's catalog stops
growing, a settled command leaves the ledger once its events are in the audit table (which still
answers for it), and `archetype catalog prune` does the same on demand."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from itertools import pairwise

import httpx
import pytest

from archetype.audit import AuditLog
from archetype.commands import GetAuditHistory
from archetype.world import ComponentValue
from tests.component_modules.alpha import Position
from tests.support.serve import ROOT, WAIT_S, serving

pytestmark = pytest.mark.timeout(480)  # a guard against a hang; the waits have their own deadlines
ADMIN = {"Authorization": "Bearer t-admin"}


def rows(data, table: str) -> int:
    with sqlite3.connect(data / "catalog.sqlite3") as db:
        return db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


async def test_serve_keeps_a_busy_worlds_catalog_at_a_steady_state(tmp_path):
    data = tmp_path / "data"
    with serving(tmp_path, "--keep-ticks", "20", "--idempotency-window", "0.5", "--prune-interval", "0.2") as (process, url):
        with httpx.Client(base_url=url, timeout=10) as http:
            assert http.post("/worlds", json={"name": "busy", "world_id": "b1"}, headers=ADMIN).status_code == 201
            spawn = {"type": "spawn", "tick": 0, "components": [ComponentValue.from_component(Position(x=1, y=2)).model_dump()]}
            sent = 0

            def traffic(commands: int) -> list[tuple[int, int]]:
                """Send `commands` spawns (about 20 a second), and the catalog's (commands, ticks) every tenth."""
                nonlocal sent
                sizes = []
                for _ in range(commands):
                    headers = {"Authorization": "Bearer t-player", "Idempotency-Key": f"c{sent}"}
                    assert http.post("/worlds/b1/commands", json=spawn, headers=headers).status_code == 202
                    sent += 1
                    time.sleep(0.05)
                    if sent % 10 == 0:
                        sizes.append((rows(data, "commands"), rows(data, "ticks")))
                return sizes

            # The projector's first rounds take seconds (its writer process starts, the table is
            # created; longer on a busy machine): commands pile up until retention first prunes.
            # A condition with a generous deadline, not a count of seconds.
            warming = traffic(10)
            deadline = time.monotonic() + 180
            while not any(later[0] < earlier[0] for earlier, later in pairwise(warming)):
                assert time.monotonic() < deadline, f"retention never pruned a command: {warming}"
                warming += traffic(10)
            # From then on a command stays for the window (0.5 s) plus up to a projection round and
            # a prune interval (0.2 s): the ledger holds fewer commands than the 100 sent now, where
            # without retention it would hold all of them and those before.
            steady = traffic(100)
            commands, ticks = zip(*steady, strict=True)
            assert max(commands) < 100, (warming, steady)
            assert max(ticks) <= 20 + 1 + 10, (warming, steady)  # the kept ticks, plus what one prune interval adds
            # the first command left the ledger once its trail reached the audit table ...
            assert http.get("/worlds/b1/commands/c0", headers=ADMIN).status_code == 404
        # ... and the audit table still tells its story
        audit = AuditLog.open_local(data)
        try:
            events = audit.table.history(GetAuditHistory(world_id="b1", command_id="c0"))
        finally:
            await audit.close()
        assert [e.event_type for e in events] == ["admitted", "applied"]
        process.send_signal(signal.SIGTERM)
        assert process.wait(WAIT_S) == 0, process.stderr.read()


def test_catalog_prune_on_demand_reports_what_it_removed(tmp_path):
    data = tmp_path / "data"
    subprocess.run([sys.executable, "-m", "archetype.cli", "demo", "--data", str(data), "--ticks", "6"],
                   cwd=ROOT, check=True, capture_output=True)  # fmt: skip
    ticks, commands = rows(data, "ticks"), rows(data, "commands")
    command = [sys.executable, "-m", "archetype.cli", "catalog", "prune", "--data", str(data), "--keep-ticks", "2",
               "--idempotency-window", "0", "--json"]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True)
    *worlds, total = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(worlds) == 1 and total["total"]["ticks"] == ticks - 2 == rows(data, "ticks") + ticks - 4
    assert 0 < total["total"]["commands"] == commands - rows(data, "commands")
    refused = subprocess.run([*command[:-1], "--keep-ticks", "0"], cwd=ROOT, capture_output=True, text=True)
    assert refused.returncode == 2 and refused.stderr.startswith("error: setting 'keep_ticks'")
