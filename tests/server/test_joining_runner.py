"""A runner that joins takes its share of the idle worlds at once (docs/cli.md, *Cooperating
runners*): two real `archetype serve` processes on one data directory. The first hosts every world
(each applied a command, so it holds them all, loaded); the second joins and, with no command sent,
the worlds' leases split as `host_of` says within a few passes: one epoch bump per moved world,
none for the others, nothing loaded or ticked by the move; the next command of a moved world is
applied by its new host with no further bump and no command leased twice."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from archetype.runner_registry import host_of
from tests.api.conftest import TOKENS
from tests.crash.harness import Serve, wait_for
from tests.crash.test_cooperating_runners import ADMIN, WAIT_S, catalog, settled, submit, takeovers

pytestmark = pytest.mark.timeout(180)

WORLDS = [f"join-{i}" for i in range(12)]
RUNNERS = ["runner-a", "runner-b"]
LEASE_S = 3.0
FLAGS = ("--module", "tests.component_modules.alpha", "--world-lease", str(LEASE_S))  # components, no processor: idle worlds


def worlds(data: Path) -> dict[str, tuple[str | None, int, int]]:
    found = catalog(data, "SELECT world_id, host_owner, writer_epoch, tick_head FROM worlds")
    return {world_id: (owner, epoch, head) for world_id, owner, epoch, head in found}


def test_a_joining_runner_takes_its_share_of_the_idle_worlds_with_no_command_sent(tmp_path: Path) -> None:
    data = tmp_path / "data"
    a = Serve(tmp_path, data, TOKENS, "--runner-id", "runner-a", *FLAGS)
    b: Serve | None = None
    try:
        a_url = a.wait_serving()
        with httpx.Client(base_url=a_url, timeout=10) as http:
            for world_id in WORLDS:
                assert http.post("/worlds", json={"name": world_id, "world_id": world_id}, headers=ADMIN).status_code == 201
                submit(http, world_id, "first")
            wait_for(lambda: settled(data), "runner-a to apply every first command", WAIT_S)
            before = worlds(data)
            assert {owner for owner, _, _ in before.values()} == {"runner-a"}  # it hosts them all
            idle_since = {w: head for w, (_, _, head) in before.items()}

            b = Serve(tmp_path, data, TOKENS, "--runner-id", "runner-b", *FLAGS)
            b_url = b.wait_serving()
            joined = time.monotonic()
            split = {w: host_of(w, RUNNERS) for w in WORLDS}
            assert "runner-a" in split.values() and "runner-b" in split.values()
            # how soon is printed below: a lease on a quiet machine, longer on a busy one
            wait_for(lambda: all(worlds(data)[w][0] == host for w, host in split.items()), "the idle worlds to split",
                     WAIT_S, every=0.05)  # fmt: skip
            moved_in_s = time.monotonic() - joined
            after = worlds(data)
            for world_id, host in split.items():
                owner, epoch, head = after[world_id]
                assert epoch == before[world_id][1] + (host == "runner-b"), (world_id, before[world_id], after[world_id])
                assert head == idle_since[world_id]  # moved, not ticked
            assert settled(data)

            for world_id in WORLDS:  # their next commands, admitted by runner-a's front door
                submit(http, world_id, "second")
            wait_for(lambda: settled(data), "every second command to be applied", WAIT_S)
            final = worlds(data)
            for world_id, host in split.items():  # applied by the new host, with no further bump
                assert final[world_id][:2] == (host, after[world_id][1]), (world_id, after[world_id], final[world_id])
            assert takeovers(a_url) == 0 and takeovers(b_url) == 0  # no command leased twice
            print(f"idle worlds split {moved_in_s:.2f} s after runner-b was serving")
        assert b.stop() == 0
        assert a.stop() == 0
    finally:
        for serve in (a, b):
            if serve is not None:
                serve.kill()
