"""One uvicorn on 127.0.0.1 for the session's HTTP authorities (the conformance suite's local_http
and worker_http, tests/conformance/authorities.py): each authority is a fresh app over a fresh
ledger, as before, mounted on the shared server under a key of its own that its client sends in
`x-loopback-app`. Only the listening socket is shared: starting a uvicorn per authority and
stopping it (its shutdown waits for the next 0.1 s tick of its loop, then its thread) cost 0.2-0.3 s
a test, a minute over the suite (docs/testing.md, "What the suite costs").

Started on first use, stopped at session end (tests/conftest.py)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from archetype.api import create_app
from archetype.commands.port import ManualClock
from archetype.http_client import LIMITS
from archetype.remote import HttpAuthority
from local_catalog import open_local_authority
from tests.server.loopback import LoopbackServer
from tests.support.roles import EVERY_METHOD

APP_HEADER = "x-loopback-app"


class _Mounted(httpx.AsyncHTTPTransport):
    """Our clients' transport, naming the app every request is for."""

    def __init__(self, key: str) -> None:
        super().__init__(limits=LIMITS)
        self._key = key

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request.headers[APP_HEADER] = self._key
        return await super().handle_async_request(request)


class SharedLoopback:
    def __init__(self) -> None:
        self._apps: dict[str, Any] = {}
        self._server = LoopbackServer(self._route, interface="asgi3").__enter__()

    async def _route(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        key = dict(scope["headers"]).get(APP_HEADER.encode(), b"").decode()
        app = self._apps.get(key)
        if app is None:  # an authority used after it was closed
            await send({"type": "http.response.start", "status": 421, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": f"no app is mounted as {key!r}".encode()})
            return
        await app(scope, receive, send)

    @asynccontextmanager
    async def serving(self, app: Any, token: str) -> AsyncIterator[HttpAuthority]:
        """`app` on the shared server while the block runs, reached through an HttpAuthority with `token`."""
        key = uuid.uuid4().hex
        self._apps[key] = app
        authority = HttpAuthority(self._server.url, token=token, transport=_Mounted(key))
        try:
            yield authority
        finally:
            await authority.close()
            del self._apps[key]

    def close(self) -> None:
        self._server.__exit__(None, None, None)


_shared: SharedLoopback | None = None


def shared_loopback() -> SharedLoopback:
    global _shared
    if _shared is None:
        _shared = SharedLoopback()
    return _shared


def stop_shared_loopback() -> None:
    global _shared
    if _shared is not None:
        server, _shared = _shared, None
        server.close()


@asynccontextmanager
async def local_over_http(directory: Path, clock: ManualClock) -> AsyncIterator[HttpAuthority]:
    """The local catalog behind `archetype.api` on loopback, reached through HttpAuthority (admin token)."""
    local = open_local_authority(directory, clock=clock)
    app = create_app(local, tokens={"conformance": {"principal": "root", "roles": EVERY_METHOD}})
    try:
        async with shared_loopback().serving(app, "conformance") as authority:
            yield authority
    finally:
        await local.close()
