"""The HTTP/1.1 protocol `archetype serve` runs uvicorn with (`HeadDeadline`): uvicorn's own, on
httptools, with a deadline for a request's head and one write per answer (`OneWrite`)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class OneWrite:
    """The transport of one answer as uvicorn writes it, except that the response head is held
    until the body's first write and goes out with it: one send call and one segment per answer
    instead of two (uvicorn writes the head when the app starts its answer; a send on loopback
    costs about as much CPU as a small route's work, and the client wakes up once, not twice).
    Every answer but HEAD's has a body write (uvicorn writes an empty body too)."""

    __slots__ = ("cycle", "head", "transport")

    def __init__(self, transport: asyncio.Transport, cycle: Any) -> None:
        self.transport, self.cycle = transport, cycle
        self.head: bytes | None = b""  # None once the head went out

    def write(self, data: bytes) -> None:
        if self.cycle.response_started and self.head is not None:
            if not self.head:  # the head, written the moment the answer started
                self.head = data
                return
            data, self.head = self.head + data, None
        self.transport.write(data)

    def close(self) -> None:  # an app that failed after starting its answer: what it started goes out first
        if self.head:
            self.transport.write(self.head)
        self.head = None
        self.transport.close()

    def is_closing(self) -> bool:
        return self.transport.is_closing()


class HeadDeadline(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol (on httptools, the C parser: h11's pure-Python one cost about a
    fifth of an admission request's CPU), except that a connection whose request head (request
    line and headers) is not complete `head_timeout_s` after it opened, or after its previous
    answer, is closed. uvicorn has no such limit: a client trickling its headers would hold a
    connection forever. (A slow body is the app's to refuse: 408 `request_timeout`,
    archetype.api.limits.) Each answer is one write (OneWrite), and uvicorn's access line is not
    formatted per request when its logger would drop it.

    uvicorn's keep-alive timeout (a connection that sends nothing for `timeout_keep_alive` after
    an answer is closed) is kept, on the same one timer: uvicorn sets a timer per answer and
    cancels it when the next request's bytes arrive (uvloop's `call_later` alone was ~6k
    instructions per admission, docs/performance.md)."""

    def __init__(self, *args: Any, head_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.access_log = self.access_log and self.access_logger.isEnabledFor(logging.INFO)
        self.head_timeout_s = head_timeout_s
        self._head_due = 0.0  # loop time by which the awaited head must be complete
        self._idle_due: float | None = None  # loop time by which bytes must come after the last answer (None: they came)
        self._timer: asyncio.TimerHandle | None = None
        self._heads = self._answers = 0  # a head beyond the answered ones is complete (pipelined ones too)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_head()

    def data_received(self, data: bytes) -> None:
        self._idle_due = None
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._heads += 1
        super().on_headers_complete()
        # a cycle for this head (not an upgrade), whose answer has a body write (not HEAD's) to carry its head
        if self.cycle is not None and self.cycle.scope is self.scope and self.scope["method"] != "HEAD":
            self.cycle.transport = OneWrite(self.transport, self.cycle)  # type: ignore[assignment]  # what the cycle calls

    def on_response_complete(self) -> None:
        # uvicorn's, but for its keep-alive timer: the idle deadline below takes its place
        self._answers += 1
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:  # a pipelined request waits for this answer: it starts now
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
            self._await_head()
        else:
            self._await_head(idle=True)

    def _await_head(self, *, idle: bool = False) -> None:
        # One timer per connection, moved on lazily: a timer per answer (each living head_timeout_s)
        # kept tens of thousands alive at 32 in flight, each a callback the loop and the collector carry.
        now = self.loop.time()
        self._head_due = now + self.head_timeout_s
        self._idle_due = now + self.timeout_keep_alive if idle else None
        due = self._due()
        if self._timer is not None and self._timer.when() > due:  # set for later (a first answer's idle wait is shorter)
            self._timer.cancel()
            self._timer = None
        if self._timer is None:
            self._timer = self.loop.call_at(due, self._late)

    def _due(self) -> float:
        return self._head_due if self._idle_due is None else min(self._head_due, self._idle_due)

    def _late(self) -> None:
        self._timer = None
        if self._heads != self._answers or self.transport.is_closing():
            return  # a request in flight: its answer sets the next deadline
        if self.loop.time() >= self._due():  # no complete head in time, or no bytes at all (uvicorn's keep-alive timeout)
            self.transport.close()
        else:  # bytes or an answer since the timer was set: wait on
            self._timer = self.loop.call_at(self._due(), self._late)
