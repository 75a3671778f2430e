"""Every HTTP client of ours drops a kept-alive connection idle past KEEPALIVE_EXPIRY_S instead of
reusing it (archetype.http_client): a server that closes idle connections at 5 s (uvicorn, workerd)
would otherwise meet a request on a connection it is closing, which is lost without an answer.
Seen as `Server disconnected without sending a response` in a workerd test at load 10."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import httpx
import pytest

from archetype.audit.queue import QueueClient
from archetype.client import AsyncClient, Client
from archetype.commands.port import ManualClock
from archetype.http_client import KEEPALIVE_EXPIRY_S
from archetype.remote import HttpAuthority
from tests.support.clock_header import ClockHeader

ANSWER = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


async def counting_server() -> tuple[asyncio.Server, list[asyncio.StreamWriter]]:
    """A loopback HTTP/1.1 server that keeps every connection alive, and its connections."""
    connections: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.lower().split(b"\r\n")
                               if line.startswith(b"content-length:")), 0)  # fmt: skip
                await reader.readexactly(length)
                writer.write(ANSWER)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    return await asyncio.start_server(serve, "127.0.0.1", 0), connections


def request_through(name: str, url: str) -> tuple[Callable[[], Awaitable[object]], Callable[[], Awaitable[None]]]:
    """One request through the client `name`, as it is built, and how to close that client."""
    if name == "Client":
        sync = Client(url, token="t")
        return lambda: asyncio.to_thread(sync._http.get, "/health"), lambda: asyncio.to_thread(sync.close)
    if name == "AsyncClient":
        client = AsyncClient(url, token="t")
        return lambda: client._http.get("/health"), client.close
    if name == "HttpAuthority":
        authority = HttpAuthority(url, token="t")
        return lambda: authority.rpc("list_worlds", {}), authority.close
    if name == "QueueClient":
        queue = QueueClient("account", "queue", "t", api=url)
        return lambda: queue._http.post(f"{url}/pull", json={}), queue.close
    transport = ClockHeader(ManualClock())  # the tests' transport to a Worker

    async def through_the_transport() -> object:
        return await (await transport.handle_async_request(httpx.Request("GET", f"{url}/health"))).aread()

    return through_the_transport, transport.aclose


@pytest.mark.parametrize("name", ["Client", "AsyncClient", "HttpAuthority", "QueueClient", "ClockHeader (tests)"])
async def test_a_connection_idle_past_the_expiry_is_not_reused(name):
    server, connections = await counting_server()
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    request, close = request_through(name, url)
    try:
        await request()
        await request()
        assert len(connections) == 1  # back to back: the connection is kept alive
        await asyncio.sleep(KEEPALIVE_EXPIRY_S + 0.5)
        await request()
        assert len(connections) == 2, f"{name} reused a connection idle for {KEEPALIVE_EXPIRY_S + 0.5} s"
    finally:
        await close()
        server.close()
        for writer in connections:  # (a server's close leaves its open connections open)
            writer.close()
            await writer.wait_closed()
