"""Outbox delivery to the audit Queue: the remote authority's projector.

The queue path treats "sent" as "acknowledged": events are read with `read_outbox`, sent with
`sendBatch`, and acknowledged with `acknowledge_outbox` only after the send resolved. A crash or a
failed send between the two re-sends the batch later (at-least-once); the Iceberg projector
deduplicates by the deterministic event id.

Delivery runs in the object's alarm, after an edge-hosted world's tick, so it must never hold the
next tick up for long: each send is bounded by `SEND_TIMEOUT_MS` (a queue that accepts the request
and never answers held the alarm, and so the world's ticks, forever), and one delivery stops at
the time the caller gives (the next tick), after one batch at least, however large the backlog.
A failing queue is retried with backoff (`DeliveryRetry`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from archetype.commands.ledger import Ledger
from archetype.commands.ledger_rows import OutboxEvent
from durable_world.edge import env_int
from durable_world.ffi import to_js

# Cloudflare Queues limits (1 KB = 1000 bytes): a sendBatch carries at most 100 messages and
# 256 KB, one message at most 128 KB, and each message counts ~100 bytes of metadata.
MAX_BATCH_MESSAGES = 100
MAX_BATCH_BYTES = 256_000
MAX_MESSAGE_BYTES = 128_000
MESSAGE_OVERHEAD_BYTES = 100
# Each sendBatch is a subrequest; bound one alarm's work and let the next alarm continue.
MAX_BATCHES_PER_DELIVERY = 50
# A send that has not resolved by then counts as failed (it may still arrive: at-least-once).
SEND_TIMEOUT_MS = 2_000
# After a failed send, delivery waits the retry delay (the RETRY_DELAY_MS var, this by default),
# doubled after each further failure up to MAX_RETRY_DELAY_MS.
RETRY_DELAY_MS = 10_000
MAX_RETRY_DELAY_MS = 300_000


class SendTimeoutError(TimeoutError):
    """The queue did not answer a send within SEND_TIMEOUT_MS."""


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


async def deliver_outbox(ledger: Ledger, world_id: str, queue: Any, *, now_ms: Callable[[], int],
                         stop_at_ms: int | None = None) -> bool:  # fmt: skip
    """Send the world's unacknowledged events, until `now_ms()` reaches `stop_at_ms` (one batch at
    least); return True if some are left for a later delivery."""
    for _ in range(MAX_BATCHES_PER_DELIVERY):
        events = ledger.read_outbox(world_id, limit=MAX_BATCH_MESSAGES)
        if not events:
            return False
        for batch in queue_batches(events):
            # contentType json: the CPython projector pulls over HTTP and cannot read V8-serialised bodies.
            send = queue.sendBatch(to_js([{"body": event, "contentType": "json"} for event in batch]))
            try:
                await asyncio.wait_for(send, SEND_TIMEOUT_MS / 1000)
            except TimeoutError:
                raise SendTimeoutError(f"the audit queue did not answer a send within {SEND_TIMEOUT_MS} ms") from None
            ledger.acknowledge_outbox(world_id, batch[-1]["event_seq"])
            if stop_at_ms is not None and now_ms() >= stop_at_ms:
                return bool(ledger.read_outbox(world_id, limit=1))
    return bool(ledger.read_outbox(world_id, limit=1))


def retry_delay_ms(env: Any) -> int:
    """`AUDIT_RETRY_DELAY_MS` from the Worker's vars: the first pause after a failed send."""
    return env_int(env, "AUDIT_RETRY_DELAY_MS", RETRY_DELAY_MS, 1, MAX_RETRY_DELAY_MS)


@dataclass
class DeliveryRetry:
    """The queue's failure streak: when delivery may run again. In the object's memory: a fresh
    object (after an eviction) tries at its first alarm."""

    delay_ms: int = RETRY_DELAY_MS
    failures: int = 0
    retry_at_ms: int = 0

    def due(self, now_ms: int) -> bool:
        return now_ms >= self.retry_at_ms

    def failed(self, now_ms: int) -> int:
        """Count a failure; answer when to try again."""
        self.failures += 1
        self.retry_at_ms = now_ms + min(MAX_RETRY_DELAY_MS, self.delay_ms * 2 ** min(self.failures - 1, 20))
        return self.retry_at_ms

    def succeeded(self) -> int:
        """End the streak; answer how many failures it had."""
        failures, self.failures, self.retry_at_ms = self.failures, 0, 0
        return failures
