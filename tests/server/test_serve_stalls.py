"""`archetype serve` with a world that cannot load or cannot write (docs/ledger.md, "World health"):
the world is STALLED with the reason in its health, one log line per stall, and a full disk is a
retryable `503 storage_unavailable`, never a 500 with a traceback."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import httpx
import pytest

from local_catalog import open_local_authority
from tests.integration.test_schema_evolution import OLD_WRITER
from tests.support.serve import WAIT_S, serving, wait_for

pytestmark = pytest.mark.timeout(120)
VIEWER = {"Authorization": "Bearer t-viewer"}


def stop(process: subprocess.Popen) -> str:
    """SIGTERM, a clean exit, and what it logged."""
    process.send_signal(signal.SIGTERM)
    assert process.wait(WAIT_S) == 0
    return process.stderr.read()


def stalls(http: httpx.Client, world_id: str) -> list[dict]:
    """The world's own health events in the audit table (with their payloads parsed)."""
    page = http.get(f"/worlds/{world_id}/audit", headers={"Authorization": "Bearer t-operator"}).json()
    return [{**e, "payload": json.loads(e["payload"])} for e in page["events"] if e["command_id"] == ""]


def test_a_world_needing_an_undeclared_component_migration_is_stalled_with_the_reason(tmp_path):
    # a catalog written by a process whose Critter this serve does not have: its open commands are due
    subprocess.run([sys.executable, "-c", OLD_WRITER, str(tmp_path / "data")], capture_output=True, check=True)
    with serving(tmp_path) as (process, url):
        with httpx.Client(base_url=url, timeout=10) as http:
            health = wait_for(lambda: (h := http.get("/worlds/zoo", headers=VIEWER).json()["health"])["status"] == "STALLED"
                              and h, "the world to stall")  # fmt: skip
            assert health["last_error"].startswith("ComponentMigrationRequiredError: world 'zoo' holds"), health
            assert "Critter" in health["last_error"] and health["failed_attempts"] >= 1
            wait_for(lambda: http.get("/worlds/zoo", headers=VIEWER).json()["health"]["failed_attempts"] >= 3,
                     "the load to be retried")  # fmt: skip
            wait_for(lambda: "archetype_worlds_stalled 1.0" in http.get("/metrics", headers=VIEWER).text, "the metric")
            events = wait_for(lambda: stalls(http, "zoo"), "the audit projection of the stall")
            assert [e["event_type"] for e in events] == ["world_stalled"]  # one per stall, not one per attempt
            assert events[0]["payload"]["error"] == health["last_error"]
        stderr = stop(process)
    # one line for the stall (with the error that says what to declare), not one per attempt
    lines = [line for line in stderr.splitlines() if "world zoo" in line]
    assert len(lines) == 1 and "ComponentMigrationRequiredError" in lines[0], stderr
    ledger = open_local_authority(tmp_path / "data").ledger
    assert {(c["status"], c["attempts"], c["lease_owner"]) for c in ledger.history("zoo")} == {("PENDING", 0, None)}


@pytest.fixture
def small_disk(tmp_path):
    """`tmp_path / "data"` on a filesystem of its own, 32 MiB: a disk that fills up for real."""
    data = tmp_path / "data"
    data.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(data)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.decode().strip()}")
    try:
        yield data
    finally:
        subprocess.run(["umount", "-l", str(data)], check=True)


def fill(path) -> None:
    """Write zeros to `path` until the disk is full."""
    block = bytes(1 << 16)
    with open(path, "wb", buffering=0) as ballast:
        try:
            while True:
                ballast.write(block)
        except OSError:
            pass


def note(text: str) -> dict:
    from archetype.world import ComponentValue
    from tests.component_modules.bulky import Note

    return {"type": "spawn", "tick": 0, "components": [ComponentValue.from_component(Note(text=text)).model_dump()]}


def test_a_full_disk_is_a_retryable_503_and_a_stall_recorded_once_space_returns(tmp_path, small_disk):
    """A disk full to the last byte: no write at all succeeds, so the stall cannot be recorded while
    it lasts (the ledger's health is durable); admission answers 503 `storage_unavailable` with
    Retry-After, the runner counts the stall (`archetype_world_stalls_total`) and logs it once, and
    when space returns the stall is recorded (world_stalled, with its reason) before the tick that
    ends it (world_recovered). tests/local_catalog/test_storage_full.py has a catalog that is full
    but still takes small writes: there the world is STALLED while it lasts."""
    with serving(tmp_path, "--module", "tests.component_modules.bulky") as (process, url):
        admin, player = {"Authorization": "Bearer t-admin"}, {"Authorization": "Bearer t-player"}
        answers = []
        with httpx.Client(base_url=url, timeout=30) as http:
            assert http.post("/worlds", json={"name": "disk", "world_id": "disk"}, headers=admin).status_code == 201
            # the game module gives every world a processor: once serve has loaded it, it ticks every pass
            wait_for(lambda: http.get("/worlds/disk", headers=VIEWER).json()["tick_head"] >= 0, "the world to tick")
            fill(small_disk / "ballast")
            for number in range(100):
                answer = http.post("/worlds/disk/commands", json=note(f"{number:06}" * 33_000),
                                   headers={**player, "Idempotency-Key": f"n{number}"})  # fmt: skip
                answers.append(answer.status_code)
                if answer.status_code != 202:
                    break
            assert answer.status_code == 503, (answer.status_code, answer.text)
            assert answer.json()["code"] == "storage_unavailable" and int(answer.headers["Retry-After"]) >= 1
            wait_for(lambda: "archetype_world_stalls_total 1.0" in http.get("/metrics", headers=VIEWER).text,
                     "the runner to count the stall")  # fmt: skip
            (small_disk / "ballast").unlink()  # space again: the world recovers by itself
            events = wait_for(lambda: (found := stalls(http, "disk")) and len(found) == 2 and found, "the stall's history")
            assert [e["event_type"] for e in events] == ["world_stalled", "world_recovered"]
            # (met by the lease, or by the publication: then an outcome unknown, which says why)
            assert "StorageUnavailableError: the storage cannot write" in events[0]["payload"]["error"]
            assert http.get("/worlds/disk", headers=VIEWER).json()["health"]["status"] == "ACTIVE"
            again = http.post("/worlds/disk/commands", json=note("again"), headers={**player, "Idempotency-Key": "again"})
            assert again.status_code == 202, again.text
            wait_for(lambda: http.get("/worlds/disk/commands/again", headers=player).json()["status"] == "APPLIED",
                     "a command admitted after the recovery to apply")  # fmt: skip
        stderr = stop(process)
    assert 500 not in answers and "internal_error" not in stderr, stderr
    assert "Traceback" not in stderr, stderr  # a typed storage error says it all, in one line per streak
    assert len([line for line in stderr.splitlines() if "world disk: tick" in line and "failed" in line]) == 1, stderr
