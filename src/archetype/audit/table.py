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
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import AlwaysTrue, BooleanExpression

from archetype.audit.history import dedupe, row_filter
from archetype.audit.schema import IDENTIFIER, arrow_to_events, events_to_arrow, open_table
from archetype.commands.audit_history import AuditEvent, GetAuditHistory

WATERMARK_PREFIX = "archetype.audit.projected-seq."
COMMIT_ATTEMPTS = 8

T = TypeVar("T")


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
        return self._committing(lambda: (self.table.append(rows), len(events))[1])

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
        rows = dedupe(self.scan(row_filter(query))).slice(0, query.limit)
        return [AuditEvent(**event) for event in arrow_to_events(rows)]

    def files(self, expression: BooleanExpression = AlwaysTrue()) -> tuple[int, int]:
        """(data files a scan with `expression` must read, data files in the table) at the current snapshot."""
        self.table.refresh()
        planned = sum(1 for _ in self.table.scan(row_filter=expression).plan_files())
        total = sum(1 for _ in self.table.scan().plan_files())
        return planned, total
