"""Small-file control: compaction keeps every event once, sorted for pruning; expiry bounds snapshots."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyiceberg.expressions import And, EqualTo

from archetype.audit.catalog import local_catalog
from archetype.audit.maintenance import compact, expire_snapshots, remove_orphan_files
from archetype.audit.schema import events_to_arrow
from archetype.audit.table import AuditTable
from archetype.commands import GetAuditHistory

pytestmark = pytest.mark.timeout(120)
DAY_MS = 86_400_000


def event(world_id: str, seq: int, command_id: str, day: int = 0) -> dict:
    return {
        "event_id": f"{world_id}/{seq}", "world_id": world_id, "event_seq": seq, "command_id": command_id,
        "event_type": "admitted", "status": "PENDING", "operation": "spawn", "tick": seq, "principal": None,
        "origin": "local", "occurred_at": 1_700_000_000_000 + day * DAY_MS + seq, "payload": "{}",
    }  # fmt: skip


@pytest.fixture
def table(tmp_path):
    table = AuditTable(local_catalog(tmp_path))
    for batch in range(8):  # eight small commits into one partition of w1, one into w2
        events = [event("w1", batch * 50 + i, f"cmd-{(batch * 50 + i) % 40:03d}") for i in range(1, 51)]
        table.append_in_order("w1", events_to_arrow(events))
    table.append_in_order("w2", events_to_arrow([event("w2", 1, "cmd-000", day=1)]))
    table.append([event("w1", 7, "cmd-007")])  # a redelivered copy
    return table


def test_compaction_rewrites_sorted_files_without_duplicates_or_loss(table):
    before = table.history(GetAuditHistory(world_id="w1", limit=1000))
    table.table.transaction().set_properties({"write.target-file-size-bytes": "8192"}).commit_transaction()
    done = compact(table)
    assert (done.partitions, done.files_before, done.duplicates_removed, done.skipped) == (1, 9, 1, 0)  # w2's one file stays
    files_after = done.files_after
    assert 1 < files_after < done.files_before  # the target size splits the partition into a few files
    assert table.history(GetAuditHistory(world_id="w1", limit=1000)) == before
    assert table.scan().num_rows == 401
    assert table.projected_seq("w1") == 400  # the committed projection marks survive the rewrite

    one_command = And(EqualTo("world_id", "w1"), EqualTo("command_id", "cmd-017"))
    planned, total = table.files(one_command)
    # sorted files: the command's bounds select the file holding it (two where it straddles a boundary)
    assert planned <= 2 < files_after and total == files_after + 1
    assert [e.command_id for e in table.history(GetAuditHistory(world_id="w1", command_id="cmd-017", limit=100))] == ["cmd-017"] * 10


def test_compaction_that_loses_a_race_commits_nothing(table, tmp_path, monkeypatch):
    from archetype.audit import maintenance

    other_projector = AuditTable(local_catalog(tmp_path))

    def dedupe_while_another_projector_commits(rows):
        other_projector.append_in_order("w1", events_to_arrow([event("w1", 401, "late")]))
        return maintenance_dedupe(rows)

    maintenance_dedupe = maintenance.dedupe
    monkeypatch.setattr(maintenance, "dedupe", dedupe_while_another_projector_commits)
    assert compact(table).skipped == 1  # the real commit failed on the changed snapshot: skipped
    assert table.scan(EqualTo("command_id", "late")).num_rows == 1
    assert table.scan().num_rows == 403 and table.projected_seq("w1") == 401


def test_expiry_keeps_the_newest_snapshots_and_the_data(table):
    assert len(table.table.snapshots()) == 10
    assert expire_snapshots(table, older_than_ms=0, keep_last=3) == 7
    assert len(table.table.snapshots()) == 3
    assert table.scan().num_rows == 402


def parquet_event_ids(table) -> list[str]:
    """What a reader of the table's files sees, Iceberg metadata aside: every Parquet file under the
    table's location, read as it is."""
    root = Path(table.table.io.parse_location(table.table.location())[2])
    return [i for f in sorted(root.rglob("*.parquet")) for i in pq.read_table(f, columns=["event_id"]).column(0).to_pylist()]


def test_orphans_of_compaction_and_expiry_are_removed_so_each_event_is_on_storage_once(table):
    events = {e.event_id for e in table.history(GetAuditHistory(world_id="w1", limit=1000))} | {"w2/1"}
    compact(table)
    assert expire_snapshots(table, older_than_ms=0, keep_last=1) == 11  # of 12: ten appends, the compaction's delete and append
    before = parquet_event_ids(table)
    assert len(before) > len(set(before)) == len(events)  # the files compaction replaced are still there
    assert remove_orphan_files(table, older_than_ms=3_600_000) == 0  # all younger than the grace period
    removed = remove_orphan_files(table, older_than_ms=0)
    after = parquet_event_ids(table)
    assert sorted(after) == sorted(events) and removed >= 9  # 9 replaced data files, plus their manifests
    assert table.scan().num_rows == len(events)  # the table reads as before
    assert remove_orphan_files(table, older_than_ms=0) == 0


def test_orphan_removal_keeps_every_file_a_retained_snapshot_needs(table):
    compact(table)
    assert remove_orphan_files(table, older_than_ms=0) == 0  # no snapshot expired: every file is still referenced
    for snapshot in table.table.snapshots():  # time travel to each still works
        assert table.table.scan(snapshot_id=snapshot.snapshot_id).to_arrow().num_rows > 0
