"""The Worker over loopback HTTP: `worker.entry.build_app` with the bindings wrangler.toml
declares (the real WorldObject on the Durable Object stand-in, a fake audit Queue, a token
secret), on the session's uvicorn on 127.0.0.1 (tests/support/shared_loopback.py) and reached
through `HttpAuthority`. An authority factory
of the conformance suite's shape: `(directory, clock)` -> async context manager."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from pathlib import Path

from archetype.commands.port import ManualClock
from tests.support.durable_object_standin import world_namespace
from tests.support.roles import EVERY_METHOD
from tests.support.shared_loopback import shared_loopback
from worker.entry import build_app

TOKEN = "worker-conformance"


@asynccontextmanager
async def worker_over_http(directory: Path, clock: ManualClock):
    namespace = world_namespace(directory, clock)
    namespace.env.ARCHETYPE_TOKENS = json.dumps({TOKEN: {"principal": "root", "roles": EVERY_METHOD}})
    try:
        async with shared_loopback().serving(build_app(namespace.env), TOKEN) as authority:
            yield authority
    finally:
        namespace.close()
