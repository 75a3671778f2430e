"""`archetype serve` with a processor that is broken, then fixed: the world waits out its backoff
until an operator asks to retry it now (`archetype worlds retry`), and then recovers at once; both
the runner's taking the request and the recovery are logged at serve's default level (warning), as
docs/guide/failures.md promises."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys

import httpx
import pytest

from archetype.world import ComponentValue
from tests.component_modules.alpha import Position
from tests.support.serve import ROOT, WAIT_S, serving, wait_for

pytestmark = pytest.mark.timeout(120)
VIEWER = {"Authorization": "Bearer t-viewer"}
# a backoff of 6.4 s at least after 7 failed attempts (0.1 s doubling): time for the request to be
# seen first (a runner asks the ledger every second), even on a busy machine
ATTEMPTS = 7


def test_a_stalled_world_is_retried_when_an_operator_asks_and_the_recovery_is_logged(tmp_path, monkeypatch):
    broken = tmp_path / "broken"
    broken.touch()
    monkeypatch.setenv("ARCHETYPE_TEST_BROKEN", str(broken))
    with serving(tmp_path, "--module", "tests.server.fixable") as (process, url):  # the default --log-level
        with httpx.Client(base_url=url, timeout=10) as http:
            admin = {"Authorization": "Bearer t-admin"}
            assert http.post("/worlds", json={"name": "hot", "world_id": "hot"}, headers=admin).status_code == 201
            spawn = {"type": "spawn", "tick": 0, "components": [ComponentValue.from_component(Position(x=1, y=1)).model_dump()]}
            headers = {"Authorization": "Bearer t-player", "Idempotency-Key": "core"}
            assert http.post("/worlds/hot/commands", json=spawn, headers=headers).status_code == 202
            wait_for(lambda: http.get("/worlds/hot", headers=VIEWER).json()["health"]["failed_attempts"] >= ATTEMPTS,
                     f"{ATTEMPTS} failed attempts")  # fmt: skip
            broken.unlink()  # the fix is deployed; the runner would wait out the backoff
            retried = subprocess.run([sys.executable, "-m", "archetype.cli", "worlds", "retry", "hot", "--json", "--url", url,
                                      "--token", "t-operator"], capture_output=True, text=True, timeout=60, cwd=ROOT)  # fmt: skip
            assert retried.returncode == 0, retried.stderr
            assert json.loads(retried.stdout)["health"]["failed_attempts"] == 0
            health = wait_for(lambda: (h := http.get("/worlds/hot", headers=VIEWER).json()["health"])["status"] == "ACTIVE" and h,
                              "the world to recover")  # fmt: skip
            assert health["failed_attempts"] == 0
            assert http.get("/worlds/hot/commands/core", headers={"Authorization": "Bearer t-player"}).json()["status"] == "APPLIED"
        process.send_signal(signal.SIGTERM)
        assert process.wait(WAIT_S) == 0
        stderr = process.stderr.read()
    asked = [line for line in stderr.splitlines() if "world hot: retrying now, as an operator asked" in line]
    assert len(asked) == 1, stderr  # the runner took the request, not the backoff's end
    (recovered,) = [line for line in stderr.splitlines() if "world hot: recovered: tick" in line]
    failures = re.search(r"published after (\d+) failed attempts$", recovered)
    assert failures and int(failures.group(1)) >= ATTEMPTS, recovered  # the streak's failures, all of them
