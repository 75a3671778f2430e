"""AuditTable: appends to and reads from the audit table, one Iceberg commit per batch.

Write-side dedup for ordered sources: each world's projected event sequence is a table property
(`archetype.audit.projected-seq.<world_id>`) committed in the SAME commit as the rows, so after a
crash between append and acknowledgement the replayed events are recognised and skipped without
scanning any data. Unordered sources (the Queue) append plainly and rely on dedup on read.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.conversions import from_bytes
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.table import FileScanTask
from pyiceberg.types import LongType

from archetype.audit.history import dedupe, row_filter
from archetype.audit.schema import IDENTIFIER, arrow_to_events, events_to_arrow, open_table
from archetype.commands.audit_history import AuditEvent, GetAuditHistory

WATERMARK_PREFIX = "archetype.audit.projected-seq."
COMMIT_ATTEMPTS = 8

FIRST_WAVE = 4  # files read together at first (pyiceberg reads a wave's files in parallel)

T = TypeVar("T")


def _lowest(task: FileScanTask, field_id: int) -> int:
    """The lowest event sequence a data file can hold (its column lower bound; 0 if unknown)."""
    bound = (task.file.lower_bounds or {}).get(field_id)
    return cast(int, from_bytes(LongType(), bound)) if bound is not None else 0  # a LongType decodes to int


class AuditTable:
    def __init__(self, catalog: Catalog, identifier: tuple[str, str] = IDENTIFIER) -> None:
        self.catalog = catalog
        self.table = open_table(catalog, identifier)

    def projected_seq(self, world_id: str) -> int:
        """The highest event sequence of `world_id` committed by an ordered append (0 if none)."""
        return int(self.table.properties.get(WATERMARK_PREFIX + world_id, 0))

    def append_in_order(self, world_id: str, rows: pa.Table) -> int:
        """Append one world's rows (ascending sequence) that are past its mark, and move the mark,
        as ONE commit. Returns how many rows were appended (0 for a fully replayed batch)."""

        def attempt() -> int:
            fresh = rows.filter(pc.greater(rows.column("event_seq"), self.projected_seq(world_id)))
            if fresh.num_rows:
                last = pc.max(fresh.column("event_seq")).as_py()
                with self.table.transaction() as tx:
                    tx.append(fresh)
                    tx.set_properties({WATERMARK_PREFIX + world_id: str(last)})
            return fresh.num_rows

        return self._committing(attempt)

    def append(self, events: list[dict[str, Any]]) -> int:
        """Append events of any worlds, in any order, as ONE commit (duplicates are removed on read)."""
        rows = events_to_arrow(events)

        def attempt() -> int:
            self.table.append(rows)
            return len(events)

        return self._committing(attempt)

    def _committing(self, attempt: Callable[[], T]) -> T:
        """Run `attempt`, refreshing and retrying when another writer committed first (optimistic concurrency)."""
        for _ in range(COMMIT_ATTEMPTS - 1):
            try:
                return attempt()
            except CommitFailedException:
                time.sleep(random.uniform(0.001, 0.02))  # de-synchronise contending writers
                self.table.refresh()
        return attempt()

    def scan(self, expression: BooleanExpression = AlwaysTrue()) -> pa.Table:
        self.table.refresh()
        return self.table.scan(row_filter=expression).to_arrow()

    def history(self, query: GetAuditHistory) -> list[AuditEvent]:
        """The query's first `limit` events in sequence order, each identity once.

        Files are read in order of their lowest event sequence, in growing waves, and reading
        stops once the answer is complete: no unread file can hold an earlier event. So the
        first page of a long history reads a few files, not the whole world.
        """
        self.table.refresh()
        scan = self.table.scan(row_filter=row_filter(query))
        seq_id = self.table.schema().find_field("event_seq").field_id
        tasks = sorted(scan.plan_files(), key=lambda task: _lowest(task, seq_id))
        reader = ArrowScan(scan.table_metadata, scan.io, scan.projection(), scan.row_filter, scan.case_sensitive)
        parts, read, wave = [], 0, FIRST_WAVE
        rows = reader.to_table([])
        while read < len(tasks):
            parts.append(reader.to_table(tasks[read : read + wave]))
            read, wave = read + wave, wave * 2
            rows = dedupe(pa.concat_tables(parts))
            if rows.num_rows >= query.limit and read < len(tasks):
                if rows.column("event_seq")[query.limit - 1].as_py() < _lowest(tasks[read], seq_id):
                    break
        return [AuditEvent(**event) for event in arrow_to_events(rows.slice(0, query.limit))]

    def files(self, expression: BooleanExpression = AlwaysTrue()) -> tuple[int, int]:
        """(data files a scan with `expression` must read, data files in the table) at the current snapshot."""
        self.table.refresh()
        planned = sum(1 for _ in self.table.scan(row_filter=expression).plan_files())
        total = sum(1 for _ in self.table.scan().plan_files())
        return planned, total
