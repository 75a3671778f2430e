"""Single durable admissions made in one turn of the event loop, carried to the ledger together.

Concurrent HTTP submissions arrive together: a turn of `archetype serve`'s loop starts the
requests of every connection that became readable at once. Each admitted alone makes its own trip
through the scheduler, the authority and the catalog's writer thread; on the loop that trip was
about as costly as the checks of the command itself. `CoalescedAdmissions.admit_as` checks each
admission in its caller's task exactly as `CommandDispatcher.defer_as` does (role, durable
registration, row, component schemas), so whatever refuses it there refuses it as before. The
rows checked one after another in one turn, of one world, quota and principal, then go to the
authority in one `admit_each`, which answers each as its `admit` alone would have (the writer
thread admits them as one batch and, should the batch be refused, each alone in turn:
local_catalog.writer), and the ledger gets them in the order they arrived. Each caller gets its
own identity or its own error, a turn of the loop later than alone.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from archetype.commands.dispatcher import CommandDispatcher
from archetype.commands.ledger_rows import AdmissionRow, Admitted
from archetype.commands.options import ActorCtx
from archetype.commands.scheduler import CommandIdentity, DeferredItem, identity_of

# The most commands carried in one call (a batch over HTTP holds up to 1,000): one bounded transaction.
MAX_COALESCED = 1_000


@dataclass
class Run:
    """Admissions that arrived one after another in one turn, carried in one call: what they share
    (world id, quota, principal: a ledger batch's rule), and each one's row and caller."""

    key: tuple[str, int | None, str | None]
    waiting: list[tuple[AdmissionRow, asyncio.Future[Admitted]]]


class CoalescedAdmissions:
    def __init__(self, dispatcher: CommandDispatcher) -> None:
        self.dispatcher = dispatcher
        self._gathering: Run | None = None  # the latest run of this turn, not yet carried
        self._carrying: set[asyncio.Task[None]] = set()  # (the loop holds its tasks weakly)

    async def admit_as(self, actor: ActorCtx, item: DeferredItem) -> CommandIdentity:
        """`dispatcher.defer_as(actor, item.op, item.options, command_id=item.command_id)`'s answer."""
        world_id, row = await self.dispatcher.admission_as(actor, item)
        key = (world_id, self.dispatcher.scheduler.quota_for(actor), row["principal"])
        loop = asyncio.get_running_loop()
        run = self._gathering
        if run is None or run.key != key or len(run.waiting) >= MAX_COALESCED:
            run = self._gathering = Run(key, [])
            # A task's first step runs in the loop's next turn, after this turn's admissions have
            # joined; the runs' tasks start in the order the runs began, and each hands its call
            # to the authority in its first step, so the ledger sees the admissions in arrival order.
            carrying = loop.create_task(self._carry(run))
            self._carrying.add(carrying)
            carrying.add_done_callback(self._carrying.discard)
        future: asyncio.Future[Admitted] = loop.create_future()
        run.waiting.append((row, future))
        return identity_of(world_id, await future)

    async def _carry(self, run: Run) -> None:
        if self._gathering is run:
            self._gathering = None
        key, waiting = run.key, run.waiting
        world_id, quota, _ = key
        authority = self.dispatcher.scheduler.authority
        answers: list[Admitted | Exception]
        try:
            try:
                if len(waiting) == 1:
                    answers = [*await authority.admit(world_id, [waiting[0][0]], quota)]
                else:
                    answers = await authority.admit_each(world_id, [row for row, _ in waiting], quota)
            except Exception as exc:  # the call failed as a whole: as the call alone would have
                answers = [exc] * len(waiting)
            for (_, future), answer in zip(waiting, answers, strict=True):
                if future.done():  # its caller is gone (its admission stands, as a call alone's would)
                    continue
                if isinstance(answer, Exception):
                    future.set_exception(answer)
                else:
                    future.set_result(answer)
        finally:  # should this task end otherwise (the loop closing), no caller waits for ever
            for _, future in waiting:
                future.cancel()
