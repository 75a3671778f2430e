"""A minimal HTTP/1.1 keep-alive client for the benches: one request at a time per connection,
a pool of connections, Content-Length bodies only (what `archetype serve` answers).

Why not httpx: on this 2-core machine the client shares the CPUs with the server it measures,
and httpx spent ~5-6 ms of CPU per request at 32 in flight (~1 ms at 1), more than the server
itself; its figures were the client's. This client is a protocol (no asyncio streams: their
`readuntil` and `readexactly` each cost a future and a wake-up) and is meant to run on uvloop,
like the server: 84k instructions per request of bench/http_admission.py at 32 in flight
(callgrind), against 111k for the streams client on asyncio's loop it replaced, ~0.07 ms of CPU.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any


class Connection(asyncio.Protocol):
    """One keep-alive connection: a request written whole, its answer read by the protocol's
    callbacks (asyncio's streams cost a future and a wake-up per `readuntil` and `readexactly`)."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.answer: asyncio.Future[tuple[int, bytes]] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0 or self.answer is None:
            return
        lines = bytes(self.buffer[:end]).split(b"\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in lines if line.lower().startswith(b"content-length:")), 0)
        if len(self.buffer) < end + 4 + length:
            return
        body = bytes(self.buffer[end + 4 : end + 4 + length])
        del self.buffer[: end + 4 + length]
        answer, self.answer = self.answer, None
        answer.set_result((int(lines[0].split(b" ", 2)[1]), body))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.answer is not None and not self.answer.done():
            self.answer.set_exception(ConnectionError("the server closed the connection before its answer"))

    async def request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        assert self.transport is not None
        if self.transport.is_closing():
            raise ConnectionError("closed")
        content = b"" if body is None else json.dumps(body).encode()
        head = [f"{method} {path} HTTP/1.1", f"host: {self.host}", f"content-length: {len(content)}"]
        if body is not None:
            head.append("content-type: application/json")
        head += [f"{name}: {value}" for name, value in (headers or {}).items()]
        self.answer = asyncio.get_running_loop().create_future()
        self.transport.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + content)
        return await self.answer

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class Pool:
    """Up to `size` keep-alive connections to `url` (http://host:port), opened as needed."""

    def __init__(self, url: str, size: int) -> None:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self.host, self.port = host, int(port)
        self._free: list[Connection] = []
        self._slots = asyncio.Semaphore(size)
        self._all: list[Connection] = []

    async def _open(self) -> Connection:
        loop = asyncio.get_running_loop()
        _, connection = await loop.create_connection(lambda: Connection(f"{self.host}:{self.port}"), self.host, self.port)
        self._all.append(connection)
        return connection

    def _drop(self, connection: Connection) -> None:
        connection.close()
        self._all.remove(connection)

    async def request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        """One request on a free connection. A kept-alive connection the server has closed since
        (uvicorn drops idle ones after 5 s) fails before any answer: the request goes once more on
        a new connection (every bench request is safe to repeat: keyed, or a read)."""
        async with self._slots:
            connection = self._free.pop() if self._free else None
            if connection is not None:
                try:
                    answer = await connection.request(method, path, body, headers)
                except ConnectionError:
                    self._drop(connection)
                    connection = None
            if connection is None:
                connection = await self._open()
                try:
                    answer = await connection.request(method, path, body, headers)
                except BaseException:
                    self._drop(connection)
                    raise
            self._free.append(connection)
            return answer

    def close(self) -> None:
        for connection in self._all:
            connection.close()
