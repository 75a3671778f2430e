"""Cloudflare's published prices for what a deployment of archetype uses (Workers Paid plan, USD),
in one place: bench/workerd_runtime.py prices what it measured with them, and a cost model
(`usd`) any bench can import.

Read on 2026-12-02 from Cloudflare's documentation (developers.cloudflare.com; the same tables
are in github.com/cloudflare/cloudflare-docs, src/content/partials/workers/):

- Durable Objects compute (durable-objects/platform/pricing): requests $0.15 per million beyond
  1 million a month (HTTP requests, RPC sessions, alarm invocations: every RPC method call on a
  stub is one); duration $12.50 per million GB-s beyond 400,000 GB-s, billed at 128 MB per object
  whatever it uses, in wall-clock time while the object runs or is idle but cannot hibernate.
- SQLite-backed Durable Object storage (durable_objects storage billing, "SQLite storage
  backend"): rows read $0.001 per million beyond 25 billion a month; rows written $1.00 per
  million beyond 50 million a month; stored data $0.20 per GB-month beyond 5 GB; each `setAlarm`
  is billed as one row written.
- Workers Standard (workers/platform/pricing): requests $0.30 per million beyond 10 million a
  month; CPU time $0.02 per million CPU milliseconds beyond 30 million.
- Queues (queues/platform/pricing): $0.40 per million operations beyond 1 million a month; a
  delivered message of up to 64 KB costs three (a write, a read, a delete).

The plan's monthly included amounts and its $5 a month are left out: every figure here is the
marginal price of one more unit, which is what a per-command or per-world-hour cost is.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

PRICES_READ_ON = "2026-12-02"
MILLION = 1_000_000
OBJECT_GB = 0.128  # duration is billed for the 128 MB an object is allocated
HOURS_PER_MONTH = 730  # a GB-month, spread over its hours


@dataclass(frozen=True)
class Prices:
    """USD per unit."""

    object_request: float = 0.15 / MILLION  # an RPC call, an HTTP request or an alarm invocation
    object_gb_second: float = 12.50 / MILLION
    row_read: float = 0.001 / MILLION
    row_written: float = 1.00 / MILLION
    stored_gb_month: float = 0.20
    worker_request: float = 0.30 / MILLION
    worker_cpu_ms: float = 0.02 / MILLION
    queue_operation: float = 0.40 / MILLION


PRICES = Prices()


@dataclass(frozen=True)
class Usage:
    """Billable units of some piece of work (a command's lifecycle, an hour of a world)."""

    object_requests: float = 0.0
    object_seconds: float = 0.0  # wall-clock seconds an object is billed for (at 128 MB)
    rows_read: float = 0.0
    rows_written: float = 0.0
    stored_gb_months: float = 0.0
    worker_requests: float = 0.0
    worker_cpu_ms: float = 0.0
    queue_operations: float = 0.0

    def __add__(self, other: Usage) -> Usage:
        return Usage(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def __mul__(self, factor: float) -> Usage:
        return Usage(*(getattr(self, f.name) * factor for f in fields(self)))


def usd_by_item(usage: Usage, prices: Prices = PRICES) -> dict[str, float]:
    """What each kind of unit of `usage` costs."""
    return {
        "object requests": usage.object_requests * prices.object_request,
        "object duration": usage.object_seconds * OBJECT_GB * prices.object_gb_second,
        "rows read": usage.rows_read * prices.row_read,
        "rows written": usage.rows_written * prices.row_written,
        "storage": usage.stored_gb_months * prices.stored_gb_month,
        "worker requests": usage.worker_requests * prices.worker_request,
        "worker CPU": usage.worker_cpu_ms * prices.worker_cpu_ms,
        "queue": usage.queue_operations * prices.queue_operation,
    }


def usd(usage: Usage, prices: Prices = PRICES) -> float:
    return sum(usd_by_item(usage, prices).values())
