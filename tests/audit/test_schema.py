"""The table design: partition spec, identity, and evolution of a table written by an older version."""

from __future__ import annotations

import pytest
from pyiceberg.schema import Schema

from archetype.audit.catalog import local_catalog
from archetype.audit.schema import IDENTIFIER, PARTITION_SPEC, PROPERTIES, SCHEMA, events_to_arrow
from archetype.audit.table import AuditTable
from archetype.commands import GetAuditHistory

pytestmark = pytest.mark.timeout(60)


def test_the_table_is_partitioned_per_world_and_day_with_event_identity(tmp_path):
    table = AuditTable(local_catalog(tmp_path)).table
    assert [(f.name, str(f.transform)) for f in table.spec().fields] == [("world_id", "identity"), ("occurred_day", "identity")]
    assert table.schema().identifier_field_names() == {"event_id"}
    assert [f.source_id for f in table.sort_order().fields] == [4, 3]  # (command_id, event_seq)
    assert {k: table.properties[k] for k in PROPERTIES} == PROPERTIES


def test_an_older_table_gains_new_columns_as_optional_and_keeps_its_rows(tmp_path):
    catalog = local_catalog(tmp_path)
    older = Schema(*[f for f in SCHEMA.fields if f.name != "principal"], identifier_field_ids=[1])
    catalog.create_namespace(IDENTIFIER[0])
    old_table = catalog.create_table(IDENTIFIER, schema=older, partition_spec=PARTITION_SPEC)
    event = {"event_id": "w/1", "world_id": "w", "event_seq": 1, "command_id": "c", "event_type": "admitted",
             "status": "PENDING", "operation": "spawn", "tick": 0, "principal": None, "origin": "local",
             "occurred_at": 1_700_000_000_000, "payload": "{}"}  # fmt: skip
    old_table.append(events_to_arrow([event]).drop_columns(["principal"]).cast(old_table.schema().as_arrow()))

    table = AuditTable(catalog)  # a newer projector opens it
    principal = table.table.schema().find_field("principal")
    others = [f.field_id for f in table.table.schema().fields if f.name != "principal"]
    assert principal.field_id > max(others) and not principal.required  # a new id, optional: old files read null
    assert table.table.properties["commit.retry.num-retries"] == "0"
    table.append([{**event, "event_id": "w/2", "event_seq": 2, "principal": "alice"}])
    assert [(e.event_seq, e.principal) for e in table.history(GetAuditHistory(world_id="w"))] == [(1, None), (2, "alice")]


def test_history_pages_read_files_in_sequence_order_and_stop_early(tmp_path):
    table = AuditTable(local_catalog(tmp_path))
    def event(seq):
        return {"event_id": f"w/{seq}", "world_id": "w", "event_seq": seq, "command_id": f"c{seq % 7}",
                "event_type": "admitted", "status": "PENDING", "operation": "spawn", "tick": seq, "principal": None,
                "origin": "local", "occurred_at": 1_700_000_000_000 + seq, "payload": "{}"}  # fmt: skip
    for batch in reversed(range(12)):  # twelve files, appended newest first
        table.append([event(batch * 10 + i) for i in range(1, 11)])
    table.append([event(seq) for seq in (3, 14, 15, 118)])  # redelivered copies in a late file

    def page(after, limit):
        return [e.event_seq for e in table.history(GetAuditHistory(world_id="w", after_event_seq=after, limit=limit))]

    assert page(0, 15) == list(range(1, 16))
    assert page(50, 5) == [51, 52, 53, 54, 55]
    pages, after = [], 0
    while chunk := page(after, 7):
        pages += chunk
        after = chunk[-1]
    assert pages == list(range(1, 121))
    assert [e.event_seq for e in table.history(GetAuditHistory(world_id="w", command_id="c3", tick_to=40, limit=3))] == [3, 10, 17]
