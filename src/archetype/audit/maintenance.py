"""Small-file control: compaction of partitions, expiry of old snapshots, removal of orphan files.

Every projection commit adds at least one data file per (world, day) partition it touches and one
snapshot. Batching bounds that (one commit per batch, not per event); these two keep it bounded
over time:

- `compact` rewrites each partition holding several files as few files (up to the table's target
  size), each event identity once, sorted by (command_id, event_seq) so a one-command query prunes
  by column bounds. One commit per partition; a concurrent append makes that commit fail and the
  partition is simply left for the next run (nothing is lost: the rewrite never commits).
- `expire_snapshots` drops snapshots older than a cutoff beyond the newest few, so metadata and
  scan planning stay small.
- `remove_orphan_files` deletes what no retained snapshot references any more: the data files a
  compaction replaced once the snapshots holding them are expired, their manifests and manifest
  lists, metadata files past the kept log (pyiceberg has no orphan removal of its own). Without
  it, a reader of the Parquet files under the table's location would count a compacted event twice.
  Only files older than a grace period go, so a file another writer has written but not yet
  committed is never taken from under it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pyarrow.fs import FileSelector, FileType
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import And, EqualTo
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.table import Table

from archetype.audit.history import dedupe
from archetype.audit.table import AuditTable


@dataclass
class Compaction:
    partitions: int = 0  # partitions rewritten
    files_before: int = 0  # their data files before ...
    files_after: int = 0  # ... and after
    duplicates_removed: int = 0
    skipped: int = 0  # partitions left for the next run: another writer committed meanwhile


@dataclass(frozen=True)
class Maintenance:
    compaction: Compaction
    snapshots_expired: int
    orphans_removed: int


def compact(table: AuditTable, *, min_files: int = 2) -> Compaction:
    """Rewrite every partition holding at least `min_files` data files."""
    table.table.refresh()
    done = Compaction()
    for row in table.table.inspect.partitions().to_pylist():
        if row["file_count"] < min_files:
            continue
        part = row["partition"]
        where = And(  # predicates by keyword, as in history.row_filter
            EqualTo(term="world_id", value=part["world_id"]),
            EqualTo(term="occurred_day", value=part["occurred_day"].isoformat()),
        )
        rows = table.table.scan(row_filter=where).to_arrow()
        unique = dedupe(rows).sort_by([("command_id", "ascending"), ("event_seq", "ascending")])
        try:
            with table.table.transaction() as tx:
                tx.dynamic_partition_overwrite(unique)
        except CommitFailedException:
            table.table.refresh()
            done.skipped += 1
            continue
        done.partitions += 1
        done.files_before += row["file_count"]
        done.files_after += sum(1 for _ in table.table.scan(row_filter=where).plan_files())
        done.duplicates_removed += rows.num_rows - unique.num_rows
    return done


def expire_snapshots(table: AuditTable, *, older_than_ms: int = 3_600_000, keep_last: int = 5) -> int:
    """Expire snapshots older than `older_than_ms` except the newest `keep_last` (and branch heads)."""
    table.table.refresh()
    cutoff = int(time.time() * 1000) - older_than_ms
    snapshots = sorted(table.table.snapshots(), key=lambda s: s.timestamp_ms)[: -keep_last or None]
    expired = [s.snapshot_id for s in snapshots if s.timestamp_ms < cutoff and s.snapshot_id != table.table.metadata.current_snapshot_id]
    if expired:
        table.table.maintenance.expire_snapshots().by_ids(expired).commit()
    return len(expired)


def referenced_files(table: Table) -> set[str]:
    """Every file the table's metadata can reach: the metadata files of its log, and each retained
    snapshot's manifest list, manifests and live data files (locations as the metadata spells them)."""
    metadata, io = table.metadata, table.io
    files = {table.metadata_location, *(entry.metadata_file for entry in metadata.metadata_log)}
    files.update(s.statistics_path for s in metadata.statistics)
    files.update(s.statistics_path for s in metadata.partition_statistics)
    for snapshot in metadata.snapshots:
        files.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            files.add(manifest.manifest_path)
            files.update(entry.data_file.file_path for entry in manifest.fetch_manifest_entry(io, discard_deleted=True))
    return files


def remove_orphan_files(table: AuditTable, *, older_than_ms: int = 3_600_000) -> int:
    """Delete every file under the table's location that no metadata references and that is older
    than `older_than_ms` (younger ones may belong to a commit in flight); return how many."""
    table.table.refresh()
    io = table.table.io
    if not isinstance(io, PyArrowFileIO):  # listing a location needs a pyarrow filesystem
        raise TypeError(f"orphan removal needs a PyArrowFileIO, not {type(io).__name__}")

    def physical(location: str) -> str:
        return io.parse_location(location, io.properties)[2]

    scheme, netloc, root = io.parse_location(table.table.location(), io.properties)
    filesystem = io.fs_by_scheme(scheme, netloc)
    keep = {physical(location) for location in referenced_files(table.table)}
    cutoff_ns = (time.time_ns() // 1_000_000 - older_than_ms) * 1_000_000
    removed = 0
    for info in filesystem.get_file_info(FileSelector(root, recursive=True, allow_not_found=True)):
        if info.type != FileType.File or info.path in keep:
            continue
        if info.mtime_ns is not None and info.mtime_ns > cutoff_ns:
            continue
        filesystem.delete_file(info.path)
        removed += 1
    return removed


def maintain(table: AuditTable, *, min_files: int = 2, older_than_ms: int = 3_600_000, keep_last: int = 5,
             orphans_older_than_ms: int = 3_600_000) -> Maintenance:  # fmt: skip
    compaction = compact(table, min_files=min_files)
    expired = expire_snapshots(table, older_than_ms=older_than_ms, keep_last=keep_last)
    return Maintenance(compaction, expired, remove_orphan_files(table, older_than_ms=orphans_older_than_ms))
