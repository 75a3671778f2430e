"""The local authority's reads off the writer's path: a thread of their own, on a connection of
their own, that never takes the catalog's write lock.

A read on the writer thread waits behind the admissions and ticks queued before it, and holds the
write lock (an OS lock shared by every process of the catalog, then `BEGIN IMMEDIATE`) for as long
as it decodes: a state read of thousands of entities then delays the stepping process's next
publication, and waits for it. In WAL mode a reader needs neither: each read here is one deferred
transaction, a snapshot of what was committed when it began, taken beside any writer. Its
connection is `query_only`, so a read that tried to write would fail rather than take the lock.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from archetype.commands.ledger import Ledger
from archetype.commands.port import Clock
from local_catalog.port import SqliteSqlPort

# The reads clients make (the HTTP viewer routes), which may decode much: they run here. The rest
# stay on the writer thread, in its order (a runner's reads among its own writes).
READ_METHODS = frozenset({"load_state", "read_state", "command", "commands_by_id", "history"})


class CatalogReader:
    def __init__(self, path: Path, clock: Clock) -> None:
        self._port = SqliteSqlPort(path, read_only=True)
        self._ledger = Ledger(self._port, clock)  # after the writer's: the schema is current, nothing migrates
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="catalog-reader")

    async def rpc(self, method: str, arguments: dict[str, Any]) -> Any:
        fn = getattr(self._ledger, method)
        return await asyncio.get_running_loop().run_in_executor(self._thread, lambda: fn(**arguments))

    def close(self) -> None:
        self._thread.shutdown(wait=True)
        self._port.close()
