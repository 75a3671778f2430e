"""Outbox delivery to the audit Queue: the remote authority's projector.

The queue path treats "sent" as "acknowledged": events are read with `read_outbox`, sent with
`sendBatch`, and acknowledged with `acknowledge_outbox` only after the send resolved. A crash or a
failed send between the two re-sends the batch later (at-least-once); the Iceberg projector
deduplicates by the deterministic event id.
"""

from __future__ import annotations

import json
from typing import Any

from archetype.commands.ledger import Ledger
from archetype.commands.ledger_rows import OutboxEvent
from durable_world.ffi import to_js

# Cloudflare Queues limits (1 KB = 1000 bytes): a sendBatch carries at most 100 messages and
# 256 KB, one message at most 128 KB, and each message counts ~100 bytes of metadata.
MAX_BATCH_MESSAGES = 100
MAX_BATCH_BYTES = 256_000
MAX_MESSAGE_BYTES = 128_000
MESSAGE_OVERHEAD_BYTES = 100
# Each sendBatch is a subrequest; bound one alarm's work and let the next alarm continue.
MAX_BATCHES_PER_DELIVERY = 50


def message_bytes(event: OutboxEvent) -> int:
    return len(json.dumps(event, separators=(",", ":")).encode()) + MESSAGE_OVERHEAD_BYTES


def queue_batches(events: list[OutboxEvent]) -> list[list[OutboxEvent]]:
    """Split events, in order, into batches within the sendBatch limits."""
    batches: list[list[OutboxEvent]] = []
    batch: list[OutboxEvent] = []
    size = 0
    for event in events:
        weight = message_bytes(event)
        if weight > MAX_MESSAGE_BYTES:
            raise ValueError(
                f"outbox event {event.get('event_id')!r} is {weight} bytes; a queue message holds {MAX_MESSAGE_BYTES}"
            )
        if batch and (len(batch) == MAX_BATCH_MESSAGES or size + weight > MAX_BATCH_BYTES):
            batches.append(batch)
            batch, size = [], 0
        batch.append(event)
        size += weight
    if batch:
        batches.append(batch)
    return batches


async def deliver_outbox(ledger: Ledger, world_id: str, queue: Any) -> bool:
    """Send the world's unacknowledged events; return True if some are left for a later delivery."""
    for _ in range(MAX_BATCHES_PER_DELIVERY):
        events = ledger.read_outbox(world_id, limit=MAX_BATCH_MESSAGES)
        if not events:
            return False
        for batch in queue_batches(events):
            # contentType json: the CPython projector pulls over HTTP and cannot read V8-serialised bodies.
            await queue.sendBatch(to_js([{"body": event, "contentType": "json"} for event in batch]))
            ledger.acknowledge_outbox(world_id, batch[-1]["event_seq"])
    return bool(ledger.read_outbox(world_id, limit=1))
