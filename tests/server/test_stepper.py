"""`archetype serve`'s two processes (archetype.stepper), as real processes: the stepping process
SIGKILLed (restarted, every command applied exactly once), SIGSTOPped (hung: killed and restarted,
every command applied exactly once) or held by a long processor (not a hang: left running), the
serve process SIGKILLed (the stepping process stops by itself), a stepping process that cannot
start (serve exits 3, one line)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import httpx
import pytest

from archetype.stepper import METRICS_EVERY_S
from archetype.world import ComponentValue
from local_catalog import open_local_authority
from tests.api.conftest import TOKENS
from tests.component_modules.alpha import Position, Velocity
from tests.support.serve import ROOT, WAIT_S, serving, wait_for

pytestmark = pytest.mark.timeout(240)
ADMIN, PLAYER = {"Authorization": "Bearer t-admin"}, {"Authorization": "Bearer t-player"}
SHIP = [ComponentValue.from_component(c).model_dump() for c in (Position(x=0, y=0), Velocity(dx=1, dy=0))]


def children(pid: int) -> list[int]:
    """The live processes whose parent is `pid` (from /proc: no dependency for one look-up)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"
    except OSError:
        return False


def statuses(data: Path) -> dict[str, str]:
    with closing(sqlite3.connect(f"file:{data}/catalog.sqlite3?mode=ro", uri=True, timeout=30)) as conn:
        return dict(conn.execute("SELECT command_id, status FROM commands WHERE world_id = 'w'"))


def submit(http: httpx.Client, key: str) -> None:
    answer = http.post("/worlds/w/commands", json={"type": "spawn", "tick": 0, "components": SHIP},
                       headers={**PLAYER, "Idempotency-Key": key})  # fmt: skip
    assert answer.status_code == 202, answer.text


def test_a_killed_stepping_process_is_restarted_and_every_command_applies_once(tmp_path):
    with serving(tmp_path) as (process, url):
        (stepper,) = children(process.pid)
        with httpx.Client(base_url=url, timeout=10) as http:
            assert http.post("/worlds", json={"name": "w", "world_id": "w"}, headers=ADMIN).status_code == 201
            for n in range(20):
                submit(http, f"before-{n}")
            os.kill(stepper, signal.SIGKILL)
            for n in range(20):  # while it is dead or restarting: HTTP admits all the same
                submit(http, f"after-{n}")
                assert http.get("/health").status_code == 200

            def settled():
                found = statuses(tmp_path / "data")
                return found if len(found) == 40 and set(found.values()) == {"APPLIED"} else None

            wait_for(settled, "every command to be applied by the restarted stepping process")
            (restarted,) = children(process.pid)
            assert restarted != stepper
            state = http.get("/worlds/w/state", params={"limit": 100}, headers=ADMIN).json()
            assert len(state["entities"]) == 40  # one ship per command: none applied twice
        process.send_signal(signal.SIGTERM)
        assert process.wait(WAIT_S) == 0
        _, logs = process.communicate()
        assert f"the stepping process (pid {stepper}) exited (killed by SIGKILL); starting another" in logs
        assert not alive(restarted)


HANG_S = 3.0


def test_a_hung_stepping_process_is_killed_and_restarted_and_every_command_applies_once(tmp_path):
    with serving(tmp_path, "--hang-timeout", str(HANG_S)) as (process, url):
        (stepper,) = children(process.pid)
        with httpx.Client(base_url=url, timeout=10) as http:
            assert http.post("/worlds", json={"name": "w", "world_id": "w"}, headers=ADMIN).status_code == 201
            for n in range(20):
                submit(http, f"before-{n}")
            wait_for(lambda: set(statuses(tmp_path / "data").values()) == {"APPLIED"}, "the first commands to apply")
            os.kill(stepper, signal.SIGSTOP)  # alive, its channel open, silent
            stopped_at = time.monotonic()
            for n in range(20):  # while it is hung: HTTP admits all the same
                submit(http, f"during-{n}")
            restarted = wait_for(lambda: [p for p in children(process.pid) if p != stepper], "a new stepping process")
            replaced_in_s = time.monotonic() - stopped_at
            # not before it was silent for the setting (its last beat came at most a beat before the
            # stop); how soon after is the machine's load, printed below, not asserted
            assert replaced_in_s >= HANG_S - METRICS_EVERY_S
            assert not alive(stepper)

            def settled():
                found = statuses(tmp_path / "data")
                return found if len(found) == 40 and set(found.values()) == {"APPLIED"} else None

            wait_for(settled, "every command to be applied by the restarted stepping process")
            state = http.get("/worlds/w/state", params={"limit": 100}, headers=ADMIN).json()
            assert len(state["entities"]) == 40  # one ship per command: none applied twice
        process.send_signal(signal.SIGTERM)
        assert process.wait(WAIT_S) == 0
        _, logs = process.communicate()
        line = f"the stepping process (pid {stepper}) sent nothing for {HANG_S:.1f} s: hung; killed it (SIGKILL), starting another"
        assert logs.count(line) == 1, logs
        assert f"(pid {stepper}) exited" not in logs  # one line for the hang, not a second for its death
        assert not any(alive(pid) for pid in restarted)
        print(f"hung stepping process replaced {replaced_in_s:.2f} s after SIGSTOP (--hang-timeout {HANG_S:g})")


def test_a_processor_holding_the_loop_longer_than_the_hang_timeout_is_not_a_hang(tmp_path):
    from tests.server.blocking import BLOCK_S, LONG_TICK_HANG_S

    # a wider timeout than the hang test's: on a loaded machine (load 7) the stepping process once went
    # 3 s without a heartbeat before the long tick began, and was taken for hung
    with serving(tmp_path, "--hang-timeout", str(LONG_TICK_HANG_S), "--module", "tests.server.blocking") as (process, url):
        (stepper,) = children(process.pid)
        with httpx.Client(base_url=url, timeout=10) as http:
            assert http.post("/worlds", json={"name": "w", "world_id": "w"}, headers=ADMIN).status_code == 201
            submit(http, "ship")  # its first tick with a Position holds the loop BLOCK_S seconds
            started = time.monotonic()
            wait_for(lambda: statuses(tmp_path / "data").get("ship") == "APPLIED", "the long tick to publish")

            def moved():
                (entity,) = http.get("/worlds/w/state", headers=ADMIN).json()["entities"]
                return next(c for c in entity["components"] if c["name"] == "Position")["data"]["x"] >= 2

            wait_for(moved, "the ship to move on after the long tick")
            assert time.monotonic() - started >= BLOCK_S - 1
            assert children(process.pid) == [stepper]  # never taken for hung
        process.send_signal(signal.SIGTERM)
        assert process.wait(WAIT_S) == 0
        _, logs = process.communicate()
        assert "hung" not in logs and "exited" not in logs, logs
        assert "the event loop of the stepping process has not run for" in logs, logs
        assert "the event loop of the stepping process runs again, after" in logs, logs


def test_the_stepping_process_stops_by_itself_when_serve_is_killed(tmp_path):
    with serving(tmp_path) as (process, url):
        (stepper,) = children(process.pid)
        with httpx.Client(base_url=url, timeout=10) as http:
            assert http.post("/worlds", json={"name": "w", "world_id": "w"}, headers=ADMIN).status_code == 201
            submit(http, "ship")
            later = {"type": "despawn", "tick": 10**9, "entity_id": 1}
            assert http.post("/worlds/w/commands", json=later, headers={**PLAYER, "Idempotency-Key": "later"}).status_code == 202
            wait_for(lambda: statuses(tmp_path / "data").get("ship") == "APPLIED", "the spawn to be applied")
        process.kill()
        process.wait(WAIT_S)
        wait_for(lambda: not alive(stepper), "the orphaned stepping process to exit")
        # it stopped as on SIGTERM: nothing left leased, its world lease given back
        assert statuses(tmp_path / "data") == {"ship": "APPLIED", "later": "PENDING"}
        with closing(sqlite3.connect(f"file:{tmp_path}/data/catalog.sqlite3?mode=ro", uri=True, timeout=30)) as conn:
            (expires,) = conn.execute("SELECT host_expires_at FROM worlds WHERE world_id = 'w'").fetchone()
        assert expires is None or expires <= time.time() * 1000  # released, not left to expire


def test_a_stepping_process_that_cannot_start_stops_serve_with_one_line(tmp_path):
    # setup(runtime) runs in the stepping process only: serve's own checks pass, every start fails
    (tmp_path / "unsteppable.py").write_text("def setup(runtime):\n    raise RuntimeError('no reactor')\n")
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps(TOKENS))
    command = [sys.executable, "-m", "archetype.cli", "serve", "--data", str(tmp_path / "data"), "--port", "0",
               "--tokens", str(tokens), "--module", "unsteppable"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, logs = process.communicate(timeout=90)  # three starts of a process importing the whole API
    assert process.returncode == 3, logs
    assert out == ""  # never "serving"
    assert logs.strip().splitlines()[-1] == (
        "error: the stepping process exited (exit code 1) before it was ready, 3 times in a row; serve stopped (the lines "
        "above say why)"
    ), logs
    assert logs.count("RuntimeError: no reactor") == 3  # each start's own reason, above the line


def test_a_runner_id_live_in_the_registry_elsewhere_stops_serve_with_one_line(tmp_path):
    # a remote runner holds the id: no lock file of this data directory says so, the registry does
    data = tmp_path / "data"
    data.mkdir()

    async def register_elsewhere() -> None:
        catalog = open_local_authority(data)
        try:
            await catalog.register_runner("r-taken", "runner@another-host", 60_000)
        finally:
            await catalog.close()

    asyncio.run(register_elsewhere())
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps(TOKENS))
    command = [sys.executable, "-m", "archetype.cli", "serve", "--data", str(data), "--port", "0",
               "--tokens", str(tokens), "--runner-id", "r-taken"]  # fmt: skip
    process = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=90)
    assert process.returncode == 2, process.stderr
    assert process.stdout == ""  # never "serving"
    (line,) = process.stderr.strip().splitlines()
    assert line.startswith("error: runner id 'r-taken' is held by 'runner@another-host' until "), line
    assert line.endswith("; give this runner another --runner-id"), line
