"""A test's ManualClock on every HTTP request, for a Worker that lets a request set its Durable
Objects' clock: the Pyodide host's (`x-harness-now-ms`, tests/pyodide/host.mjs) or the real
runtime's (`x-archetype-test-now-ms`, tests/workerd/harness_entry.py, with `headers` naming the
test namespace)."""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from archetype.commands.port import ManualClock
from archetype.http_client import LIMITS


class ClockHeader(httpx.AsyncBaseTransport):
    def __init__(self, clock: ManualClock, header: str = "x-harness-now-ms",
                 headers: Mapping[str, str] | None = None) -> None:  # fmt: skip
        self._clock = clock
        self._header = header
        self._headers = dict(headers or {})
        self._inner = httpx.AsyncHTTPTransport(limits=LIMITS)  # as our clients are

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request.headers.update(self._headers)
        request.headers[self._header] = str(self._clock.now_ms())
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()
