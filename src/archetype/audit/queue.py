"""The remote audit path's consumer: a Cloudflare Queue (HTTP pull) into the Iceberg table.

Durable Objects send each outbox event as one JSON message. This consumer follows Cloudflare's
pull-consumer contract:

    POST {api}/accounts/{account_id}/queues/{queue_id}/messages/pull
         {"batch_size": n, "visibility_timeout_ms": t}
      -> {"success": true, "result": {"messages": [{"id", "body", "attempts", "lease_id",
                                                    "timestamp_ms", "metadata"}], ...}}
    POST {api}/accounts/{account_id}/queues/{queue_id}/messages/ack
         {"acks": [{"lease_id"}], "retries": [{"lease_id", "delay_seconds"}]}

A pulled message is leased for the visibility timeout; unacknowledged, it is delivered again.
One round pulls up to `max_events`, appends them as ONE Iceberg commit, and only then acknowledges
them; a failed commit retries every lease. Delivery is at-least-once, so the table may hold a
redelivered event twice: history deduplicates on read and compaction removes the copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from archetype.audit.table import AuditTable
from archetype.commands.failure_streak import FailureStreak
from archetype.commands.ledger import OUTBOX_FIELDS
from archetype.http_client import LIMITS

log = logging.getLogger(__name__)

CLOUDFLARE_API = "https://api.cloudflare.com/client/v4"
MAX_PULL_BATCH = 100  # Cloudflare's largest pull batch


class QueueApiError(RuntimeError):
    """The queue API answered with an error (HTTP status or `success: false`)."""


@dataclass(frozen=True)
class QueueMessage:
    id: str
    lease_id: str
    attempts: int
    body: Any
    metadata: dict[str, Any]


class QueueClient:
    """Cloudflare Queues HTTP pull and acknowledgement for one queue."""

    def __init__(self, account_id: str, queue_id: str, token: str, *, api: str = CLOUDFLARE_API,
                 timeout: float = 30.0) -> None:  # fmt: skip
        self._base = f"{api.rstrip('/')}/accounts/{account_id}/queues/{queue_id}/messages"
        self._http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=timeout, limits=LIMITS)

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await self._http.post(f"{self._base}/{path}", json=body)
        answer = response.json() if response.headers.get("content-type", "").startswith("application/json") else {}
        if response.status_code != 200 or not answer.get("success", False):
            raise QueueApiError(f"queue {path} failed with HTTP {response.status_code}: {answer.get('errors') or response.text[:200]}")
        return answer.get("result") or {}

    async def pull(self, batch_size: int, visibility_timeout_ms: int) -> list[QueueMessage]:
        result = await self._post("pull", {"batch_size": batch_size, "visibility_timeout_ms": visibility_timeout_ms})
        return [
            QueueMessage(m["id"], m["lease_id"], m.get("attempts", 1), m.get("body"), m.get("metadata") or {})
            for m in result.get("messages") or []
        ]

    async def ack(self, acks: Sequence[str], retries: Sequence[str] = (), delay_seconds: int = 0) -> dict[str, Any]:
        return await self._post("ack", {
            "acks": [{"lease_id": lease} for lease in acks],
            "retries": [{"lease_id": lease, "delay_seconds": delay_seconds} for lease in retries],
        })  # fmt: skip

    async def close(self) -> None:
        await self._http.aclose()


def decode_event(message: QueueMessage) -> dict[str, Any] | None:
    """The outbox event a message carries (a JSON message's body arrives as JSON text), or None."""
    body = message.body
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            return None
    if not isinstance(body, dict) or set(body) != set(OUTBOX_FIELDS):
        return None
    return body


class QueueProjector:
    def __init__(self, queue: QueueClient, table: AuditTable, *, max_events: int = 1_000,
                 visibility_timeout_ms: int = 60_000, retry_delay_seconds: int = 10) -> None:  # fmt: skip
        self.queue = queue
        self.table = table
        self.max_events = max_events
        self.visibility_timeout_ms = visibility_timeout_ms
        self.retry_delay_seconds = retry_delay_seconds

    async def _pull_round(self) -> list[QueueMessage]:
        messages: list[QueueMessage] = []
        while len(messages) < self.max_events:
            batch = await self.queue.pull(min(MAX_PULL_BATCH, self.max_events - len(messages)), self.visibility_timeout_ms)
            messages += batch
            if len(batch) < MAX_PULL_BATCH:
                break
        return messages

    async def consume_once(self) -> int:
        """Pull, append as one commit, acknowledge; return the number of events appended."""
        messages = await self._pull_round()
        events: dict[str, dict[str, Any]] = {}
        good: list[str] = []
        bad: list[str] = []
        for message in messages:
            event = decode_event(message)
            (good if event is not None else bad).append(message.lease_id)
            if event is not None:
                events.setdefault(event["event_id"], event)
        if bad:  # not an outbox event: let the queue retry it and, past max_retries, dead-letter it
            log.warning("retrying %d queue message(s) that are not outbox events", len(bad))
        if events:
            try:
                await asyncio.to_thread(self.table.append, list(events.values()))
            except Exception:
                with contextlib.suppress(QueueApiError, httpx.HTTPError):  # else the leases simply expire
                    await self.queue.ack([], good + bad, self.retry_delay_seconds)
                raise
        if good or bad:
            answer = await self.queue.ack(good, bad, self.retry_delay_seconds)
            if answer.get("warnings"):  # e.g. leases that expired during a slow commit: those come back
                log.warning("audit queue ack: %s", answer["warnings"])
        return len(events)

    async def run_forever(self, stop: asyncio.Event, interval: float = 1.0) -> None:
        """Consume until `stop` is set; rounds that drain nothing wait `interval` seconds."""
        failing = FailureStreak(log, "the audit queue consumer")
        while not stop.is_set():
            appended = 0
            try:
                appended = await self.consume_once()
                failing.succeeded("consumes again")
            except Exception as exc:  # the queue keeps what was not acknowledged
                failing.failed(exc, f"a round failed; retrying in {interval:.1f} s")
            if appended < self.max_events:
                try:
                    await asyncio.wait_for(stop.wait(), timeout=interval)
                except TimeoutError:
                    pass
