"""Loopback HTTP for tests: the shared app under a real uvicorn on 127.0.0.1 (the conformance
suite's HTTP authorities share one: tests/support/shared_loopback.py)."""

from __future__ import annotations

import threading
import time

import uvicorn

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

