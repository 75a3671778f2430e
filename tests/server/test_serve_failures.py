"""`archetype serve` with a processor that raises: the world turns STALLED over HTTP with the
error and its failed attempts, the retries back off (and the log says so once, not once a tick),
and SIGTERM leaves nothing LEASED."""

from __future__ import annotations

import json
import math
import re
import signal
import time

import httpx
import pytest

from archetype.world import ComponentValue
from local_catalog import open_local_authority
from tests.component_modules.alpha import Position
from tests.support.serve import WAIT_S, serving, wait_for

pytestmark = pytest.mark.timeout(240)
TICK_RATE = 20


def test_a_failing_processor_is_reported_backed_off_and_shut_down_cleanly(tmp_path):
    with serving(tmp_path, "--module", "tests.server.faulty") as (process, url):
        viewer, admin = {"Authorization": "Bearer t-viewer"}, {"Authorization": "Bearer t-admin"}
        with httpx.Client(base_url=url, timeout=10) as http:
            assert http.post("/worlds", json={"name": "hot", "world_id": "hot"}, headers=admin).status_code == 201
            spawn = {"type": "spawn", "tick": 0, "components": [ComponentValue.from_component(Position(x=1, y=1)).model_dump()]}
            headers = {"Authorization": "Bearer t-player", "Idempotency-Key": "core"}
            assert http.post("/worlds/hot/commands", json=spawn, headers=headers).status_code == 202
            health = wait_for(lambda: (h := http.get("/worlds/hot", headers=viewer).json()["health"])["status"] == "STALLED" and h,
                              "the world to stall")  # fmt: skip
            assert health["last_error"].startswith("RuntimeError: the reactor overheated at entity")
            assert health["failed_attempts"] >= 1 and health["since"] is not None
            frozen = http.get("/worlds/hot", headers=viewer).json()["tick_head"]
            world = wait_for(lambda: (w := http.get("/worlds/hot", headers=viewer).json())["health"]["failed_attempts"] >= 3
                             and w, "attempts backed off")  # fmt: skip
            stalled_ms = time.time() * 1000 - health["since"]  # the ledger's clock: the wall clock here
            assert world["tick_head"] == frozen and world["health"]["since"] == health["since"]
            # backoff doubling from 0.1 s: the n-th attempt comes 0.1 * (2^(n-1) - 1) s after the first at
            # the earliest, so a handful in these seconds, not one per tick of the tick rate (a busy
            # machine only makes them fewer)
            attempts = world["health"]["failed_attempts"]
            assert attempts <= 2 + math.log2(stalled_ms / 100 + 1) < TICK_RATE * stalled_ms / 1000, (attempts, stalled_ms)
            # the stepping process's metrics reach /metrics with its next report (a second; later when busy)
            wait_for(lambda: "archetype_worlds_stalled 1.0" in http.get("/metrics", headers=viewer).text, "the stalled gauge")
            record = http.get("/worlds/hot/commands/core", headers={"Authorization": "Bearer t-player"}).json()
            assert (record["status"], record["attempts"]) == ("PENDING", 0)  # innocent: neither charged nor held

            # the audit projection has it too: one health event, not one per attempt
            def audited():
                page = http.get("/worlds/hot/audit", headers={"Authorization": "Bearer t-operator"}).json()
                return page["events"] if len(page["events"]) == 2 else None

            events = wait_for(audited, "the audit projection to catch up")
            assert [(e["command_id"], e["event_type"], e["status"]) for e in events] == [
                ("core", "admitted", "PENDING"), ("", "world_stalled", "STALLED")]
            assert json.loads(events[1]["payload"])["error"] == health["last_error"]

        process.send_signal(signal.SIGTERM)
        assert process.wait(WAIT_S) == 0
        stderr = process.stderr.read()
        assert json.loads(process.stdout.read().strip().splitlines()[-1]) == {"stopped": True}

    assert stderr.count("Traceback") == 1, stderr  # the first failure, with its traceback; then one line per 30 s
    assert re.search(rf"world hot: tick {frozen + 1} failed; retrying in 0.1 s \(logging at most every 30 s\): "
                     r"RuntimeError: the reactor overheated at entity \d+\n", stderr), stderr
    ledger = open_local_authority(tmp_path / "data").ledger
    assert {c["status"] for c in ledger.history("hot")} == {"PENDING"}  # nothing LEASED after SIGTERM
    info = ledger.world_info("hot")
    assert info["health"] == "STALLED" and info["failed_attempts"] >= attempts and info["tick_head"] == frozen
