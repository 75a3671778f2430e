"""GetAuditHistory over the table: the query as an Iceberg row filter, and dedup on read.

The row filter is pushed into scan planning, so files of other worlds and files whose column
bounds exclude the command id, principal, status or tick range are never opened. Dedup on read
keeps one row per event identity: duplicates exist only where a delivery was replayed (queue
redelivery, or a crash between append and acknowledgement on a path without a watermark).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import And, BooleanExpression, EqualTo, GreaterThan, GreaterThanOrEqual, LessThanOrEqual

from archetype.commands.audit_history import GetAuditHistory


def row_filter(query: GetAuditHistory) -> BooleanExpression:
    # Predicates by keyword (term=, value=): a type checker sees their pydantic fields, not the
    # positional (term, literal) __init__ pyiceberg also accepts.
    terms: list[BooleanExpression] = [EqualTo(term="world_id", value=query.world_id)]
    if query.after_event_seq:
        terms.append(GreaterThan(term="event_seq", value=query.after_event_seq))
    if query.tick_from is not None:
        terms.append(GreaterThanOrEqual(term="tick", value=query.tick_from))
    if query.tick_to is not None:
        terms.append(LessThanOrEqual(term="tick", value=query.tick_to))
    for column in ("principal", "command_id"):
        if getattr(query, column) is not None:
            terms.append(EqualTo(term=column, value=getattr(query, column)))
    if query.status is not None:
        terms.append(EqualTo(term="status", value=query.status.value))
    return And(*terms) if len(terms) > 1 else terms[0]


def dedupe(rows: pa.Table) -> pa.Table:
    """One world's rows in event-sequence order, each event identity once (the first copy)."""
    rows = rows.sort_by([("event_seq", "ascending")])
    if rows.num_rows < 2:
        return rows
    seq = rows.column("event_seq")
    changed = pc.not_equal(seq.slice(1), seq.slice(0, rows.num_rows - 1))
    keep = pa.concat_arrays([pa.array([True]), *changed.chunks]) if changed.num_chunks else pa.array([True])
    return rows.filter(keep)
