"""Two `archetype serve` processes on one data directory split its worlds under world leases
(docs/ledger.md, *World leases*), and the survivor takes over a SIGKILLed runner's worlds once
their leases expired. Real processes, commands fed over HTTP to both; bounded (about 20 s).

While both live: no command is leased twice (`archetype_lease_takeovers_total` is 0 on both) and
no writer epoch moves after the initial split. After the kill: the dead runner's worlds move to the
survivor with exactly one epoch bump each (the worlds have processors, so even those with nothing
due move, at the survivor's next sweep), and every command is settled exactly once.
"""

from __future__ import annotations

import re
import sqlite3
import time
from contextlib import closing
from pathlib import Path

import httpx
import pytest

from archetype.world import ComponentValue
from tests.api.conftest import TOKENS
from tests.component_modules.alpha import Position, Velocity
from tests.crash.harness import Serve

pytestmark = [pytest.mark.crash, pytest.mark.timeout(400)]

WORLDS = [f"coop-{i}" for i in range(8)]
LEASE_S = 1.5
WAIT_S = 60.0
ADMIN = {"Authorization": "Bearer t-admin"}
SHIP = [ComponentValue.from_component(c).model_dump() for c in (Position(x=0, y=0), Velocity(dx=1, dy=0))]


def catalog(data: Path, sql: str) -> list[tuple]:
    with closing(sqlite3.connect(f"file:{data / 'catalog.sqlite3'}?mode=ro", uri=True, timeout=30)) as db:
        return db.execute(sql).fetchall()


def hosts(data: Path) -> dict[str, tuple[str | None, int]]:
    return {w: (owner, epoch) for w, owner, epoch in catalog(data, "SELECT world_id, host_owner, writer_epoch FROM worlds")}


def takeovers(url: str) -> float:
    text = httpx.get(f"{url}/metrics", headers=ADMIN, timeout=10).text
    return sum(float(v) for v in re.findall(r"^archetype_lease_takeovers_total (\S+)$", text, re.M))


def wait_for(predicate, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def settled(data: Path) -> bool:
    return not catalog(data, "SELECT 1 FROM commands WHERE status IN ('PENDING', 'LEASED', 'RETRYABLE') LIMIT 1")


def submit(http: httpx.Client, world_id: str, key: str) -> None:
    answer = http.post(f"/worlds/{world_id}/commands", json={"type": "spawn", "tick": 0, "components": SHIP},
                       headers={**ADMIN, "Idempotency-Key": key})  # fmt: skip
    assert answer.status_code == 202, answer.text


def test_two_runners_split_the_worlds_and_the_survivor_takes_over_a_killed_ones(tmp_path: Path) -> None:
    data = tmp_path / "data"
    flags = ("--module", "tests.server.game", "--world-lease", str(LEASE_S))
    a = Serve(tmp_path, data, TOKENS, "--runner-id", "runner-a", *flags)
    a_url = a.wait_serving()
    b = Serve(tmp_path, data, TOKENS, "--runner-id", "runner-b", *flags)
    try:
        b_url = b.wait_serving()
        with httpx.Client(base_url=a_url, timeout=10) as http_a, httpx.Client(base_url=b_url, timeout=10) as http_b:
            for world_id in WORLDS:
                assert http_a.post("/worlds", json={"name": world_id, "world_id": world_id}, headers=ADMIN).status_code == 201
                submit(http_b, world_id, "first")
            wait_for(lambda: settled(data), "the first command of every world to settle")
            split = hosts(data)
            owners = {owner for owner, _ in split.values()}
            assert owners == {"runner-a", "runner-b"}, split  # both took a share
            assert {epoch for _, epoch in split.values()} == {1}, split  # each world was claimed once

            for n in range(10):  # both live: commands through both front doors, to every world
                for i, world_id in enumerate(WORLDS):
                    submit(http_a if (n + i) % 2 else http_b, world_id, f"c{n}")
                time.sleep(0.05)
            wait_for(lambda: settled(data), "every command to settle while both runners live")
            assert hosts(data) == split, "a writer epoch moved after the initial split"
            assert takeovers(a_url) == takeovers(b_url) == 0, "a command was leased twice"

            for world_id in WORLDS:  # in flight when runner-b dies
                submit(http_a, world_id, "last")
            b.kill()
            wait_for(lambda: settled(data) and {o for o, _ in hosts(data).values()} == {"runner-a"},
                     "the killed runner's worlds to be taken over and its commands to settle")  # fmt: skip
            after = hosts(data)
            for world_id, (owner, epoch) in split.items():
                moved = owner == "runner-b"
                assert after[world_id] == ("runner-a", epoch + moved), (world_id, split[world_id], after[world_id])
            statuses = catalog(data, "SELECT status, count(*) FROM commands GROUP BY status")
            assert statuses == [("APPLIED", len(WORLDS) * 12)], statuses
            for world_id in WORLDS:  # applied once each: one ship per command, no more
                state = http_a.get(f"/worlds/{world_id}/state", params={"limit": 100}, headers=ADMIN).json()
                assert len(state["entities"]) == 12, (world_id, state)
            print(f"split {sorted(o for o, _ in split.values())}; taken over after the kill: {takeovers(a_url):.0f} commands")
        assert a.stop() == 0, a.stderr()
    finally:
        a.kill()
        b.kill()
