"""The audit table's design: one Iceberg table of outbox events, partitioned per world and per day.

Field ids are permanent. Evolution only ever adds optional columns with new ids (see
`evolve_schema`); nothing is renamed, retyped or dropped, so every file ever written stays readable
and every reader keeps working. See docs/audit.md.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.sorting import SortField, SortOrder
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DateType, LongType, NestedField, StringType, TimestamptzType

NAMESPACE = "archetype"
TABLE = "audit_events"
IDENTIFIER = (NAMESPACE, TABLE)
MS_PER_DAY = 86_400_000

SCHEMA = Schema(
    NestedField(1, "event_id", StringType(), required=True, doc="<world_id>/<event_seq>: the event's identity"),
    NestedField(2, "world_id", StringType(), required=True),
    NestedField(3, "event_seq", LongType(), required=True, doc="per-world outbox sequence"),
    NestedField(4, "command_id", StringType(), required=True),
    NestedField(5, "event_type", StringType(), required=True,
                doc="admitted|applied|rejected|retry_scheduled|dead_lettered|cancelled"),  # fmt: skip
    NestedField(6, "status", StringType(), required=True, doc="the command's status after the event"),
    NestedField(7, "operation", StringType(), required=True),
    NestedField(8, "tick", LongType(), required=False, doc="applied tick, else scheduled tick"),
    NestedField(9, "principal", StringType(), required=False, doc="the actor; null for trusted callers"),
    NestedField(10, "origin", StringType(), required=True),
    NestedField(11, "occurred_at", TimestamptzType(), required=True),
    NestedField(12, "occurred_day", DateType(), required=True, doc="UTC day of occurred_at: the day partition"),
    NestedField(13, "payload", StringType(), required=True, doc="small JSON: attempts, max_attempts, error"),
    identifier_field_ids=[1],
)

# identity(world_id), identity(occurred_day). An explicit day column instead of the hidden
# day(occurred_at) transform: pyiceberg writes non-identity transforms only with the optional
# native `pyiceberg-core`, and dynamic partition overwrite (our compaction) needs identity fields.
PARTITION_SPEC = PartitionSpec(
    PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="world_id"),
    PartitionField(source_id=12, field_id=1001, transform=IdentityTransform(), name="occurred_day"),
)

# Compaction rewrites a partition in this order, so each file covers a narrow command-id range
# and a one-command query skips the others by their column bounds.
SORT_ORDER = SortOrder(SortField(source_id=4, transform=IdentityTransform()), SortField(source_id=3, transform=IdentityTransform()))

PROPERTIES = {
    "write.parquet.compression-codec": "zstd",
    # pyiceberg measures this in in-memory Arrow bytes; on disk a file is several times smaller.
    "write.target-file-size-bytes": str(16 * 1024 * 1024),
    # Small row groups: in a file sorted by command id, a one-command read skips all but one of
    # them by their statistics (at 1M events: ~60-150 ms per query instead of ~400 ms).
    "write.parquet.row-group-limit": "16384",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "20",
    # We retry conflicts ourselves: pyiceberg's own retry would re-apply a batch on top of a
    # concurrent projector's commit without re-checking the world's projected-sequence mark.
    "commit.retry.num-retries": "0",
}

# No field-id metadata: appends match columns to the live table by name, so a table whose ids
# differ (created by an older version, then evolved) takes these rows too.
ARROW_SCHEMA = schema_to_pyarrow(SCHEMA, include_field_ids=False)


def open_table(catalog: Catalog, identifier: tuple[str, str] = IDENTIFIER) -> Table:
    """Load the audit table, creating it (and its namespace) on first use; bring older tables up to date."""
    try:
        table = catalog.load_table(identifier)
    except NoSuchTableError:
        table = _create_table(catalog, identifier)
    missing = {key: value for key, value in PROPERTIES.items() if key not in table.properties}
    if missing:
        with table.transaction() as tx:
            tx.set_properties(missing)
    return evolve_schema(table)


def _create_table(catalog: Catalog, identifier: tuple[str, str]) -> Table:
    # Two first openers may race (serve and `archetype audit project`); catalogs report the loser
    # differently (AlreadyExists, a SQL integrity error, HTTP 409). What exists afterwards is success.
    try:
        catalog.create_namespace_if_not_exists(identifier[0])
    except Exception:
        if not catalog.namespace_exists(identifier[0]):
            raise
    try:
        return catalog.create_table(
            identifier, schema=SCHEMA, partition_spec=PARTITION_SPEC, sort_order=SORT_ORDER, properties=PROPERTIES
        )
    except Exception:
        if not catalog.table_exists(identifier):
            raise
        return catalog.load_table(identifier)


def evolve_schema(table: Table) -> Table:
    """Add the columns this version knows and the table lacks (optional, new ids); never anything else."""
    missing = [f for f in SCHEMA.fields if f.name not in {c.name for c in table.schema().fields}]
    if missing:
        with table.update_schema() as update:
            for field in missing:
                update.add_column(field.name, field.field_type, doc=field.doc)
    return table


OUTBOX_COLUMNS = ("event_id", "world_id", "event_seq", "command_id", "event_type", "status", "operation", "tick",
                  "principal", "origin", "payload")  # fmt: skip


def columns_to_arrow(columns: dict[str, list[Any]]) -> pa.Table:
    """Outbox columns (field name -> values, as `read_outbox_columns` answers) -> an Arrow table of
    the audit schema."""
    occurred_ms = pa.array(columns["occurred_at"], pa.int64())
    arrays = {name: pa.array(columns[name], ARROW_SCHEMA.field(name).type) for name in OUTBOX_COLUMNS}
    arrays["occurred_at"] = pc.multiply(occurred_ms, 1000).cast(pa.timestamp("us", tz="UTC"))
    arrays["occurred_day"] = pc.divide(occurred_ms, MS_PER_DAY).cast(pa.int32()).cast(pa.date32())
    return pa.table([arrays[f.name] for f in ARROW_SCHEMA], schema=ARROW_SCHEMA)


def events_to_arrow(events: list[dict[str, Any]]) -> pa.Table:
    """Outbox event dicts (as `read_outbox` answers or the audit Queue delivers) -> an Arrow table."""
    return columns_to_arrow({name: [e[name] for e in events] for name in (*OUTBOX_COLUMNS, "occurred_at")})


def arrow_to_events(table: pa.Table) -> list[dict[str, Any]]:
    """The inverse of `events_to_arrow`: rows as outbox-shaped dicts (occurred_at in ms)."""
    occurred_ms = pc.divide(table.column("occurred_at").cast(pa.int64()), 1000)
    rows = table.drop_columns(["occurred_at", "occurred_day"]).append_column("occurred_at", occurred_ms)
    return rows.to_pylist()
