"""serve's HTTP protocol (archetype.http_protocol.HeadDeadline) writes each answer once: the head goes out
with the body's first write (OneWrite), and nothing an answer sends is held back or reordered; its
head deadline counts from the connection's last answer, and uvicorn's keep-alive timeout (no bytes
at all after an answer) stands, both on one timer per connection."""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.server import ServerState

from archetype.http_protocol import HeadDeadline


class Transport:
    """What the protocol writes, write by write."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def get_extra_info(self, name: str) -> Any:
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 8000)}.get(name)

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


def answer(*messages: dict[str, Any], fail: bool = False) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["method"] == "POST":
            await receive()
        for message in messages:
            await send(message)
        if fail:
            raise RuntimeError("the app failed after starting its answer")

    return app


START = {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2"), (b"content-type", b"application/json")]}
BODY = {"type": "http.response.body", "body": b"{}"}
STREAM = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]}


HEAD_TIMEOUT_S = 2.0
KEEP_ALIVE_S = 0.3


async def settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0)


async def serving(app: Any, request: bytes, head_timeout_s: float = 5.0,
                  keep_alive_s: float = 5.0) -> tuple[HeadDeadline, Transport]:  # fmt: skip
    config = uvicorn.Config(app, lifespan="off", log_level="warning", timeout_keep_alive=keep_alive_s)
    protocol = HeadDeadline(config=config, server_state=ServerState(), app_state={}, head_timeout_s=head_timeout_s)
    transport = Transport()
    protocol.connection_made(transport)  # type: ignore[arg-type]
    protocol.data_received(request)
    await settle()
    return protocol, transport


async def served(app: Any, request: bytes) -> Transport:
    return (await serving(app, request))[1]


GET = b"GET /health HTTP/1.1\r\nhost: edge\r\n\r\n"


async def test_an_answer_is_one_write():
    transport = await served(answer(START, BODY), GET)
    assert len(transport.writes) == 1
    assert transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n") and transport.writes[0].endswith(b"\r\n\r\n{}")


async def test_keep_alive_answers_are_one_write_each():
    transport = await served(answer(START, BODY), GET * 3)  # pipelined: answered in order, one write each
    assert len(transport.writes) == 3 and all(w.endswith(b"\r\n\r\n{}") for w in transport.writes)


async def test_a_streamed_answer_sends_its_head_with_the_first_chunk_and_holds_nothing_after():
    chunks = [{"type": "http.response.body", "body": part, "more_body": True} for part in (b"a", b"b")]
    transport = await served(answer(STREAM, *chunks, {"type": "http.response.body", "body": b""}), GET)
    assert len(transport.writes) == 3
    assert transport.writes[0].endswith(b"transfer-encoding: chunked\r\n\r\n1\r\na\r\n")
    assert transport.writes[1:] == [b"1\r\nb\r\n", b"0\r\n\r\n"]


async def test_an_answer_to_head_has_no_body_write_and_its_head_is_sent():
    transport = await served(answer(START, BODY), b"HEAD /health HTTP/1.1\r\nhost: edge\r\n\r\n")
    assert len(transport.writes) == 1 and transport.writes[0].endswith(b"content-type: application/json\r\n\r\n")


async def test_an_app_failing_after_its_head_gets_the_head_out_before_the_close():
    transport = await served(answer(START, fail=True), GET)
    assert transport.closed and len(transport.writes) == 1 and transport.writes[0].startswith(b"HTTP/1.1 200 OK")


async def test_100_continue_goes_out_at_once_ahead_of_the_answer():
    head = b"POST /x HTTP/1.1\r\nhost: edge\r\ncontent-length: 2\r\nexpect: 100-continue\r\n\r\n"
    protocol, transport = await serving(answer(START, BODY), head)
    assert transport.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]  # the client waits for it to send the body
    protocol.data_received(b"{}")
    await settle()
    assert len(transport.writes) == 2 and transport.writes[1].startswith(b"HTTP/1.1 200 OK") and transport.writes[1].endswith(b"{}")


async def test_the_head_deadline_counts_from_the_last_answer():
    loop = asyncio.get_running_loop()
    opened = loop.time()
    protocol, transport = await serving(answer(START, BODY), b"", head_timeout_s=HEAD_TIMEOUT_S)
    await asyncio.sleep(HEAD_TIMEOUT_S / 2)
    answered = loop.time()
    protocol.data_received(GET)  # the next head is due HEAD_TIMEOUT_S after this answer, not after the opening
    await settle()
    assert len(transport.writes) == 1
    deadline = answered + 60  # generous: a busy machine runs the timer late, never early
    while not transport.closed and loop.time() < deadline:
        await asyncio.sleep(0.05)
    assert transport.closed  # no head came within HEAD_TIMEOUT_S of the answer
    # and not at the opening's deadline: these bounds only grow on a busy machine
    assert loop.time() >= answered + HEAD_TIMEOUT_S > opened + HEAD_TIMEOUT_S


async def closed_after(transport: Transport, since: float) -> float:
    """Seconds from `since` until the protocol closed the connection (waiting up to a generous minute)."""
    loop = asyncio.get_running_loop()
    while not transport.closed and loop.time() < since + 60:
        await asyncio.sleep(0.02)
    assert transport.closed
    return loop.time() - since


async def test_an_idle_connection_is_closed_at_the_keep_alive_timeout():
    """No bytes after an answer: closed `timeout_keep_alive` after it, before the head deadline."""
    loop = asyncio.get_running_loop()
    protocol, transport = await serving(answer(START, BODY), GET, head_timeout_s=60.0, keep_alive_s=KEEP_ALIVE_S)
    assert len(transport.writes) == 1
    assert KEEP_ALIVE_S <= await closed_after(transport, loop.time()) < 30  # never early; far before the head deadline


async def test_bytes_after_an_answer_leave_the_connection_to_the_head_deadline():
    """A head begun after an answer is no idle connection: only the head deadline closes it."""
    loop = asyncio.get_running_loop()
    protocol, transport = await serving(answer(START, BODY), GET, head_timeout_s=HEAD_TIMEOUT_S, keep_alive_s=KEEP_ALIVE_S)
    answered = loop.time()
    protocol.data_received(b"GET /health HTTP/1.1\r\n")  # and the rest never comes
    assert await closed_after(transport, answered) >= HEAD_TIMEOUT_S > 2 * KEEP_ALIVE_S
