"""The authorities the conformance suite runs against. Each factory is an async context manager
taking (directory, clock) and yielding an `Authority`; add a factory here and every conformance
test runs against it too."""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path

from archetype.commands.port import ManualClock
from local_catalog import open_local_authority


@asynccontextmanager
async def local_in_process(directory: Path, clock: ManualClock):
    authority = open_local_authority(directory, clock=clock)
    try:
        yield authority
    finally:
        await authority.close()


AUTHORITY_FACTORIES = {
    "local": local_in_process,
}
