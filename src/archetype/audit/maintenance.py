"""Small-file control: compaction of partitions and expiry of old snapshots.

Every projection commit adds at least one data file per (world, day) partition it touches and one
snapshot. Batching bounds that (one commit per batch, not per event); these two keep it bounded
over time:

- `compact` rewrites each partition holding several files as few files (up to the table's target
  size), each event identity once, sorted by (command_id, event_seq) so a one-command query prunes
  by column bounds. One commit per partition; a concurrent append makes that commit fail and the
  partition is simply left for the next run (nothing is lost: the rewrite never commits).
- `expire_snapshots` drops snapshots older than a cutoff beyond the newest few, so metadata and
  scan planning stay small. Data files only the expired snapshots referenced stay on storage until
  an orphan-file sweep (pyiceberg has no orphan removal yet; see docs/audit.md).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import And, EqualTo

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


def maintain(table: AuditTable, *, min_files: int = 2, older_than_ms: int = 3_600_000, keep_last: int = 5) -> Maintenance:
    compaction = compact(table, min_files=min_files)
    return Maintenance(compaction, expire_snapshots(table, older_than_ms=older_than_ms, keep_last=keep_last))
