"""Runtime: the composition root (CPython). Wires registry, authority, scheduler, worlds, dispatcher."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from archetype.commands.authority import Authority
from archetype.commands.dispatcher import CommandDispatcher
from archetype.commands.families import default_registry
from archetype.commands.host import WorldHost
from archetype.commands.port import Clock
from archetype.commands.scheduler import CommandScheduler


class Runtime:
    def __init__(self, authority: Authority, *, owner: str | None = None, lease_ms: int = 30_000,
                 origin: str = "local", audit: Any = None, world_lease_ms: int | None = None,
                 clock: Clock | None = None) -> None:  # fmt: skip
        """`world_lease_ms`: host worlds under world leases of that length (cooperating runners,
        docs/ledger.md "World leases"); None: loading a world takes its writer outright. `clock`:
        the authority's, which the worlds' tick clocks read (default: the system's)."""
        self.authority = authority
        self.registry = default_registry()
        self.scheduler = CommandScheduler(self.registry, authority, owner=owner, lease_ms=lease_ms)
        self.worlds = WorldHost(authority, self.scheduler, world_lease_ms=world_lease_ms, wall_clock=clock)
        self.audit = audit
        self.dispatcher = CommandDispatcher(self.registry, self.scheduler, self.worlds, origin=origin, audit=audit)

    @classmethod
    async def open_local(cls, path: str | Path, *, clock: Clock | None = None, synchronous: str = "FULL",
                         **options: Any) -> Runtime:  # fmt: skip
        """The embedded default: the SQLite catalog under `path` (created if missing), and the
        audit projection beside it (`audit=None` opts out)."""
        from archetype.audit import AuditLog
        from local_catalog import open_local_authority

        authority = open_local_authority(path, clock=clock, synchronous=synchronous)
        options.setdefault("audit", AuditLog.open_local(path, authority))
        return cls(authority, clock=clock, **options)

    @classmethod
    async def open_remote(cls, url: str, *, token: str, **options: Any) -> Runtime:
        """A runtime over an HTTP authority (`archetype serve` or the Worker): stepping needs an
        operator token, creating/destroying worlds and trusted admission an admin token."""
        from archetype.remote import HttpAuthority

        return cls(HttpAuthority(url, token=token), **options)

    async def close(self) -> None:
        await self.worlds.close()
        if hasattr(self.audit, "close"):
            await self.audit.close()
        await self.authority.close()

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
