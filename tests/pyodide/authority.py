"""The Worker on the real interpreter as an `Authority`, in the conformance suite's factory shape
`(directory, clock)` -> async context manager: `HttpAuthority` over loopback HTTP to the Node
host, where Pyodide runs the Worker entry, the shared app, `DurableObjectAuthority` and the real
`WorldObject` behind JS bindings (tests/pyodide/workers_runtime.mjs). The test's ManualClock rides
on every request (`x-harness-now-ms`), so the objects stamp the same times as a local authority.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path

from archetype.commands.port import ManualClock
from archetype.remote import HttpAuthority
from tests.pyodide.host import shared_host
from tests.support.clock_header import ClockHeader
from tests.support.roles import EVERY_METHOD

TOKEN = "pyodide-conformance"


@asynccontextmanager
async def pyodide_worker_over_http(directory: Path, clock: ManualClock):
    host = shared_host()
    host.call("tests.pyodide.harness:deploy", tokens={TOKEN: {"principal": "root", "roles": EVERY_METHOD}})
    authority = HttpAuthority(host.url, token=TOKEN, transport=ClockHeader(clock))
    try:
        yield authority
    finally:
        await authority.close()
