"""The authorities the conformance suite runs against. Each factory is an async context manager
taking (directory, clock) and yielding an `Authority`; add a factory here and every conformance
test (and the parity suite) runs against it too.

A conformance file runs its tests on every authority unless it declares `AUTHORITIES = LEDGERS`:
the ledger's implementations, without the transports in front of them (docs/testing.md, "Which
authorities", gives each file's choice and its reason; test_authority_choices.py holds the two to
each other). What a transport can break, it breaks for every method: test_every_method.py runs
every ledger method on every authority.

- local: the SQLite catalog in-process (the embedded default);
- local_http: the same catalog behind the shared HTTP app on loopback (what `archetype serve` runs);
- durable_object: the real Durable Object class on the stand-in runtime, through its RPC;
- durable_object_workerd: the same, with the object's SQL on the real Durable Object SQL engine
  (workerd, tests/support/workerd);
- worker_http: the Worker's app over loopback HTTP in front of Durable Objects on the stand-in;
- worker_workerd: the Worker and its Durable Objects in the real Workers runtime (workerd running
  our Python on its Pyodide: real RPC, storage and structured clone), over HTTP, each test in a
  namespace of its own on the session's deployment (tests/support/workerd/python_worker.py).
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path

from archetype.commands.port import ManualClock
from local_catalog import open_local_authority
from tests.support.durable_object_standin import standin_authority
from tests.support.shared_loopback import local_over_http
from tests.support.worker_http import worker_over_http
from tests.support.workerd.engine import workerd_authority
from tests.support.workerd.python_worker import worker_workerd_authority


@asynccontextmanager
async def local_in_process(directory: Path, clock: ManualClock):
    authority = open_local_authority(directory, clock=clock)
    try:
        yield authority
    finally:
        await authority.close()


AUTHORITY_FACTORIES = {
    "local": local_in_process,
    "local_http": local_over_http,
    "durable_object": standin_authority,
    "durable_object_workerd": workerd_authority,
    "worker_http": worker_over_http,
    "worker_workerd": worker_workerd_authority,
}

EVERY_AUTHORITY = tuple(sorted(AUTHORITY_FACTORIES))
# The ledger's two implementations: the local catalog, and the Durable Object's code on the
# stand-in's SQLite and on the real Durable Object SQL engine. Every behaviour is proven on each.
LEDGERS = ("durable_object", "durable_object_workerd", "local")


def authorities_of(module: object) -> tuple[str, ...]:
    """The authorities a conformance file's tests run on: its `AUTHORITIES`, else every one."""
    chosen = tuple(getattr(module, "AUTHORITIES", EVERY_AUTHORITY))
    unknown, missing = set(chosen) - set(AUTHORITY_FACTORIES), set(LEDGERS) - set(chosen)
    if unknown or missing:
        raise ValueError(f"{getattr(module, '__name__', module)}: AUTHORITIES names {sorted(unknown)} that are not "
                         f"authorities and leaves out the ledger implementations {sorted(missing)}")  # fmt: skip
    return tuple(sorted(chosen))
