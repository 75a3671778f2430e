"""AuditLog: projects ledger outbox events into the Iceberg audit table and serves GetAuditHistory.

Per world and batch: read the outbox in sequence order, append the batch as ONE Iceberg commit
(carrying the world's new projected sequence), then acknowledge it. Acknowledgement never precedes
the commit, so a failed append leaves the events in the outbox for the next round; a crash after
the commit and before the acknowledgement is repaired from the committed mark on the next round
without appending anything twice. CPython only; never imported by Worker code.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from archetype.audit.catalog import local_catalog
from archetype.audit.maintenance import Maintenance, maintain
from archetype.audit.schema import columns_to_arrow
from archetype.audit.table import AuditTable
from archetype.audit.writer import ProcessWriter, encode
from archetype.commands.audit_history import AuditEvent, GetAuditHistory
from archetype.commands.authority import Authority
from archetype.commands.failure_streak import FailureStreak
from archetype.commands.ledger_rows import Watermark

log = logging.getLogger(__name__)

DEFAULT_BATCH = 5_000
Progress = Callable[[int], None]
Backlog = Callable[[], Awaitable[Sequence[Watermark]]]


class AuditLog:
    def __init__(self, open_table: Callable[[], AuditTable], authority: Authority | None = None,
                 writer: ProcessWriter | None = None, *, batch_size: int = DEFAULT_BATCH,
                 backlog: Backlog | None = None) -> None:  # fmt: skip
        """`backlog` answers the worlds with events pending (at least those; the default, `lag`,
        reads every world's row)."""
        self.authority = authority
        self.backlog = backlog
        self.writer = writer
        self.batch_size = batch_size
        self._open_table = open_table
        self._table: AuditTable | None = None
        self._opening = threading.Lock()

    @classmethod
    def open_local(cls, data_dir: str | Path, authority: Authority | None = None, **options: Any) -> AuditLog:
        """The embedded default: a SqlCatalog + file warehouse under `<data_dir>/audit`, opened on first use."""
        return cls(lambda: AuditTable(local_catalog(data_dir)), authority, ProcessWriter(data_dir), **options)

    @property
    def table(self) -> AuditTable:
        with self._opening:
            if self._table is None:
                self._table = self._open_table()
            return self._table

    # -- projection --
    def _ledger(self) -> Authority:
        if self.authority is None or self.writer is None:
            raise RuntimeError("this audit log reads a projection only; it has no ledger to project from")
        return self.authority

    async def project_world(self, world_id: str, progress: Progress | None = None) -> int:
        """Drain one world's outbox into the table; return the number of rows appended.

        Pipelined, never reordered: while the writer process commits batch N, this process
        acknowledges batch N-1 and reads and encodes batch N+1. Commits stay sequential, and a
        batch is acknowledged only after its own commit.
        """
        ledger = self._ledger()
        writer = self.writer
        assert writer is not None  # _ledger() refuses a log without one
        table = await asyncio.to_thread(lambda: self.table)
        await writer.start()
        sequences, spooled = await self._read(world_id, await self._repair(world_id, table))
        commit = writer.submit(world_id, spooled) if sequences else None
        appended = 0
        try:
            while commit is not None:
                batch = sequences
                sequences, spooled = await self._read(world_id, batch[-1]) if len(batch) == self.batch_size else ([], "")
                appended += await commit
                commit = writer.submit(world_id, spooled) if sequences else None
                await ledger.acknowledge_outbox(world_id=world_id, up_to_seq=batch[-1])
                if progress is not None:
                    progress(len(batch))
        except BaseException:
            if commit is not None:  # let an in-flight commit finish; the next round's repair acknowledges it
                await asyncio.gather(commit, return_exceptions=True)
            raise
        return appended

    async def _read(self, world_id: str, after_seq: int) -> tuple[list[int], str]:
        """The next page's event sequences and its spooled Arrow file ("" when the page is empty)."""
        columns = await self._ledger().read_outbox_columns(world_id=world_id, after_seq=after_seq, limit=self.batch_size
        )
        if not columns["event_seq"]:
            return [], ""
        spool = self.writer.spool if self.writer is not None else None
        assert spool is not None  # project_world() started the writer
        return columns["event_seq"], await asyncio.to_thread(lambda: encode(columns_to_arrow(columns), spool))

    async def _repair(self, world_id: str, table: AuditTable) -> int:
        """Acknowledge what the table already holds but the ledger does not know is projected
        (a crash between commit and acknowledgement); return the sequence to read after."""
        watermark = await self._ledger().watermark(world_id=world_id)
        await asyncio.to_thread(table.table.refresh)  # the writer process commits; this copy may be behind
        committed = min(table.projected_seq(world_id), watermark["committed_seq"])
        if committed > watermark["projected_seq"]:
            await self._ledger().acknowledge_outbox(world_id=world_id, up_to_seq=committed)
        return max(committed, watermark["projected_seq"])

    async def project_once(self, progress: Progress | None = None) -> dict[str, int]:
        """One pass over every world with pending events; return rows appended per world."""
        appended = {}
        for lag in await (self.backlog or self.lag)():
            if lag["pending"]:
                appended[lag["world_id"]] = await self.project_world(lag["world_id"], progress)
        return appended

    async def lag(self) -> list[Watermark]:
        """Per world: committed outbox sequence, projected sequence, and pending = their difference."""
        # From the world rows themselves (what `watermark` reads): one call, not one per world.
        return [
            {"world_id": w["world_id"], "committed_seq": w["next_event_seq"] - 1, "projected_seq": w["projected_seq"],
             "pending": w["next_event_seq"] - 1 - w["projected_seq"]}
            for w in await self._ledger().list_worlds()
        ]

    async def maintain(self, **options: Any) -> Maintenance:
        """Compact partitions and expire old snapshots (see `archetype.audit.maintenance`)."""
        return await asyncio.to_thread(lambda: maintain(self.table, **options))

    async def run_forever(self, stop: asyncio.Event, interval: float = 1.0, maintain_every: float | None = 3600.0) -> None:
        """Project every `interval` seconds until `stop` is set (the `archetype serve` hook), and
        maintain the table every `maintain_every` seconds (None: never).

        A failed round is logged and retried next round; nothing is acknowledged for it.
        """
        maintained = time.monotonic()
        failing = FailureStreak(log, "the audit projector")
        while not stop.is_set():
            try:
                await self.project_once()
                if maintain_every is not None and time.monotonic() - maintained >= maintain_every:
                    maintained = time.monotonic()
                    await self.maintain()
                failing.succeeded("projects again")
            except Exception as exc:  # the projector must outlive a bad round: the outbox keeps the events
                failing.failed(exc, f"a projection round failed; retrying in {interval:.1f} s")
            try:
                await asyncio.wait_for(stop.wait(), timeout=interval)
            except TimeoutError:
                pass

    # -- reading --
    async def history(self, query: GetAuditHistory) -> list[AuditEvent]:
        return await asyncio.to_thread(lambda: self.table.history(query))

    async def close(self) -> None:
        if self.writer is not None:
            await self.writer.close()
        engine = getattr(self._table.catalog, "engine", None) if self._table is not None else None
        if engine is not None:
            engine.dispose()
