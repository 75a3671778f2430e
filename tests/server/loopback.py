"""Loopback HTTP for tests: the shared app under a real uvicorn on 127.0.0.1, and an authority
factory (for the conformance suite's AUTHORITY_FACTORIES) that reaches a local catalog through it."""

from __future__ import annotations

import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path

import uvicorn

from archetype.api import create_app
from archetype.commands.port import ManualClock
from archetype.remote import HttpAuthority
from local_catalog import open_local_authority
from tests.support.roles import EVERY_METHOD

START_TIMEOUT_S = 10


class LoopbackServer:
    """The shared app under a real uvicorn on 127.0.0.1 (any free port), in a thread."""

    def __init__(self, app, **config) -> None:
        self.app = app
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off", **config))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> LoopbackServer:
        self.thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        host, port = self.server.servers[0].sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(START_TIMEOUT_S)


@asynccontextmanager
async def local_over_http(directory: Path, clock: ManualClock):
    """The local catalog behind `archetype.api` on loopback, reached through HttpAuthority (admin token)."""
    local = open_local_authority(directory, clock=clock)
    with LoopbackServer(create_app(local, tokens={"conformance": {"principal": "root", "roles": EVERY_METHOD}})) as server:
        authority = HttpAuthority(server.url, token="conformance")
        try:
            yield authority
        finally:
            await authority.close()
    await local.close()
