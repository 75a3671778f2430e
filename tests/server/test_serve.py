"""`archetype serve` as a real process on loopback: admit over HTTP, see it applied, stop cleanly."""

from __future__ import annotations

import json
import os
import signal
import sys

import httpx
import pytest

from archetype.world import ComponentValue
from local_catalog import open_local_authority
from tests.component_modules.alpha import Position, Velocity
from tests.support.serve import WAIT_S, running, serving, wait_for

pytestmark = pytest.mark.timeout(240)  # a guard against a hang; waits inside have their own generous deadlines


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serve_applies_http_commands_and_stops_cleanly(tmp_path, stop_signal):
    with serving(tmp_path) as (process, url):
        assert url.startswith("http://127.0.0.1:")
        admin = {"Authorization": "Bearer t-admin"}
        player = {"Authorization": "Bearer t-player"}
        with httpx.Client(base_url=url, timeout=10) as http:
            assert http.get("/health").json() == {"status": "ok"}
            assert http.post("/worlds", json={"name": "served", "world_id": "s1"}, headers=admin).status_code == 201
            ship = [ComponentValue.from_component(c).model_dump() for c in (Position(x=3, y=4), Velocity(dx=1, dy=0))]
            spawn = {"type": "spawn", "tick": 0, "components": ship}
            accepted = http.post("/worlds/s1/commands", json=spawn, headers={**player, "Idempotency-Key": "ship"})
            assert accepted.status_code == 202, accepted.text
            entity = accepted.json()["entity_id"]

            def applied():
                record = http.get("/worlds/s1/commands/ship", headers=player).json()
                return record if record["status"] == "APPLIED" else None

            record = wait_for(applied, "the spawn to be applied")
            assert record["reserved_entity_id"] == entity and record["principal"] == "pat"
            ticking = http.get("/worlds/s1", headers=player).json()["tick_head"]
            wait_for(lambda: http.get("/worlds/s1", headers=player).json()["tick_head"] > ticking + 2, "the world to keep ticking")
            # a command far in the future stays open: a clean stop must leave it PENDING, not LEASED
            later = {"type": "despawn", "tick": 10**9, "entity_id": entity}
            assert http.post("/worlds/s1/commands", json=later, headers={**player, "Idempotency-Key": "later"}).status_code == 202

        process.send_signal(stop_signal)
        assert process.wait(WAIT_S) == 0, process.stderr.read()
        assert json.loads(process.stdout.read().strip().splitlines()[-1]) == {"stopped": True}

    ledger = open_local_authority(tmp_path / "data").ledger
    world = ledger.world_info("s1")
    manifests = ledger.manifests("s1", limit=10_000)
    # a lockstep world (the default) publishes every tick, however loaded the machine; a realtime
    # one would skip the ticks its runner was late for (docs/ledger.md, "Tick modes")
    assert world["tick_mode"] == "lockstep" and [m["tick"] for m in manifests] == list(range(world["tick_head"] + 1))
    statuses = {c["command_id"]: c["status"] for c in ledger.history("s1")}
    assert statuses == {"ship": "APPLIED", "later": "PENDING"}
    assert [s["command_id"] for s in manifests[record["applied_tick"]]["settlements"]] == ["ship"]
    (page_entity,) = ledger.load_state("s1")["entities"]
    assert page_entity["entity_id"] == entity
    # the module's processor moved the ship once in every tick since (and including) its spawn
    moves = world["tick_head"] - record["applied_tick"] + 1
    assert {c["name"]: c["data"] for c in json.loads(page_entity["components"])} == {
        "Position": {"x": 3.0 + moves, "y": 4.0}, "Velocity": {"dx": 1.0, "dy": 0.0}
    }


def test_serve_without_a_token_table_prints_one_admin_token(tmp_path):
    command = [sys.executable, "-m", "archetype.cli", "serve", "--data", str(tmp_path / "data"), "--port", "0"]
    env = {k: v for k, v in os.environ.items() if k != "ARCHETYPE_TOKENS"}
    with running(command, env) as process:
        token = process.stderr.readline().rsplit(" ", 1)[-1].strip()
        url = json.loads(process.stdout.readline())["serving"]
        with httpx.Client(base_url=url, timeout=10) as http:
            assert http.get("/worlds/x", headers={"Authorization": "Bearer guess"}).status_code == 401
            assert http.get("/worlds/x", headers={"Authorization": f"Bearer {token}"}).json()["code"] == "world_not_found"
        process.terminate()
        assert process.wait(WAIT_S) == 0
