"""The local authority off the event loop: one writer thread owns the catalog connection.

Every ledger call is queued to that thread and awaited, so the event loop never waits on SQLite
(HTTP, `/health` and the runner stay responsive while ticks commit). Calls that queue up while a
transaction commits run together as the next transaction (group commit): under load many
admissions share one fsync, yet each caller is answered only after the commit that made its own
call durable, and a call that raises is rolled back alone (a savepoint each; see
`SqliteSqlPort.group`).

Admissions queued one after another for the same world, principal and quota (concurrent HTTP
submissions, typically) run as one `admit` of all their commands, in queue order: a batch's
statements cost about a fifth of single admissions' per command. Should that batch be refused
(it is all or nothing), each admission runs again alone, in its own savepoint of the same
transaction, so every caller gets the answer it would have got alone. `admit_each` hands the
thread such a run whole, in one call: the single admissions a caller gathered itself (the HTTP
layer's, one turn of its event loop: archetype.commands.coalesced).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import queue
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from archetype.commands import ledger_sql as q
from archetype.commands.authority import InProcessAuthority
from archetype.commands.errors import UnregisteredOperationError
from archetype.commands.ledger import CATALOG_METHODS, LEDGER_METHODS, Ledger
from archetype.commands.ledger_rows import AdmissionRow, Admitted, Quota, Watermark
from archetype.commands.port import StorageFault
from local_catalog.port import SqliteSqlPort
from local_catalog.reader import READ_METHODS, CatalogReader

# Runs of its own: destroy is a series of short transactions by design (docs/ledger.md), which a
# group would fuse into one that grows with the world.
SOLO_METHODS = frozenset({"destroy"})
# Bounds how long one group holds the catalog's write lock.
MAX_GROUP = 256
# The most commands queued admissions are merged into (a batch over HTTP holds up to 1,000).
MAX_MERGED_COMMANDS = 1_000


class BacklogWorld(Watermark):
    status: str
    health: str


class _Doorbell:
    """How the writer thread hands one event loop its answers: a queue of settled futures and a
    socket the loop watches, written once until the loop has read it (however many groups were
    answered meanwhile). The loop settles the futures in the watch's own callback.

    Cheaper than `loop.call_soon_threadsafe` per group, which on asyncio's own loop costs a
    handle, a write to the loop's self-pipe and, on the loop, reads of that pipe until one raises
    BlockingIOError (the exception alone ~8k instructions): here one read, no exception, no handle.
    A loop without `add_reader` (asyncio's proactor) is woken through `call_soon_threadsafe`."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._answers: collections.deque[tuple[asyncio.Future[Any], Any]] = collections.deque()
        self._rung = False  # written and not yet read: the loop is woken already
        self._watch, self._bell = socket.socketpair()
        for end in (self._watch, self._bell):
            end.setblocking(False)
        try:
            loop.add_reader(self._watch.fileno(), self._answer)
            self._watched = True
        except NotImplementedError:
            self._watched = False

    def ring(self, settled: list[tuple[asyncio.Future[Any], Any]]) -> None:
        """On the writer thread: `settled` to the loop, which is woken unless it is already."""
        self._answers.extend(settled)
        if self._rung:  # (set only here; the loop clears it before it takes the answers)
            return
        self._rung = True
        if not self._watched:
            self.loop.call_soon_threadsafe(self._answer)
            return
        try:
            self._bell.send(b"\0")
        except OSError:  # full (the loop is woken anyway) or closed with its loop: nobody waits
            pass

    def _answer(self) -> None:
        """On the loop: each future gets its call's result or exception."""
        if self._watched:
            try:
                self._watch.recv(4096)  # (one byte a wake-up: `_rung` keeps the writer from writing more)
            except OSError:
                pass
        # Cleared after the read, never before: a ring between a clear and the read would write a
        # byte that read takes too, leaving the bell rung with nothing to read, and the next
        # group's answers would wait forever. From here on, a ring writes again, and what was
        # queued before it is taken below.
        self._rung = False
        answers = self._answers
        while answers:
            future, result = answers.popleft()
            if future.done():  # its caller was cancelled meanwhile
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)

    def close(self) -> None:
        """Stops watching (on the loop's own thread, or once the loop is closed) and closes the socket."""
        if self._watched and not self.loop.is_closed():
            self.loop.remove_reader(self._watch.fileno())
        self._watch.close()
        self._bell.close()


@dataclass(slots=True)
class _Call:
    fn: Callable[[], Any]
    solo: bool
    doorbell: _Doorbell  # the caller's loop's
    future: asyncio.Future[Any]
    admission: dict[str, Any] | None = None  # an admit's arguments: it may run merged with its neighbours


def _merge_key(arguments: dict[str, Any]) -> tuple[Any, ...] | None:
    """What admissions merged into one batch must share (one world, one quota, one principal: a
    batch's rule), or None when the arguments are not a plain admission (it then runs alone and
    answers whatever it answers)."""
    try:
        commands = arguments["commands"]
        return (arguments["world_id"], arguments.get("quota"), commands[0]["principal"], len(commands))
    except Exception:
        return None


def _admissions(calls: list[_Call]) -> list[dict[str, Any]]:
    """The arguments of calls `_merged` merged (only admissions merge)."""
    found = []
    for call in calls:
        assert call.admission is not None
        found.append(call.admission)
    return found


def _answer_each(calls: list[_Call], result: Any) -> list[Any]:
    """Each merged call's answer: its own (the list `_admit_merged` answers), or what failed them all."""
    return result if isinstance(result, list) else [result] * len(calls)


class WriterThreadAuthority(InProcessAuthority):
    def __init__(self, ledger: Ledger, port: SqliteSqlPort, *, max_group: int = MAX_GROUP,
                 reader: CatalogReader | None = None) -> None:  # fmt: skip
        super().__init__(ledger, close=port.close)
        self._port = port
        self._reader = reader  # where the READ_METHODS run, when given (local_catalog.reader)
        self._max_group = max_group
        self._queue: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._closed = False
        self._doorbells: dict[asyncio.AbstractEventLoop, _Doorbell] = {}
        self.calls = self.groups = 0  # calls / groups is how well group commit groups (tests, bench)
        self._thread = threading.Thread(target=self._run, name="catalog-writer", daemon=True)
        self._thread.start()

    async def rpc(self, method: str, arguments: dict[str, Any]) -> Any:
        if method not in LEDGER_METHODS and method not in CATALOG_METHODS:
            raise UnregisteredOperationError(f"{method!r} is not a ledger method")
        if self._reader is not None and method in READ_METHODS:
            return await self._reader.rpc(method, arguments)
        fn = getattr(self.ledger, method)
        return await self._call(lambda: fn(**arguments), solo=method in SOLO_METHODS,
                                admission=arguments if method == "admit" else None)  # fmt: skip

    async def admit_each(self, world_id: str, commands: list[AdmissionRow], quota: Quota | None = None) -> list[Admitted | Exception]:
        admissions = [{"world_id": world_id, "commands": [command], "quota": quota} for command in commands]
        answers = await self._call(self._admit_merged(admissions), solo=False)
        return [answer if isinstance(answer, Exception) else answer[0] for answer in answers]

    def storage_fault(self) -> StorageFault | None:
        """Why the catalog's writes fail, until one succeeds again (None: they do)."""
        return self._port.write_fault

    async def outbox_backlog(self) -> list[BacklogWorld]:
        """The worlds of the catalog with outbox events not yet projected, each with its watermark,
        status and health (a local-catalog read: a Durable Object holds one world): what `archetype serve`'s
        audit projector drains each round, found without a walk over every world."""
        rows = await self._call(lambda: self._port.execute(q.BACKLOG_WORLDS), solo=False)
        return [{"world_id": r[0], "status": r[1], "health": r[2], "committed_seq": r[3], "projected_seq": r[4],
                 "pending": r[3] - r[4]} for r in rows]  # fmt: skip

    async def _call(self, fn: Callable[[], Any], *, solo: bool, admission: dict[str, Any] | None = None) -> Any:
        if self._closed:
            raise RuntimeError("the local authority is closed")
        loop = asyncio.get_running_loop()
        doorbell = self._doorbells.get(loop) or self._doorbell(loop)
        future = loop.create_future()
        self._queue.put(_Call(fn, solo, doorbell, future, admission))
        return await future

    def _doorbell(self, loop: asyncio.AbstractEventLoop) -> _Doorbell:
        """A doorbell for a loop that has none yet; those of loops closed since are closed."""
        for gone in [bell for bell in self._doorbells.values() if bell.loop.is_closed()]:
            del self._doorbells[gone.loop]
            gone.close()
        doorbell = self._doorbells[loop] = _Doorbell(loop)
        return doorbell

    def _run(self) -> None:
        carried: list[_Call | None] = []  # what ended the last group: a solo call or the stop
        while True:
            first = carried.pop() if carried else self._queue.get()
            if first is None:
                return
            group = [first]
            # (asked, not tried: a queue.Empty raised per group, the usual end of one, costs more)
            while not first.solo and len(group) < self._max_group and not self._queue.empty():
                following = self._queue.get_nowait()  # this thread alone takes from the queue
                if following is None or following.solo:
                    carried.append(following)
                    break
                group.append(following)
            self._run_group(group)

    def _run_group(self, group: list[_Call]) -> None:
        try:
            if len(group) == 1:  # (an idle catalog's usual group: nothing to merge)
                results: list[Any] = self._port.group([group[0].fn])
            else:
                units = self._merged(group)
                done = self._port.group([calls[0].fn if len(calls) == 1 else self._admit_merged(_admissions(calls))
                                         for calls in units])  # fmt: skip
                results = [answer for calls, result in zip(units, done, strict=True)
                           for answer in ([result] if len(calls) == 1 else _answer_each(calls, result))]  # fmt: skip
        except BaseException as exc:  # the commit itself failed: nothing of the group is durable
            results = [exc] * len(group)
        self.calls += len(group)
        self.groups += 1
        # one ring of each caller's loop for the whole group, not one per call: a loop woken from
        # another thread costs a write to a socket and a turn of its selector
        if len(group) == 1:
            group[0].doorbell.ring([(group[0].future, results[0])])
            return
        answers: dict[_Doorbell, list[tuple[asyncio.Future[Any], Any]]] = {}
        for call, result in zip(group, results, strict=True):
            answers.setdefault(call.doorbell, []).append((call.future, result))
        for doorbell, settled in answers.items():
            doorbell.ring(settled)

    @staticmethod
    def _merged(group: list[_Call]) -> list[list[_Call]]:
        """The group in queue order, neighbouring admissions that may run as one batch together."""
        units: list[list[_Call]] = []
        keys: list[tuple[Any, ...] | None] = []
        for call in group:
            key = _merge_key(call.admission) if call.admission is not None else None
            last = keys[-1] if keys else None
            if key is not None and last is not None and key[:3] == last[:3] and last[3] + key[3] <= MAX_MERGED_COMMANDS:
                units[-1].append(call)
                keys[-1] = (*last[:3], last[3] + key[3])
            else:
                units.append([call])
                keys.append(key)
        return units

    def _admit_merged(self, admissions: list[dict[str, Any]]) -> Callable[[], list[Any]]:
        """One `admit` of the admissions' commands (one world's, one quota's, one principal's: what
        `_merge_key` merges); refused, each admission alone (a savepoint each). Each answer is the
        admission's own list of identities, or what refused it alone."""

        def run() -> list[Any]:
            each = [list(admission["commands"]) for admission in admissions]
            batch = [command for commands in each for command in commands]
            first = admissions[0]
            admitted = self._port.attempt(lambda: self.ledger.admit(first["world_id"], batch, first.get("quota")))
            if isinstance(admitted, Exception):
                return [self._port.attempt(functools.partial(self.ledger.admit, **admission)) for admission in admissions]
            answers: list[Any] = []
            for commands in each:
                answers.append(admitted[: len(commands)])
                admitted = admitted[len(commands) :]
            return answers

        return lambda: self._port.transaction(run)  # in the group's transaction, or one of its own when alone

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        await asyncio.to_thread(self._thread.join)
        for doorbell in self._doorbells.values():
            doorbell.close()
        if self._reader is not None:
            await asyncio.to_thread(self._reader.close)
        await super().close()
