"""The local authority off the event loop: one writer thread owns the catalog connection.

Every ledger call is queued to that thread and awaited, so the event loop never waits on SQLite
(HTTP, `/health` and the runner stay responsive while ticks commit). Calls that queue up while a
transaction commits run together as the next transaction (group commit): under load many
admissions share one fsync, yet each caller is answered only after the commit that made its own
call durable, and a call that raises is rolled back alone (a savepoint each; see
`SqliteSqlPort.group`).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from archetype.commands import ledger_sql as q
from archetype.commands.authority import InProcessAuthority
from archetype.commands.errors import UnregisteredOperationError
from archetype.commands.ledger import LEDGER_METHODS, Ledger
from archetype.commands.ledger_rows import Watermark
from local_catalog.port import SqliteSqlPort

# Runs of its own: destroy is a series of short transactions by design (docs/ledger.md), which a
# group would fuse into one that grows with the world.
SOLO_METHODS = frozenset({"destroy"})
# Bounds how long one group holds the catalog's write lock.
MAX_GROUP = 256


class BacklogWorld(Watermark):
    status: str
    health: str


@dataclass
class _Call:
    fn: Callable[[], Any]
    solo: bool
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]


def _settle(answers: list[tuple[asyncio.Future[Any], Any]]) -> None:
    """On the caller's loop: each future gets its call's result or exception."""
    for future, result in answers:
        if future.done():  # its caller was cancelled meanwhile
            continue
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result)


class WriterThreadAuthority(InProcessAuthority):
    def __init__(self, ledger: Ledger, port: SqliteSqlPort, *, max_group: int = MAX_GROUP) -> None:
        super().__init__(ledger, close=port.close)
        self._port = port
        self._max_group = max_group
        self._queue: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._closed = False
        self.calls = self.groups = 0  # calls / groups is how well group commit groups (tests, bench)
        self._thread = threading.Thread(target=self._run, name="catalog-writer", daemon=True)
        self._thread.start()

    async def rpc(self, method: str, arguments: dict[str, Any]) -> Any:
        if method not in LEDGER_METHODS:
            raise UnregisteredOperationError(f"{method!r} is not a ledger method")
        fn = getattr(self.ledger, method)
        return await self._call(lambda: fn(**arguments), solo=method in SOLO_METHODS)

    async def outbox_backlog(self) -> list[BacklogWorld]:
        """The worlds of the catalog with outbox events not yet projected, each with its watermark,
        status and health (a local-catalog read: a Durable Object holds one world): what `archetype serve`'s
        audit projector drains each round, found without a walk over every world."""
        rows = await self._call(lambda: self._port.execute(q.BACKLOG_WORLDS), solo=False)
        return [{"world_id": r[0], "status": r[1], "health": r[2], "committed_seq": r[3], "projected_seq": r[4],
                 "pending": r[3] - r[4]} for r in rows]  # fmt: skip

    async def _call(self, fn: Callable[[], Any], *, solo: bool) -> Any:
        if self._closed:
            raise RuntimeError("the local authority is closed")
        loop = asyncio.get_running_loop()
        call = _Call(fn, solo, loop, loop.create_future())
        self._queue.put(call)
        return await call.future

    def _run(self) -> None:
        carried: list[_Call | None] = []  # what ended the last group: a solo call or the stop
        while True:
            first = carried.pop() if carried else self._queue.get()
            if first is None:
                return
            group = [first]
            while not first.solo and len(group) < self._max_group:
                try:
                    following = self._queue.get_nowait()
                except queue.Empty:
                    break
                if following is None or following.solo:
                    carried.append(following)
                    break
                group.append(following)
            self._run_group(group)

    def _run_group(self, group: list[_Call]) -> None:
        try:
            results: list[Any] = self._port.group([call.fn for call in group])
        except BaseException as exc:  # the commit itself failed: nothing of the group is durable
            results = [exc] * len(group)
        self.calls += len(group)
        self.groups += 1
        # one wake-up of each caller's loop for the whole group, not one per call: a loop woken
        # from another thread costs a write to its self-pipe and a turn of its selector
        answers: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any]]] = {}
        for call, result in zip(group, results, strict=True):
            answers.setdefault(call.loop, []).append((call.future, result))
        for loop, settled in answers.items():
            loop.call_soon_threadsafe(_settle, settled)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        await asyncio.to_thread(self._thread.join)
        await super().close()
