"""The ledger's runner registry as a runner takes part in it (docs/ledger.md, "The runner registry"):
its registration (`RunnerRegistry`), what it reads and writes of a catalog (`RunnerCatalog`), and
how the live runners split the worlds among them (`host_of`). `serve`'s runners and remote ones
(archetype.remote_runner) all take part the same way (docs/cli.md, "Cooperating runners")."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from typing import Protocol

from archetype.commands.errors import RunnerIdHeldError
from archetype.commands.failure_streak import FailureStreak
from archetype.commands.ledger_rows import PendingWorld, RunnerRow, WorldRow
from archetype.settings import ConfigurationError
from archetype.world.error_text import error_text, safe_text

log = logging.getLogger("archetype.serve")


class RunnerBusyError(ConfigurationError):
    """A live runner (a `serve` on this data directory, or any runner in the registry) already runs this runner id."""


def host_of(world_id: str, runners: list[str]) -> str:
    """The runner that should host `world_id` among the live `runners` (rendezvous hashing): each
    runner's fair share, and when a runner joins or dies only the worlds it gains or loses move."""
    return max(runners, key=lambda runner: hashlib.blake2b(f"{runner}\0{world_id}".encode(), digest_size=8).digest())


class RunnerCatalog(Protocol):
    """What a `WorldRunner` reads and writes besides its worlds' own ledger calls: the due-time index
    and the runner registry. Every `Authority` has them: the local catalog, the HTTP authority (over
    the runner protocol), the Durable Objects."""

    async def pending_worlds(self) -> list[PendingWorld]: ...
    async def hosted_worlds(self, owner: str) -> list[WorldRow]: ...
    async def claim_world(self, world_id: str, owner: str, lease_ms: int) -> WorldRow: ...
    async def release_world(self, world_id: str, owner: str, writer_epoch: int) -> WorldRow: ...
    async def register_runner(self, runner_id: str, instance: str, lease_ms: int) -> RunnerRow: ...
    async def leave_runner(self, runner_id: str, instance: str) -> RunnerRow | None: ...
    async def live_runners(self) -> list[RunnerRow]: ...


class RunnerRegistry:
    """This runner's registration in the ledger's runner registry (docs/ledger.md, "The runner
    registry"). Every runner of a catalog registers there, `serve`'s and remote ones alike, so the
    live registrations are one list that `host_of` splits the worlds among. A registration lasts
    `lease_ms` unrenewed: a runner that dies leaves the list when it expires, one that stops
    cleanly leaves it at once."""

    def __init__(self, catalog: RunnerCatalog, runner_id: str, instance: str, lease_ms: int) -> None:
        self.catalog, self.runner_id, self.instance, self.lease_ms = catalog, runner_id, instance, lease_ms
        self._beats = FailureStreak(log, f"runner {runner_id}")
        # False once another process took the id over (this one's registration had expired): world
        # leases name the runner id, so they cannot tell the two apart, and this one must step nothing.
        self.held = True

    async def join(self) -> None:
        """Register, or refuse with one line: another process holds this id live."""
        try:
            await self.catalog.register_runner(self.runner_id, self.instance, self.lease_ms)
        except RunnerIdHeldError as exc:
            raise RunnerBusyError(f"{exc.message}; give this runner another --runner-id") from None

    async def beat(self) -> None:
        """Renew the registration. Refused when another process took the id over after it expired:
        this runner then steps nothing (`held`), and takes the id back once that one's registration
        expired."""
        try:
            await self.catalog.register_runner(self.runner_id, self.instance, self.lease_ms)
            self.held = True
            self._beats.succeeded("its registration is renewed again")
        except RunnerIdHeldError as exc:
            if self.held:
                log.error("runner %s is not live: %s; stepping nothing until it is", self.runner_id, safe_text(exc.message))
            self.held = False
        except Exception as exc:  # the catalog did not answer: the registration holds until it expires
            self._beats.failed(exc, "renewing its registration failed; trying again")

    async def keep(self, stop: asyncio.Event, every_s: float) -> None:
        """Renew the registration every `every_s` until `stop`, then leave the registry: the share of
        a runner stopping cleanly moves at once (its world leases are given back at close)."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=every_s)
            if stop.is_set():
                await self.leave()
                return
            await self.beat()

    async def live(self) -> list[str]:
        """The live runner ids, sorted; none while this runner does not hold its own id (no share is its)."""
        return [row["runner_id"] for row in await self.catalog.live_runners()] if self.held else []

    async def leave(self) -> None:
        try:
            await self.catalog.leave_runner(self.runner_id, self.instance)
        except Exception as exc:  # it expires by itself: the others take its share a lease later
            log.warning("runner %s could not leave the runner registry: %s", self.runner_id, error_text(exc))
