"""The Durable Object holding one world: the shared ledger over the object's SQLite storage.

Every method in `LEDGER_METHODS` is an RPC method taking one plain-JSON object of keyword
arguments and answering the envelope of `durable_world.envelope`. Calls that can append outbox
events arm the alarm, and the alarm sends the outbox to the audit Queue.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

from archetype.commands.errors import CommandError, InvalidCommandError
from archetype.commands.ledger import LEDGER_METHODS, Ledger
from archetype.commands.port import Clock, SystemClock
from durable_world.delivery import deliver_outbox
from durable_world.directory import WorldDirectory
from durable_world.envelope import failure, success
from durable_world.ffi import number_or_none, to_py
from durable_world.port import DurableObjectSqlPort

try:
    from workers import DurableObject
except ImportError:  # CPython: the same constructor shape, hosted by the stand-in runtime in tests

    class DurableObject:  # type: ignore[no-redef]
        def __init__(self, ctx: Any, env: Any) -> None:
            self.ctx = ctx
            self.env = env


log = logging.getLogger(__name__)

QUEUE_BINDING = "AUDIT_QUEUE"
# Calls whose transaction may append outbox events (admission, a crash charged on lease,
# publication, cancellation on destroy).
EVENT_WRITERS = frozenset({"admit", "lease", "publish", "destroy"})
# A short delay lets a burst of admissions share one batch; a failed send is retried after a pause.
DELIVERY_DELAY_MS = 1_000
RETRY_DELAY_MS = 10_000


class WorldObject(DurableObject):  # type: ignore[misc]  # `workers` exists only on workerd: Any here
    def __init__(self, ctx: Any, env: Any, clock: Clock | None = None) -> None:
        super().__init__(ctx, env)
        self.clock = clock or SystemClock()
        self.ledger = Ledger(DurableObjectSqlPort(ctx.storage), self.clock)

    async def _call(self, method: str, args: Any) -> dict[str, Any]:
        args = to_py(args) if args is not None else {}
        ledger_method = getattr(self.ledger, method)
        try:
            if not isinstance(args, dict):
                raise InvalidCommandError(f"{method} takes one object of named arguments")
            try:
                inspect.signature(ledger_method).bind(**args)
            except TypeError as exc:
                raise InvalidCommandError(f"bad arguments for {method}: {exc}") from None
            if method == "destroy":
                # Armed before the destroy starts: if the object dies between its transactions,
                # the alarm finishes it (alarms survive restarts; see `alarm`).
                await self._arm_alarm(DELIVERY_DELAY_MS)
            result = ledger_method(**args)
        except CommandError as exc:
            return failure(exc)
        if method in EVENT_WRITERS:
            await self._schedule_delivery(args["world_id"])
        return success(result)

    async def _schedule_delivery(self, world_id: str) -> None:
        if self._queue() is not None and self.ledger.watermark(world_id)["pending"] > 0:
            await self._arm_alarm(DELIVERY_DELAY_MS)

    async def _arm_alarm(self, delay_ms: int) -> None:
        if number_or_none(await self.ctx.storage.getAlarm()) is None:
            await self.ctx.storage.setAlarm(self.clock.now_ms() + delay_ms)

    # -- the directory object's RPC (durable_world.directory; only the object named DIRECTORY gets these) --
    async def directory_register(self, args: Any = None) -> dict[str, Any]:
        """Note a world id in the directory."""
        world_id = (to_py(args) or {}).get("world_id") if args is not None else None
        if not isinstance(world_id, str):
            return failure(InvalidCommandError("directory_register takes {world_id}"))
        self._directory().register(world_id, self.clock.now_ms())
        return success(None)

    async def directory_world_ids(self, args: Any = None) -> dict[str, Any]:
        """One page of the directory's world ids, in order, after `after`."""
        after = (to_py(args) or {}).get("after", "") if args is not None else ""
        if not isinstance(after, str):
            return failure(InvalidCommandError("directory_world_ids takes {after}"))
        return success(self._directory().world_ids(after))

    def _directory(self) -> WorldDirectory:
        if not hasattr(self, "_world_directory"):
            self._world_directory = WorldDirectory(DurableObjectSqlPort(self.ctx.storage))
        return self._world_directory

    def _queue(self) -> Any:
        return getattr(self.env, QUEUE_BINDING, None)

    async def alarm(self, alarm_info: Any = None) -> None:
        worlds = self.ledger.list_worlds()
        for world in worlds:
            if world["status"] == "CLOSING":  # a destroy interrupted between its transactions
                self.ledger.destroy(world["world_id"])
        queue = self._queue()
        if queue is None:
            return
        more = False
        for world in worlds:
            try:
                more = await deliver_outbox(self.ledger, world["world_id"], queue) or more
            except Exception:
                # Handled here rather than left to the runtime's bounded alarm retries, so unsent
                # events are never stranded: the alarm stays armed until the queue takes them.
                log.exception("audit delivery of world %s failed; retrying in %d ms", world["world_id"], RETRY_DELAY_MS)
                await self.ctx.storage.setAlarm(self.clock.now_ms() + RETRY_DELAY_MS)
                return
        if more:
            await self.ctx.storage.setAlarm(self.clock.now_ms())


def _rpc_method(method: str) -> Any:
    async def rpc(self: WorldObject, args: Any = None) -> dict[str, Any]:
        return await self._call(method, args)

    rpc.__name__ = rpc.__qualname__ = method
    rpc.__doc__ = f"RPC for Ledger.{method}: one object of named arguments in, a result envelope out."
    return rpc


for _method in LEDGER_METHODS:
    setattr(WorldObject, _method, _rpc_method(_method))
