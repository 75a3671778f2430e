"""One `archetype serve` and one remote `archetype runner` (over loopback HTTP, an operator token)
split the worlds of one catalog through the runner registry (docs/ledger.md, *The runner
registry*): real processes, commands fed over HTTP; bounded (about 20 s idle).

While both live, each steps some worlds, no command is leased twice and no writer epoch moves
after the initial split. A SIGKILLed remote runner restarted at once with the same id resumes its
registration and its world leases without an epoch bump. SIGKILLed for good, its worlds are taken
over by serve once their leases expired (one epoch bump each): the restarted runner renews them
with a short lease, so that takeover waits seconds, not the first runner's minute. Every command is applied exactly once.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from archetype.runner_registry import host_of
from tests.api.conftest import TOKENS
from tests.crash import harness
from tests.crash.harness import RemoteRunner, Serve
from tests.crash.test_cooperating_runners import ADMIN, WAIT_S, catalog, hosts, settled, submit, takeovers, wait_for

pytestmark = [pytest.mark.crash, pytest.mark.timeout(600)]

WORLDS = [f"remote-{i}" for i in range(8)]
FLAGS = ("--module", "tests.server.game", "--tick-rate", "5")
SERVE_LEASE_S = 1.5
# Longer than a restart of the process takes under load (interpreter, imports; 15-25 s at a load of
# 13): the restarted runner must find its registration and world leases unexpired, so that nobody
# took them meanwhile. The longest the ledger grants (docs/ledger.md, *World leases*).
REMOTE_LEASE_S = 60.0
# The restarted runner's: it renews the resumed registration and world leases with this, and the
# takeover after its final kill waits it out. Short, yet twice serve's own lease, which the same
# load must not let lapse either.
RESTARTED_LEASE_S = 3.0


def live_runners(data: Path) -> list[str]:
    now_ms = time.time() * 1000
    return [r for r, expires_at in catalog(data, "SELECT runner_id, expires_at FROM runners ORDER BY runner_id") if expires_at > now_ms]


def feed(http: httpx.Client, label: str, rounds: int) -> None:
    for n in range(rounds):
        for world_id in WORLDS:
            submit(http, world_id, f"{label}{n}")
        time.sleep(0.05)


def test_a_serve_and_a_remote_runner_split_the_worlds_and_serve_takes_over_a_killed_ones(tmp_path: Path) -> None:
    data = tmp_path / "data"
    serve = Serve(tmp_path, data, TOKENS, "--runner-id", "runner-a", "--world-lease", str(SERVE_LEASE_S), *FLAGS)
    url = serve.wait_serving()
    remote = RemoteRunner(tmp_path, url, "t-operator", "--runner-id", "runner-r", "--world-lease", str(REMOTE_LEASE_S), *FLAGS)
    try:
        assert remote.wait_running() == {"running": "runner-r", "url": url}
        with httpx.Client(base_url=url, timeout=10) as http:
            wait_for(lambda: live_runners(data) == ["runner-a", "runner-r"], "both runners to be live in the registry")
            for world_id in WORLDS:
                assert http.post("/worlds", json={"name": world_id, "world_id": world_id}, headers=ADMIN).status_code == 201
                submit(http, world_id, "first")
            wait_for(lambda: settled(data), "the first command of every world to settle")
            split = hosts(data)
            assert {w: o for w, (o, _) in split.items()} == {w: host_of(w, ["runner-a", "runner-r"]) for w in WORLDS}
            assert {o for o, _ in split.values()} == {"runner-a", "runner-r"}, split  # each steps some
            assert {epoch for _, epoch in split.values()} == {1}, split  # each world was claimed once

            feed(http, "both", 6)
            wait_for(lambda: settled(data), "every command to settle while both runners live")
            assert hosts(data) == split, "a writer epoch moved after the initial split"
            assert takeovers(url) == 0, "a command was leased twice"

            remote.kill()  # and at once a restart with the same id: it resumes, nothing moves
            remote = RemoteRunner(tmp_path, url, "t-operator", "--runner-id", "runner-r", "--world-lease", str(RESTARTED_LEASE_S),
                                  *FLAGS)  # fmt: skip
            assert remote.wait_running()["running"] == "runner-r"
            feed(http, "restarted", 4)
            wait_for(lambda: settled(data), "every command to settle after the restart")
            assert hosts(data) == split, "the restarted runner did not resume its own world leases"

            feed(http, "last", 1)  # in flight when the remote runner dies for good
            remote.kill()
            harness.wait_for(lambda: settled(data) and {o for o, _ in hosts(data).values()} == {"runner-a"},
                             "the killed runner's worlds to be taken over and its commands to settle",
                             RESTARTED_LEASE_S + WAIT_S, every=0.05)  # fmt: skip
            after = hosts(data)
            for world_id, (owner, epoch) in split.items():
                assert after[world_id] == ("runner-a", epoch + (owner == "runner-r")), (world_id, split[world_id], after[world_id])
            statuses = catalog(data, "SELECT status, count(*) FROM commands GROUP BY status")
            assert statuses == [("APPLIED", len(WORLDS) * 12)], statuses
            for world_id in WORLDS:  # applied once each: one ship per command, no more
                state = http.get(f"/worlds/{world_id}/state", params={"limit": 100}, headers=ADMIN).json()
                assert len(state["entities"]) == 12, (world_id, state)
        assert serve.stop() == 0, serve.stderr()
    finally:
        remote.kill()
        serve.kill()
