"""The Worker over loopback HTTP: `worker.entry.build_app` with the bindings wrangler.toml
declares (the real WorldObject on the Durable Object stand-in, a fake audit Queue, a token
secret), served by uvicorn on 127.0.0.1 and reached through `HttpAuthority`. An authority factory
of the conformance suite's shape: `(directory, clock)` -> async context manager."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from pathlib import Path

from archetype.commands.port import ManualClock
from archetype.remote import HttpAuthority
from tests.server.loopback import LoopbackServer
from tests.support.durable_object_standin import world_namespace
from tests.support.roles import EVERY_METHOD
from worker.entry import build_app

TOKEN = "worker-conformance"


@asynccontextmanager
async def worker_over_http(directory: Path, clock: ManualClock):
    namespace = world_namespace(directory, clock)
    namespace.env.ARCHETYPE_TOKENS = json.dumps({TOKEN: {"principal": "root", "roles": EVERY_METHOD}})
    with LoopbackServer(build_app(namespace.env)) as server:
        authority = HttpAuthority(server.url, token=TOKEN)
        try:
            yield authority
        finally:
            await authority.close()
    namespace.close()
