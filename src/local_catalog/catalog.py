"""Open the per-storage catalog: `<directory>/catalog.sqlite3`, shared by every process on the machine."""

from __future__ import annotations

from pathlib import Path

from archetype.commands.authority import InProcessAuthority
from archetype.commands.ledger import Ledger
from archetype.commands.port import Clock, SystemClock
from local_catalog.port import SqliteSqlPort

CATALOG_FILE = "catalog.sqlite3"


def open_local_authority(directory: str | Path, *, clock: Clock | None = None, synchronous: str = "FULL") -> InProcessAuthority:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    port = SqliteSqlPort(directory / CATALOG_FILE, synchronous=synchronous)
    return InProcessAuthority(Ledger(port, clock or SystemClock()), close=port.close)
