"""A loopback HTTP/1.1 proxy that fails requests on purpose, in a thread: it drops the answer of a
request the server did run (the connection closes with no answer), or answers in the server's
place (a 503, a 429 with Retry-After) without forwarding."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass
class Fault:
    """The next request whose path contains `path`: `answer` None forwards it and drops the
    answer; otherwise `answer` (a raw HTTP response) is sent instead of forwarding."""

    path: str
    answer: bytes | None = None


def canned(status: int, body: str, **headers: str) -> bytes:
    head = [f"HTTP/1.1 {status} Canned", "Content-Type: application/json", f"Content-Length: {len(body)}",
            *(f"{name.replace('_', '-')}: {value}" for name, value in headers.items())]  # fmt: skip
    return ("\r\n".join(head) + "\r\n\r\n" + body).encode()


async def _message(reader: asyncio.StreamReader) -> tuple[bytes, bytes, dict[str, str]]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:] if line)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return head + body, lines[0].encode(), headers


@dataclass
class FaultyProxy:
    upstream: str
    faults: list[Fault] = field(default_factory=list)
    seen: list[tuple[str, dict[str, str]]] = field(default_factory=list)  # (request line, headers) of each request

    def __enter__(self) -> FaultyProxy:
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self._thread.start()
        assert ready.wait(10), "the proxy did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _run(self, ready: threading.Event) -> None:
        async def main() -> None:
            self._stop = asyncio.Event()
            server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
            self.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
            ready.set()
            async with server:
                await self._stop.wait()
            # connections still open end with their clients' (a task cancelled before its first step
            # would never run the `finally` that closes its sockets); the loop closes after them
            connections = asyncio.all_tasks() - {asyncio.current_task()}
            if connections:
                _, stuck = await asyncio.wait(connections, timeout=10)
                for task in stuck:
                    task.cancel()
                await asyncio.gather(*connections, return_exceptions=True)

        try:
            self._loop.run_until_complete(main())
        finally:
            self._loop.close()

    def _fault(self, request_line: str) -> Fault | None:
        if self.faults and self.faults[0].path in request_line:
            return self.faults.pop(0)
        return None

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        target = urlsplit(self.upstream)
        up_reader, up_writer = await asyncio.open_connection(target.hostname, target.port)
        try:
            while True:
                try:
                    request, line, headers = await _message(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                self.seen.append((line.decode(), headers))
                fault = self._fault(line.decode())
                if fault is not None and fault.answer is not None:
                    writer.write(fault.answer)
                    await writer.drain()
                    continue
                up_writer.write(request)
                await up_writer.drain()
                response, _, _ = await _message(up_reader)
                if fault is not None:
                    return  # the server ran it; its answer is lost with the connection
                writer.write(response)
                await writer.drain()
        finally:
            up_writer.close()
            writer.close()
