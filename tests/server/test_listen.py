"""serve's listening socket: connections get Nagle turned off, like uvicorn's own sockets."""

from __future__ import annotations

import asyncio
import socket

from archetype.server import listen


async def test_accepted_connections_have_nagle_off():
    sock = listen("127.0.0.1", 0)
    accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set_result(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    server = await asyncio.start_server(connected, sock=sock)
    _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
    # with Nagle on, every keep-alive answer after the first waited ~40 ms for the client's delayed ACK
    assert await asyncio.wait_for(accepted, 10) != 0
    writer.close()
    server.close()
    await server.wait_closed()
