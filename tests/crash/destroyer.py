"""A process that dies in the middle of `Ledger.destroy`: SIGKILL from inside its own SQL port.

Modes (counting destroy's transactions from 1: the first closes admission, each next one cancels
up to CANCEL_BATCH open commands, the last also marks the world DESTROYED):
  after:N   SIGKILL right after transaction N committed
  inside:N  SIGKILL inside transaction N, after its cancelling UPDATE and before its events and
            COMMIT (SQLite rolls the whole transaction back)
Exit code -9 is the expected outcome; 0 means destroy finished before the kill point (a test bug).
Usage: python -m tests.crash.destroyer DATA_DIR WORLD_ID MODE
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from archetype.commands import ledger_sql as q
from archetype.commands.ledger import Ledger
from archetype.commands.port import SystemClock
from local_catalog import CATALOG_FILE, SqliteSqlPort

T = TypeVar("T")


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class DyingPort(SqliteSqlPort):
    def __init__(self, path: Path, when: str, transaction: int) -> None:
        super().__init__(path)
        self.when, self.kill_at = when, transaction
        self.transactions = -1  # armed by `arm()`, once the ledger has opened (and migrated) the catalog

    def arm(self) -> None:
        self.transactions = 0

    def transaction(self, fn: Callable[[], T]) -> T:
        if self._depth or self.transactions < 0:
            return super().transaction(fn)
        self.transactions += 1
        result = super().transaction(fn)
        if self.when == "after" and self.transactions == self.kill_at:
            die()
        return result

    def execute(self, sql: str, params: Sequence[object] = ()) -> list[tuple]:
        rows = super().execute(sql, params)
        if self.when == "inside" and self.transactions == self.kill_at and sql == q.CANCEL_COMMANDS:
            die()
        return rows


def main(data: str, world_id: str, mode: str) -> None:
    when, _, number = mode.partition(":")
    if when not in ("after", "inside") or not number.isdigit():
        raise SystemExit(f"mode must be after:N or inside:N, not {mode!r}")
    port = DyingPort(Path(data) / CATALOG_FILE, when, int(number))
    ledger = Ledger(port, SystemClock())
    port.arm()
    print(ledger.destroy(world_id), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
