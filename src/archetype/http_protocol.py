"""The HTTP/1.1 protocol `archetype serve` runs uvicorn with (`HeadDeadline`): uvicorn's own, on
httptools, with a deadline for a request's head, one write per answer (`OneWrite`), and the hot
routes' requests answered without ASGI (`HotPath`).

It builds on uvicorn's `HttpToolsProtocol` internals (its parser callbacks, `self.cycle`,
`self.pipeline`, `on_response_complete`, `RequestResponseCycle.send`'s way of writing a head):
uvicorn is pinned in requirements.lock, and tests/server/test_hot_path.py holds the hot path's
bytes to the ASGI path's for every kind of request, so an upgrade that moves them fails there."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from archetype.api.hot import HEALTH_ROUTE, Admissible, Answer, HotPath, HotRoute

# Headers whose request the ASGI path serves: uvicorn answers `Expect: 100-continue` itself, and
# a chunked body has no declared length to check before it arrives.
ASGI_HEADERS = frozenset((b"expect", b"transfer-encoding"))
HEALTH_URL = HEALTH_ROUTE.encode()


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


class HotRequest:
    """A hot route's request (`hot` None: `GET /health`) the hot path holds (its body gathered
    within one `data_received`) or answers; while in flight it is also what uvicorn's protocol reads and sets of the request in
    flight (`self.cycle`): a next request waits on its end (pipelining), and it is told of a lost
    connection and of a shutdown (its answer then closes the connection)."""

    __slots__ = ("body", "disconnected", "headers", "hot", "keep_alive", "prior", "response_complete", "world_id")

    def __init__(self, hot: HotRoute | None, world_id: str | None, headers: dict[bytes, bytes], prior: Any, keep_alive: bool) -> None:
        self.hot, self.world_id, self.headers, self.prior, self.keep_alive = hot, world_id, headers, prior, keep_alive
        self.body = bytearray()
        self.disconnected = self.response_complete = False

    @property
    def message_event(self) -> HotRequest:  # a lost connection wakes the cycle's body reader: there is none
        return self

    def set(self) -> None:
        pass


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
    instructions per admission, docs/performance.md).

    With `hot_path` (the app's `HttpApp.hot_path`), a hot route's request (`POST
    /worlds/{id}/commands`, `POST /worlds`) whose whole body comes with its head, that passes
    every check of the app's front layers and of the route, is answered here, and so is a
    `GET /health` without a body while all is well (load balancers and probes ask often): no ASGI scope,
    cycle, event or layers (a third of an admission's instructions on the loop). Its answer is
    the app's own (`HotRoutes.answer`), written as uvicorn writes one, and timed by the app's
    metrics; any other request, or one a check would refuse, is handed to uvicorn as if it had
    just been parsed, and ASGI answers it as ever."""

    def __init__(self, *args: Any, head_timeout_s: float, hot_path: HotPath | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.access_log = self.access_log and self.access_logger.isEnabledFor(logging.INFO)
        # uvicorn's access log names the client as its proxy headers layer rewrites it: ASGI's to write
        usable = hot_path is not None and hot_path.ready and not self.access_log and self.limit_concurrency is None
        self.hot_path = hot_path if usable else None
        self._held: HotRequest | None = None
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
        if self._held is not None:  # a held request's body is still to come: ASGI reads it, with its deadline
            self._hand_over(complete=False)

    def on_message_begin(self) -> None:
        # uvicorn's, but for the ASGI scope, built once ASGI gets the request (`_asgi_request`): a hot one has none
        self.url, self.expect_100_continue, self.headers = b"", False, []

    def on_headers_complete(self) -> None:
        self._heads += 1
        self._held = self._hot_request()
        if self._held is not None:
            self.cycle = self._held  # type: ignore[assignment]  # what uvicorn reads of it
        else:
            self._asgi_request()

    def _hot_request(self) -> HotRequest | None:
        """A request the hot path may answer, by its head: a hot route's target (a declared body
        within BodyLimit's limit), or `/health`'s (no body), none in flight on the connection,
        every header sent once."""
        path = self.hot_path
        if path is None or self.pipeline or (self.cycle is not None and not self.cycle.response_complete):
            return None
        parser = self.parser
        method = parser.get_method()
        if method not in (b"POST", b"GET") or parser.get_http_version() != "1.1" or parser.should_upgrade():
            return None
        headers = dict(self.headers)
        declared = headers.get(b"content-length")
        if len(headers) != len(self.headers) or not ASGI_HEADERS.isdisjoint(headers):
            return None
        if method == b"GET":
            if self.url != HEALTH_URL or declared is not None:
                return None
            return HotRequest(None, None, headers, self.cycle, parser.should_keep_alive())
        routed = path.route(self.url)
        if routed is None or declared is None or not declared.isdigit() or not 0 < int(declared) <= path.max_bytes:  # type: ignore[operator]
            return None
        return HotRequest(*routed, headers, self.cycle, parser.should_keep_alive())

    def on_body(self, body: bytes) -> None:
        if self._held is not None:
            self._held.body += body
        else:
            super().on_body(body)

    def on_message_complete(self) -> None:
        held = self._held
        if held is None:
            super().on_message_complete()
            return
        assert self.hot_path is not None and self.hot_path.routes is not None
        if held.hot is None:  # /health's
            started = time.perf_counter()
            healthy = None if self.flow.write_paused else self.hot_path.routes.healthy()
            if healthy is None:  # a client not reading its answers, or something to say: ASGI's to answer
                self._hand_over(complete=True)
                return
            self._held = None
            self._respond(held, healthy)
            self.hot_path.observe("GET", HEALTH_ROUTE, HEALTH_ROUTE, 200, time.perf_counter() - started)
            return
        admissible = self.hot_path.admissible(held.hot, held.headers, bytes(held.body))
        if admissible is None:
            self._hand_over(complete=True)
            return
        self._held = None
        task = self.loop.create_task(self._answer(held, held.hot, admissible, self.url.decode("ascii")))
        task.add_done_callback(self.tasks.discard)  # as uvicorn keeps its own: a shutdown waits for them
        self.tasks.add(task)

    def _hand_over(self, *, complete: bool) -> None:
        """The held request to uvicorn, as its parser would have given it: its head, its body so far."""
        held, self._held = self._held, None
        assert held is not None
        self.cycle = held.prior
        self._asgi_request()
        if held.body:
            super().on_body(bytes(held.body))
        if complete:
            super().on_message_complete()

    async def _answer(self, held: HotRequest, hot: HotRoute, admissible: Admissible, path: str) -> None:
        assert self.hot_path is not None and self.hot_path.routes is not None
        started = time.perf_counter()
        answer, raised = await self.hot_path.routes.answer(hot, held.world_id, admissible, path)
        if self.flow.write_paused and not held.disconnected:  # a client not reading its answers: as uvicorn's send waits
            await self.flow.drain()
        if not held.disconnected:
            self._respond(held, answer)
        self.hot_path.observe("POST", path, hot.template, answer.status_code, time.perf_counter() - started)
        if raised is not None:  # as uvicorn ends a request whose app raised after answering
            self.logger.error("Exception in ASGI application\n", exc_info=raised)
            self.transport.close()

    def _respond(self, held: HotRequest, answer: Answer) -> None:
        self.transport.write(self._written(answer, held))
        held.response_complete = True
        if not held.keep_alive:
            self.transport.close()
        self.on_response_complete()

    def _written(self, answer: Answer, request: HotRequest) -> bytes:
        """The answer as uvicorn's `RequestResponseCycle.send` writes it (its default headers first,
        `connection: close` added when the connection ends), in one write as OneWrite makes it."""
        content = [STATUS_LINE[answer.status_code]]
        closing = False
        for name, value in (*self.server_state.default_headers, *answer.raw_headers):
            if name == b"connection" and b"close" in (token.strip().lower() for token in value.split(b",")):
                request.keep_alive, closing = False, True
            content += (name, b": ", value, b"\r\n")
        if not request.keep_alive and not closing:
            content.append(b"connection: close\r\n")
        content += (b"\r\n", answer.body)
        return b"".join(content)

    def _asgi_request(self) -> None:
        url, headers, expect_100_continue = self.url, self.headers, self.expect_100_continue
        super().on_message_begin()  # the scope (and a fresh start of what the callbacks gathered: put back)
        self.url, self.headers, self.expect_100_continue = url, headers, expect_100_continue
        self.scope["headers"] = headers
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
