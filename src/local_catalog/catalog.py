"""Open the per-storage catalog: `<directory>/catalog.sqlite3`, shared by every process on the machine."""

from __future__ import annotations

import sys
from pathlib import Path

from archetype.commands.authority import InProcessAuthority
from archetype.commands.ledger import Ledger
from archetype.commands.port import Clock, SystemClock
from local_catalog.port import SqliteSqlPort
from local_catalog.reader import CatalogReader
from local_catalog.writer import WriterThreadAuthority

CATALOG_FILE = "catalog.sqlite3"


def open_local_authority(directory: str | Path, *, clock: Clock | None = None, synchronous: str = "FULL") -> InProcessAuthority:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    port = SqliteSqlPort(directory / CATALOG_FILE, synchronous=synchronous)
    clock = clock or SystemClock()
    ledger = Ledger(port, clock)
    if sys.platform == "emscripten":  # Pyodide has no threads: its ledger calls run in-process, on the loop
        return InProcessAuthority(ledger, close=port.close)
    return WriterThreadAuthority(ledger, port, reader=CatalogReader(directory / CATALOG_FILE, clock))
