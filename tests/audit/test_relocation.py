"""A data directory can be moved (or copied): the ledger's catalog and the audit warehouse open at
the new place, `audit query` reads the history, projection and maintenance go on there, and a
copy never touches the files of the directory it was copied from."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from archetype.audit.catalog import local_catalog
from archetype.commands import DurableOptions, GetAuditHistory
from archetype.commands.port import ManualClock
from archetype.runtime import Runtime
from archetype.world import Spawn, Step
from tests.audit.conftest import populate
from tests.component_modules.alpha import Health

pytestmark = pytest.mark.timeout(180)


def audit_cli(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "archetype.cli", "audit", *args], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    return done.stdout


def files(directory) -> dict[str, int]:
    return {str(p.relative_to(directory)): p.stat().st_mtime_ns for p in directory.rglob("*") if p.is_file()}


async def test_a_moved_data_directory_keeps_its_catalog_and_its_audit_history(tmp_path):
    before, after = tmp_path / "before", tmp_path / "moved" / "elsewhere"
    clock = ManualClock()
    async with await Runtime.open_local(before, clock=clock, owner="runner-a") as rt:
        await populate(rt, clock)
        await rt.audit.project_once()
    lines = audit_cli("query", "--data", str(before), "w1").splitlines()
    assert len(lines) == 5

    after.parent.mkdir()
    shutil.move(before, after)
    assert audit_cli("query", "--data", str(after), "w1").splitlines() == lines

    async with await Runtime.open_local(after, clock=clock, owner="runner-a") as rt:  # the ledger reopens
        assert [r.command_id for r in await rt.scheduler.history("w1")] == ["a", "b", "c"]
        await rt.dispatcher.defer(Spawn(world_id="w1", components=[Health(hp=4)]), DurableOptions(tick=2), command_id="d")
        await rt.dispatcher.apply(Step(world_id="w1"))
        assert await rt.audit.project_once() == {"w1": 2}  # d admitted and applied
        done = await rt.audit.maintain(older_than_ms=0, keep_last=1, orphans_older_than_ms=0)
        assert done.compaction.partitions >= 1 and done.orphans_removed > 0
        events = await rt.audit.history(GetAuditHistory(world_id="w1", limit=100))
    assert [e.command_id for e in events][-2:] == ["d", "d"] and len(events) == 7
    # everything it wrote is under the new directory, nothing was recreated at the old place
    assert not before.exists()
    assert "compacted" in audit_cli("compact", "--data", str(after), "--expire-after", "0", "--orphans-after", "0")
    assert len(audit_cli("query", "--data", str(after), "w1").splitlines()) == 7


async def test_a_copy_writes_only_its_own_files(tmp_path):
    original, copy = tmp_path / "original", tmp_path / "copy"
    clock = ManualClock()
    async with await Runtime.open_local(original, clock=clock, owner="runner-a") as rt:
        await populate(rt, clock)
        await rt.audit.project_once()
    shutil.copytree(original, copy)
    untouched = files(original)
    async with await Runtime.open_local(copy, clock=clock, owner="runner-a") as rt:
        await rt.dispatcher.apply(Step(world_id="w1"))
        await rt.audit.project_once()
        await rt.audit.maintain(older_than_ms=0, keep_last=1, orphans_older_than_ms=0)
    assert files(original) == untouched
    assert len(local_catalog(original).load_table(("archetype", "audit_events")).scan().to_arrow()) == 6
