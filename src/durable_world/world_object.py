"""The Durable Object holding one world: the shared ledger over the object's SQLite storage.

Every method in `LEDGER_METHODS` (and `FORK_COPY_METHODS`, the steps of a fork's copy between two
objects, which the Worker's authority drives) is an RPC method taking one plain-JSON object of keyword
arguments and answering the envelope of `durable_world.envelope`. After every call but a read
(`READS`), the object arms its one alarm for what the world now needs: unsent outbox events (any
method may append one: admission, a crash charged on lease, publication, a tick failure's
`world_stalled`, a redrive, a schema migration, destroy's cancellations) and, for an edge-hosted
world (durable_world.edge), its next due step (a command admitted or redriven into an idle world).
The alarm sends the outbox to the audit Queue and applies the retention policy (bounded per
alarm), runs an edge-hosted world's tick when its clock says one is due, and re-arms for the next.

One alarm, at least once: the runtime may run it again after a crash or a failed handler. That
never repeats a tick: each tick publishes as the successor of the ledger's tick head under its own
commit token, so a repeated alarm can only run the *next* tick, from the published state. The
handler arms a fallback before its work and lets no error out: workerd retries a failed handler
only a few times before it drops the alarm, and a dropped alarm would stop the world.
"""

from __future__ import annotations

import inspect
import logging
from types import ModuleType
from typing import Any

from archetype.commands.errors import (
    CommandError,
    InvalidCommandError,
    WorldClosingError,
    WorldEdgeHostedError,
    WorldNotFoundError,
)
from archetype.commands.failure_streak import FailureStreak
from archetype.commands.ledger import FORK_COPY_METHODS, LEDGER_METHODS, Ledger
from archetype.commands.port import Clock, SystemClock
from durable_world.delivery import DeliveryRetry, deliver_outbox, retry_delay_ms
from durable_world.directory import WorldDirectory
from durable_world.edge import EdgeRuntime, Retention, tick_interval_ms
from durable_world.envelope import failure, success
from durable_world.ffi import number_or_none, to_py
from durable_world.logs import for_world, world_context
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
# Calls that open no command and append no outbox event: nothing to arm after them (every other
# call arms what its world needs; tests/durable_object/arming.py holds each method to its row).
READS = frozenset({
    "world_info", "list_worlds", "live_runners", "hosted_worlds", "pending_worlds", "load_state", "read_state",
    "command", "commands_by_id", "history", "manifests", "read_outbox", "read_outbox_columns", "watermark",
    "next_due_tick", "components",
    # a fork's copy (docs/ledger.md, "Forks on the Durable Object"): its pages become a world, with
    # its events, only at fork_activate; fork_plan appends the source's event
    "fork_begin", "fork_page", "fork_write", "fork_release",
})  # fmt: skip
# A short delay lets a burst of admissions share one batch (a failed send waits longer: DeliveryRetry).
DELIVERY_DELAY_MS = 1_000
# An alarm whose work failed runs again after this pause (the fallback armed before the work), and
# an alarm set within it is left as it is.
FALLBACK_DELAY_MS = 10_000
# The times `ctx.storage.setAlarm` accepts (workerd keeps an alarm as nanoseconds since the epoch
# in 64 bits, and refuses a time <= 0); a step due later is as good as never: the alarm is set at
# the latest time, which fires, finds nothing due, and re-arms.
MIN_ALARM_MS = 1
MAX_ALARM_MS = 9_223_372_036_854


class WorldObject(DurableObject):  # type: ignore[misc]  # `workers` exists only on workerd: Any here
    # The user's modules (the module hook, durable_world.edge): the Worker's entry sets them from
    # the bundle that `stage.py --module` built; tests pass `modules`.
    MODULES: tuple[ModuleType, ...] = ()

    def __init__(self, ctx: Any, env: Any, clock: Clock | None = None,
                 modules: tuple[ModuleType, ...] | None = None) -> None:  # fmt: skip
        super().__init__(ctx, env)
        self.clock = clock or SystemClock()
        self.ledger = Ledger(DurableObjectSqlPort(ctx.storage), self.clock)
        self.tick_interval_ms = tick_interval_ms(env)
        self.edge = EdgeRuntime(self.ledger, self.MODULES if modules is None else modules, clock=self.clock,
                                tick_interval_ms=self.tick_interval_ms)  # fmt: skip
        self.retention = Retention.of(env)
        self.delivery_retry = DeliveryRetry(retry_delay_ms(env))
        # In memory: a fresh object (after an eviction) prunes at its first alarm, which is bounded anyway.
        self._prune_due_ms = 0
        # Counts the calls that may arm the alarm: one served while the handler awaits may have
        # armed something the handler's own re-arm must keep.
        self._writes_served = 0
        self._failing = {duty: FailureStreak(log, subject) for duty, subject in
                         (("delivery", "audit delivery"), ("retention", "the world object's retention"))}  # fmt: skip

    async def _call(self, method: str, args: Any) -> dict[str, Any]:
        args = to_py(args) if args is not None else {}
        ledger_method = getattr(self.ledger, method)
        if method not in READS:
            self._writes_served += 1
        try:
            if not isinstance(args, dict):
                raise InvalidCommandError(f"{method} takes one object of named arguments")
            try:
                inspect.signature(ledger_method).bind(**args)
            except TypeError as exc:
                raise InvalidCommandError(f"bad arguments for {method}: {exc}") from None
            if method in ("acquire_writer", "claim_world") and self.edge.hosts(args["world_id"]):
                raise WorldEdgeHostedError(
                    f"world {args['world_id']!r} is stepped by its Durable Object; a remote runner cannot take its writer"
                )
            if method == "destroy":
                # Armed before the destroy starts: if the object dies between its transactions,
                # the alarm finishes it (alarms survive restarts; see `alarm`).
                await self._arm_alarm(DELIVERY_DELAY_MS)
            result = ledger_method(**args)
        except CommandError as exc:
            return failure(exc)
        if method not in READS and isinstance(args.get("world_id"), str):
            await self._arm_for(args["world_id"])
        return success(result)

    async def _arm_for(self, world_id: str) -> None:
        """Arm the alarm for what the world needs now: delivery of unsent events, its next step."""
        try:
            if self._queue() is not None and self.ledger.watermark(world_id)["pending"] > 0:
                await self._arm_alarm(DELIVERY_DELAY_MS)
            at = await self.edge.next_step_at(world_id) if self.edge.hosts(world_id) else None
        except CommandError:  # the world is gone or closing: it has nothing left to step
            return
        if at is not None:
            await self._arm_alarm_by(at)

    async def _arm_alarm(self, delay_ms: int) -> None:
        """Arm the alarm `delay_ms` from now, unless one is set within FALLBACK_DELAY_MS (a pending
        retry keeps its pause; an alarm set later, for a step far ahead, is brought forward)."""
        now, current = self.clock.now_ms(), number_or_none(await self.ctx.storage.getAlarm())
        if current is None or current > now + FALLBACK_DELAY_MS:
            await self._set_alarm(now + delay_ms)

    async def _arm_alarm_by(self, at_ms: int) -> None:
        """The alarm fires at `at_ms` or sooner: an alarm already set sooner stays."""
        current = number_or_none(await self.ctx.storage.getAlarm())
        if current is None or current > alarm_time(at_ms):
            await self._set_alarm(at_ms)

    async def _set_alarm(self, at_ms: int) -> None:
        await self.ctx.storage.setAlarm(alarm_time(at_ms))

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
        """The runtime's alarm: the work of `_alarm_work`, armed first so that nothing it raises
        (nor the object dying in it) leaves the world without an alarm, and re-armed for what it
        found due (no alarm: nothing due). Only a failure to arm at all leaves the handler, for
        the runtime's own retries."""
        fallback = alarm_time(self.clock.now_ms() + FALLBACK_DELAY_MS)
        await self.ctx.storage.setAlarm(fallback)
        writes_served = self._writes_served
        try:
            due = await self._alarm_work()
        except Exception:
            log.exception("the alarm's work failed; it runs again in %d ms", FALLBACK_DELAY_MS)
            return
        try:
            if self._writes_served != writes_served:  # a call may have armed it meanwhile: only ever sooner
                if due:
                    await self._arm_alarm_by(min(due))
            elif due:
                await self._set_alarm(min(due))
            else:
                await self.ctx.storage.deleteAlarm()
        except Exception:
            log.exception("re-arming the alarm failed; the fallback fires in %d ms", FALLBACK_DELAY_MS)

    async def _alarm_work(self) -> list[int]:
        """Finish interrupted destroys, step the edge-hosted worlds that are due, deliver the
        outbox, prune; answer when each wants the alarm again."""
        worlds = self.ledger.list_worlds()
        for world in worlds:
            if world["status"] == "CLOSING":  # a destroy interrupted between its transactions
                self.ledger.destroy(world["world_id"])
        wake = [
            await self._tick(w["world_id"])
            for w in worlds
            if w["status"] == "ACTIVE" and self.edge.hosts(w["world_id"])
        ]
        next_tick = min((at for at in wake if at is not None), default=None)
        wake.append(await self._deliver(worlds, stop_at_ms=next_tick))
        wake.append(self._prune(worlds))
        return [at for at in wake if at is not None]

    @for_world
    async def _tick(self, world_id: str) -> int | None:
        """Run the tick of an edge-hosted world if one is due; answer when the next one is (None: idle)."""
        try:
            return await self.edge.step_due(world_id)
        except (WorldClosingError, WorldNotFoundError):  # closing or destroyed meanwhile: the host dropped it
            return None
        except Exception:
            # Handled here, not left to the runtime's bounded alarm retries: the world keeps ticking, after
            # the host's backoff. The host recorded the failure (STALLED) and logged it, once per stall.
            retry_at = self.edge.retry_at_ms(world_id)
            return self.clock.now_ms() + self.tick_interval_ms if retry_at is None else retry_at

    async def _deliver(self, worlds: list[Any], stop_at_ms: int | None) -> int | None:
        """Send the audit outbox (until `stop_at_ms`, when the next tick is due); answer when
        delivery must run again (None: all sent). A failure is retried with backoff, not at every
        alarm, and logged once per failure streak."""
        queue = self._queue()
        if queue is None:
            return None
        retry = self.delivery_retry
        if not retry.due(self.clock.now_ms()):
            return retry.retry_at_ms
        more = False
        for world in worlds:
            world_id = world["world_id"]
            with world_context(world_id):
                try:
                    more = await deliver_outbox(self.ledger, world_id, queue, now_ms=self.clock.now_ms,
                                                stop_at_ms=stop_at_ms) or more  # fmt: skip
                except Exception as exc:
                    # Handled here rather than left to the runtime's bounded alarm retries, so unsent
                    # events are never stranded: the alarm stays armed until the queue takes them.
                    now = self.clock.now_ms()
                    retry_at = retry.failed(now)
                    self._failing["delivery"].failed(exc, f"world {world_id} failed; retrying in {retry_at - now} ms, "
                                                          "backing off while it fails")  # fmt: skip
                    return retry_at
                if retry.failures:
                    retry.succeeded()
                    self._failing["delivery"].succeeded()
        return self.clock.now_ms() if more else None


    def _prune(self, worlds: list[Any]) -> int | None:
        """Apply the retention policy (docs/ledger.md, "Retention") to the object's worlds, at most
        every `PRUNE_INTERVAL_MS`, one bounded `prune` per world per alarm; answer when to go on
        (None: nothing left, and no alarm is kept armed for pruning alone: an idle world is
        pruned when it next wakes)."""
        now = self.clock.now_ms()
        if now < self._prune_due_ms:
            return None
        self._prune_due_ms = now + self.retention.interval_ms
        policy, more = self.retention, False
        for world in worlds:
            if world["status"] != "ACTIVE":
                continue
            try:
                pruned = self.ledger.prune(world["world_id"], policy.keep_ticks, policy.idempotency_window_ms, policy.limit)
            except Exception as exc:  # pruning waits for the next alarm; it never stops a tick or a delivery
                self._failing["retention"].failed(exc, f"pruning world {world['world_id']} failed; trying again later")
                continue
            self._failing["retention"].succeeded("prunes again")
            more = more or not pruned["done"]
        if more:
            self._prune_due_ms = now + DELIVERY_DELAY_MS
            return self._prune_due_ms
        return None


def alarm_time(at_ms: int) -> int:
    """`at_ms` within the times `setAlarm` accepts."""
    return min(max(at_ms, MIN_ALARM_MS), MAX_ALARM_MS)


def _rpc_method(method: str) -> Any:
    async def rpc(self: WorldObject, args: Any = None) -> dict[str, Any]:
        args = to_py(args) if args is not None else None
        with world_context(args.get("world_id") if isinstance(args, dict) else None):
            return await self._call(method, args)

    rpc.__name__ = rpc.__qualname__ = method
    rpc.__doc__ = f"RPC for Ledger.{method}: one object of named arguments in, a result envelope out."
    return rpc


for _method in LEDGER_METHODS + FORK_COPY_METHODS:
    setattr(WorldObject, _method, _rpc_method(_method))
