"""Open the per-storage catalog: `<directory>/catalog.sqlite3`, shared by every process on the machine."""

from __future__ import annotations

from pathlib import Path

from archetype.commands.ledger import Ledger
from archetype.commands.port import Clock, SystemClock
from local_catalog.port import SqliteSqlPort
from local_catalog.writer import WriterThreadAuthority

CATALOG_FILE = "catalog.sqlite3"


def open_local_authority(directory: str | Path, *, clock: Clock | None = None, synchronous: str = "FULL") -> WriterThreadAuthority:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    port = SqliteSqlPort(directory / CATALOG_FILE, synchronous=synchronous)
    return WriterThreadAuthority(Ledger(port, clock or SystemClock()), port)
