"""Retention across worlds: the ledger's `prune` (docs/ledger.md, "Retention") for every world of an
authority, batch after batch, what `archetype serve` runs periodically and `archetype catalog prune`
runs on demand. The policy itself lives in the ledger, identical on every authority; this only
walks the worlds."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from archetype.commands.authority import Authority
from archetype.commands.failure_streak import FailureStreak
from archetype.commands.ledger import DEFAULT_IDEMPOTENCY_WINDOW_MS, DEFAULT_KEEP_TICKS, PRUNE_LIMIT
from archetype.commands.ledger_rows import Pruned
from archetype.settings import ServeSettings

log = logging.getLogger("archetype.retention")

PRUNED_KINDS = ("ticks", "commands", "reservations", "quota_rows", "state_rows")


@dataclass(frozen=True)
class RetentionPolicy:
    keep_ticks: int = DEFAULT_KEEP_TICKS
    idempotency_window_ms: int = DEFAULT_IDEMPOTENCY_WINDOW_MS
    limit: int = PRUNE_LIMIT  # rows of each kind per transaction

    @classmethod
    def of(cls, config: ServeSettings) -> RetentionPolicy:
        return cls(keep_ticks=config.keep_ticks, idempotency_window_ms=round(config.idempotency_window * 1000))


async def prune_world(authority: Authority, world_id: str, policy: RetentionPolicy) -> dict[str, int]:
    """Prune one world until nothing prunable is left; answer the totals by kind."""
    totals = dict.fromkeys(PRUNED_KINDS, 0)
    while True:
        pruned: Pruned = await authority.prune(world_id, policy.keep_ticks, policy.idempotency_window_ms, policy.limit)
        for kind in PRUNED_KINDS:
            totals[kind] += pruned[kind]  # type: ignore[literal-required]  # PRUNED_KINDS are Pruned's int keys
        if pruned["done"]:
            return totals


async def prune_all(authority: Authority, policy: RetentionPolicy,
                    progress: Callable[[str, dict[str, int]], None] | None = None) -> dict[str, int]:  # fmt: skip
    """Prune every world; `progress(world_id, totals)` is called after each one."""
    totals = dict.fromkeys(PRUNED_KINDS, 0)
    for world in await authority.list_worlds():
        removed = await prune_world(authority, world["world_id"], policy)
        for kind in PRUNED_KINDS:
            totals[kind] += removed[kind]
        if progress is not None:
            progress(world["world_id"], removed)
    return totals


async def run_retention(authority: Authority, policy: RetentionPolicy, stop: asyncio.Event, interval_s: float) -> None:
    """Prune every world every `interval_s` seconds until `stop` is set (the first run at once)."""
    failing = FailureStreak(log, "retention")
    while not stop.is_set():
        try:
            totals = await prune_all(authority, policy)
            if any(totals.values()):
                log.info("pruned %s", totals)
            failing.succeeded("prunes again")
        except Exception as exc:
            failing.failed(exc, f"pruning failed; trying again in {interval_s:.0f} s")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval_s)
