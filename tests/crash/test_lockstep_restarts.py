"""Lockstep worlds never skip a tick across real restarts and crashes (docs/ledger.md, *Tick
modes*): a property test over plans that hypothesis draws of `archetype serve` restarted (SIGTERM)
and SIGKILLed, its stepping process SIGKILLed (serve starts another), a remote `archetype runner`
SIGKILLed and restarted, slow processors, and commands scheduled ticks ahead, all while serve and
the remote runner split four lockstep worlds. Real processes, real time; a few plans (about a
minute each at most).

For every world, once its commands ran: its manifests are every tick from 0 to its head; its
processor ran exactly once in each (a counter it keeps equals the ticks since the counter's spawn);
every command ran in its tick or, admitted after that tick had run, later; and no tick was published
before its time (tick `t` not before `created_at + (t + 1) * interval`: the interval paces, a restart
never runs ahead of the clock). The in-process version of the property, with the catch-up bounds a
ManualClock makes exact, is tests/server/test_lockstep_property.py.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from archetype.world import ComponentValue
from tests.api.conftest import TOKENS
from tests.crash.harness import LedgerDump, RemoteRunner, Serve, wait_for
from tests.crash.test_cooperating_runners import ADMIN, catalog
from tests.server.lockstep_sim import Count, Marker, Work

pytestmark = [pytest.mark.crash, pytest.mark.timeout(900)]

WORLDS = [f"sim-{i}" for i in range(4)]
INTERVAL_MS = 50
FLAGS = ("--module", "tests.server.lockstep_sim", "--tick-rate", "20", "--world-lease", "2")
SETTLE_S = 60.0

EVENTS = st.one_of(
    st.tuples(st.just("wait"), st.sampled_from((0.2, 0.5, 1.0))),
    st.tuples(st.just("slow"), st.integers(0, len(WORLDS) - 1), st.sampled_from((0, 40, 120))),
    st.tuples(st.just("marker"), st.integers(0, len(WORLDS) - 1), st.integers(0, 30)),
    st.tuples(st.just("kill_stepper")),
    st.tuples(st.just("kill_runner")),
    st.tuples(st.just("restart_serve")),
    st.tuples(st.just("kill_serve")),
)


def values(*components: Any) -> list[dict[str, Any]]:
    return [ComponentValue.from_component(c).model_dump() for c in components]


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux /proc): serve's stepping process."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


class Deployment:
    """serve (runner-a) and a remote runner (runner-r) on one data directory."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.data = tmp, tmp / "data"
        self.serve: Serve | None = None
        self.remote: RemoteRunner | None = None

    def start_serve(self) -> str:
        self.serve = Serve(self.tmp, self.data, TOKENS, "--runner-id", "runner-a", *FLAGS)
        return self.serve.wait_serving()

    def start_remote(self) -> None:
        assert self.serve is not None and self.serve.url is not None
        self.remote = RemoteRunner(self.tmp, self.serve.url, "t-operator", "--runner-id", "runner-r", *FLAGS)
        assert self.remote.wait_running()["running"] == "runner-r"

    def stepper(self) -> int:
        assert self.serve is not None
        return wait_for(lambda: (children(self.serve.popen.pid) or [None])[0], "serve's stepping process", 30)

    def stop_serve(self, sig: signal.Signals) -> None:
        """Stop serve (and so its stepping process) and the remote runner, which follows serve's URL."""
        assert self.serve is not None and self.remote is not None
        self.remote.kill()
        stepper = self.stepper()
        if sig == signal.SIGKILL:
            self.serve.kill()
        else:
            assert self.serve.stop(timeout=60) == 0, self.serve.stderr()[-4000:]
        wait_for(lambda: gone(stepper), "the stepping process to stop with serve", 30)

    def close(self) -> None:
        """Kill both, and wait for serve's stepping process to go with serve: the checks read the
        ledger next, and a tick published meanwhile would fall between their reads."""
        steppers = [] if self.serve is None else children(self.serve.popen.pid)
        for process in (self.remote, self.serve):
            if process is not None:
                process.kill()
        wait_for(lambda: all(gone(pid) for pid in steppers), "the stepping process to stop with serve", 30)


# every kind of event once, then what hypothesis draws
EVERY_EVENT = [("slow", 1, 120), ("marker", 1, 25), ("kill_stepper",), ("marker", 0, 3), ("kill_runner",), ("wait", 0.5),
               ("restart_serve",), ("slow", 0, 0), ("kill_serve",), ("marker", 2, 10)]  # fmt: skip


@settings(max_examples=2, deadline=None, phases=[Phase.explicit, Phase.generate], database=None)
@example(plan=EVERY_EVENT)
@given(plan=st.lists(EVENTS, min_size=4, max_size=8))
def test_lockstep_worlds_skip_no_tick_across_restarts_crashes_and_slow_processors(tmp_path_factory, plan):
    tmp = tmp_path_factory.mktemp("lockstep")
    print(f"plan: {json.dumps(plan)}")
    deployment = Deployment(tmp)
    try:
        url = deployment.start_serve()
        deployment.start_remote()
        counters: dict[str, int] = {}
        markers: dict[tuple[str, str], int] = {}  # (world, command id) -> scheduled tick
        with httpx.Client(base_url=url, timeout=30) as http:
            for world_id in WORLDS:
                made = http.post("/worlds", json={"name": world_id, "world_id": world_id, "tick_interval_ms": INTERVAL_MS},
                                 headers=ADMIN)  # fmt: skip
                assert made.status_code == 201 and made.json()["tick_mode"] == "lockstep", made.text
                spawned = http.post(f"/worlds/{world_id}/commands", headers={**ADMIN, "Idempotency-Key": "counter"},
                                    json={"type": "spawn", "tick": 0, "components": values(Count(n=0), Work(ms=0))})  # fmt: skip
                assert spawned.status_code == 202, spawned.text
                counters[world_id] = spawned.json()["entity_id"]
        for n, event in enumerate(plan):
            url = run(deployment, event, n, counters, markers)
        wait_for(lambda: not catalog(deployment.data, "SELECT 1 FROM commands WHERE status IN ('PENDING', 'LEASED', 'RETRYABLE')"),
                 "every command to run", SETTLE_S, every=0.1)  # fmt: skip
    finally:
        deployment.close()
    for world_id in WORLDS:
        check(deployment.data, world_id, counters[world_id], {c: t for (w, c), t in markers.items() if w == world_id})


def run(deployment: Deployment, event: tuple, n: int, counters: dict[str, int], markers: dict[tuple[str, str], int]) -> str:
    """Carry out one event of the plan; answer serve's URL (a restarted serve has another port)."""
    assert deployment.serve is not None and deployment.serve.url is not None
    url = deployment.serve.url
    kind = event[0]
    if kind == "wait":
        time.sleep(event[1])
    elif kind in ("slow", "marker"):
        world_id = WORLDS[event[1]]
        with httpx.Client(base_url=url, timeout=30) as http:
            head = http.get(f"/worlds/{world_id}", headers=ADMIN).json()["tick_head"]
            if kind == "slow":
                body = {"type": "update", "tick": head + 1, "entity_id": counters[world_id], "components": values(Work(ms=event[2]))}
            else:
                body = {"type": "spawn", "tick": head + event[2], "components": values(Marker(label=n))}
            answer = http.post(f"/worlds/{world_id}/commands", json=body, headers={**ADMIN, "Idempotency-Key": f"e{n}"})
            assert answer.status_code == 202, answer.text
            if kind == "marker":
                markers[(world_id, f"e{n}")] = head + event[2]
    elif kind == "kill_stepper":
        stepper = deployment.stepper()
        os.kill(stepper, signal.SIGKILL)
        wait_for(lambda: gone(stepper) and children(deployment.serve.popen.pid), "serve to start another stepping process", 60)
    elif kind == "kill_runner":
        assert deployment.remote is not None
        deployment.remote.kill()
        deployment.start_remote()  # the same id: it resumes its registration and world leases
    else:
        deployment.stop_serve(signal.SIGKILL if kind == "kill_serve" else signal.SIGTERM)
        url = deployment.start_serve()
        deployment.start_remote()
    return url


def check(data: Path, world_id: str, counter: int, markers: dict[str, int]) -> None:
    dump = LedgerDump(data, world_id)
    head = dump.world["tick_head"]
    ticks = [m["tick"] for m in dump.manifests]
    assert ticks == list(range(head + 1)), f"{world_id}: a gap in its manifests"
    spawn_tick = dump.by_id["counter"]["applied_tick"]
    assert dump.entities[counter]["Count"] == {"n": head - spawn_tick + 1}, f"{world_id}: the processor missed or repeated a tick"
    for command_id, scheduled in markers.items():
        row = dump.by_id[command_id]
        assert row["status"] == "APPLIED" and row["applied_tick"] >= scheduled, (world_id, command_id, row)
    published = dict(catalog(data, f"SELECT tick, published_at FROM ticks WHERE world_id = '{world_id}'"))
    early = [t for t, at in published.items() if at < dump.world["created_at"] + (t + 1) * INTERVAL_MS]
    assert not early, f"{world_id}: ticks {early[:5]} published before their time"
