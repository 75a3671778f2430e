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
    formatted per request when its logger would drop it."""

    def __init__(self, *args: Any, head_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.access_log = self.access_log and self.access_logger.isEnabledFor(logging.INFO)
        self.head_timeout_s = head_timeout_s
        self._head_due = 0.0  # loop time by which the awaited head must be complete
        self._head_timer: asyncio.TimerHandle | None = None
        self._heads = self._answers = 0  # a head beyond the answered ones is complete (pipelined ones too)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_head()

    def on_headers_complete(self) -> None:
        self._heads += 1
        super().on_headers_complete()
        # a cycle for this head (not an upgrade), whose answer has a body write (not HEAD's) to carry its head
        if self.cycle is not None and self.cycle.scope is self.scope and self.scope["method"] != "HEAD":
            self.cycle.transport = OneWrite(self.transport, self.cycle)  # type: ignore[assignment]  # what the cycle calls

    def on_response_complete(self) -> None:
        self._answers += 1
        super().on_response_complete()
        self._await_head()

    def _await_head(self) -> None:
        # One timer per connection, moved on lazily: a timer per answer (each living head_timeout_s)
        # kept tens of thousands alive at 32 in flight, each a callback the loop and the collector carry.
        self._head_due = self.loop.time() + self.head_timeout_s
        if self._head_timer is None:
            self._head_timer = self.loop.call_at(self._head_due, self._head_late)

    def _head_late(self) -> None:
        self._head_timer = None
        if self.loop.time() < self._head_due:  # an answer since the timer was set: the wait began again then
            self._head_timer = self.loop.call_at(self._head_due, self._head_late)
        elif self._heads == self._answers and not self.transport.is_closing():
            self.transport.close()
