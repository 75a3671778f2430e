"""A minimal HTTP/1.1 keep-alive client for the benches: one request at a time per connection,
a pool of connections, Content-Length bodies only (what `archetype serve` answers).

Why not httpx: on this 2-core machine the client shares the CPUs with the server it measures,
and httpx spent ~5-6 ms of CPU per request at 32 in flight (~1 ms at 1), more than the server
itself; its figures were the client's. This client costs ~0.1 ms per request.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str) -> None:
        self.reader, self.writer, self.host = reader, writer, host

    async def request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        content = b"" if body is None else json.dumps(body).encode()
        head = [f"{method} {path} HTTP/1.1", f"host: {self.host}", f"content-length: {len(content)}"]
        if body is not None:
            head.append("content-type: application/json")
        head += [f"{name}: {value}" for name, value in (headers or {}).items()]
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + content)
        answer = await self.reader.readuntil(b"\r\n\r\n")
        lines = answer.split(b"\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in lines if line.lower().startswith(b"content-length:")), 0)
        return int(lines[0].split(b" ", 2)[1]), await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


class Pool:
    """Up to `size` keep-alive connections to `url` (http://host:port), opened as needed."""

    def __init__(self, url: str, size: int) -> None:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self.host, self.port = host, int(port)
        self._free: list[Connection] = []
        self._slots = asyncio.Semaphore(size)
        self._all: list[Connection] = []

    async def _open(self) -> Connection:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        connection = Connection(reader, writer, f"{self.host}:{self.port}")
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
                except (asyncio.IncompleteReadError, ConnectionError):
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
