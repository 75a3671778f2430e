"""The real Durable Object SQL engine as a test fixture (rung 2 of DESIGN's verification ladder).

`workerd serve` (node_modules/.bin/workerd, installed by `./dev setup` from package-lock.json)
runs sql_engine.js on 127.0.0.1: a JavaScript Durable Object class with SQLite storage that
executes the statements it is sent. `WorkerdSqlEngine` is one object's `ctx.storage` SQL as
`DurableObjectSqlPort` uses it (`sql.exec(query, *bindings).raw().toArray()`, `transactionSync`),
so the stand-in runtime can host the real `WorldObject` with its SQL on the engine Cloudflare runs.

Values cross as Pyodide would hand them over: a Python int is a JS number below 2**53 - 1 in
magnitude and a BigInt from there on, None is `undefined`, a bool is a JS boolean. Answers come back as the JS values
the engine produced, in the stand-in's spelling: every number a Python float.

Transactions. The SQL API has no interactive transactions (BEGIN/SAVEPOINT are refused and
`transactionSync` cannot stay open across HTTP requests), so a Python transaction is replayed:
every `exec` inside it sends every statement of the transaction so far; the object runs them in
one `transactionSync`, answers each, and rolls back. When the Python callback returns, the list
is sent once more with the answers the ledger saw, and the object runs it in one
`transactionSync` that commits only if every answer is byte-identical (otherwise it rolls back
and the commit fails with `ReplayDivergedError`). A callback that raises sends nothing: every
statement it ran was already rolled back. This is atomic on the real engine, and equivalent to
the callback having run inside one `transactionSync`, because the ledger's statements depend
only on its inputs and the answers it saw, and nobody else writes the object meanwhile (each
object belongs to one namespace of one test, which runs one call at a time).

Answers already seen. Replaying costs a request per statement, each sending the transaction so far:
a fresh object's schema migrations alone are thousands of statements in about a hundred requests,
paid by every object of every test. So the server remembers each probed answer under the object's
committed history (every statement and answer committed since it was empty, as a digest) and the
transaction's statements so far: an object in the same state running the same statements is given
that answer without a request. Nothing goes unchecked: the commit still runs every statement on the
real engine and commits only if each answers what the ledger was given, so an answer that would
differ fails the commit (`ReplayDivergedError`) as a probed one would.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.support.durable_object_standin import (
    PYODIDE_BIGINT_FROM,
    DurableObjectId,
    SqlCursor,
    SqlError,
    standin_authority,
)
from tests.support.workerd.process import WorkerdError, WorkerdProcess

HERE = Path(__file__).resolve().parent
WORKERD = HERE.parents[2] / "node_modules" / ".bin" / "workerd"
CONFIG = HERE / "config.capnp"
READY_TIMEOUT_S = 20.0
REQUEST_TIMEOUT_S = 60.0


class ReplayDivergedError(WorkerdError):
    """A replayed transaction answered differently from what the Python side saw; nothing was committed."""


class WorkerdServer:
    """One `workerd serve` process on 127.0.0.1 with its storage in a temporary directory."""

    def __init__(self) -> None:
        if not os.access(WORKERD, os.X_OK):
            raise WorkerdError(f"{WORKERD} is missing: `./dev setup` installs it (npm ci, package-lock.json)")
        started = time.monotonic()
        self._directory = Path(tempfile.mkdtemp(prefix="archetype-workerd-"))
        (self._directory / "storage").mkdir()
        try:
            self._process = WorkerdProcess(
                [str(WORKERD), "serve", str(CONFIG), f"--directory-path=storage={self._directory / 'storage'}"],
                self._directory / "workerd.log", ready_timeout_s=READY_TIMEOUT_S,
            )  # fmt: skip
        except BaseException:
            shutil.rmtree(self._directory, ignore_errors=True)
            raise
        self.url = f"http://127.0.0.1:{self._process.port}"
        self._client = httpx.Client(base_url=self.url, timeout=REQUEST_TIMEOUT_S)
        self.startup_s = time.monotonic() - started
        # object name -> digest of what it committed; (that digest, a transaction's statements) -> answer
        self.histories: dict[str, str] = {}
        self.answers_seen: dict[str, str] = {}

    def log(self) -> str:
        return self._process.log()

    def run(self, object_name: str, statements: list[list[Any]], *, expect: list[str] | None = None,
            probe: bool = False) -> list[str]:  # fmt: skip
        """Run `statements` in one transactionSync of object `object_name`; return each answer's JSON text."""
        body = json.dumps({"statements": statements, "expect": expect, "probe": probe}, allow_nan=False)
        response = self._client.post("/", params={"object": object_name}, content=body,
                                     headers={"content-type": "application/json"})  # fmt: skip
        if response.status_code == 409:
            answers = response.json()["answers"]
            first = next(i for i, (got, want) in enumerate(zip(answers, expect or (), strict=True)) if got != want)
            raise ReplayDivergedError(
                f"object {object_name}: statement {first} ({statements[first][0][:200]!r}) answered "
                f"{answers[first][:300]} on replay, {expect[first][:300]} before; the transaction was rolled back"
            )
        if response.status_code != 200:
            raise WorkerdError(f"workerd answered {response.status_code}: {response.text[:2000]}\n{self.log()}")
        return response.json()["answers"]

    def close(self) -> None:
        self._client.close()
        self._process.stop()
        shutil.rmtree(self._directory, ignore_errors=True)


_shared: WorkerdServer | None = None


def shared_server() -> WorkerdServer:
    """The session's workerd, started on first use (tests/conftest.py stops it at session end)."""
    global _shared
    if _shared is None:
        _shared = WorkerdServer()
    return _shared


def stop_shared_server() -> None:
    global _shared
    if _shared is not None:
        server, _shared = _shared, None
        server.close()


# -- values across the boundary ---------------------------------------------------------------


def encode_binding(value: Any) -> Any:
    """A Python binding as JSON for the JS value Pyodide would pass to `sql.exec`."""
    if value is None:
        return {"$": "undefined"}
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value if abs(value) < PYODIDE_BIGINT_FROM else {"$": "bigint", "v": str(value)}
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return {"$": "number", "v": "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")}
    raise TypeError(f"binding a {type(value).__name__} is not modelled (Pyodide would pass a proxy object)")


def _decoded(value: dict[str, Any]) -> Any:
    tag = value.get("$")
    if tag == "number":
        return float(value["v"])  # "-0", "Infinity", "-Infinity", "NaN"
    if tag == "bytes":
        return base64.b64decode(value["v"])
    return value


def decode_answer(text: str) -> SqlCursor:
    """One statement's answer as the stand-in's cursor (every JS number a float), or its SqlError."""
    answer = json.loads(text, parse_int=float, object_hook=_decoded)
    if "error" in answer:
        raise SqlError(answer["error"])
    rows = [tuple(row) for row in answer["rows"]]
    return SqlCursor(answer["columns"], rows, int(answer["rowsRead"]), int(answer["rowsWritten"]))


# -- one object's SQL -------------------------------------------------------------------------


class WorkerdSql:
    """`ctx.storage.sql` on the real engine."""

    def __init__(self, engine: WorkerdSqlEngine) -> None:
        self._engine = engine

    def exec(self, query: str, *bindings: Any) -> SqlCursor:
        return self._engine.exec(query, bindings)


class WorkerdSqlEngine:
    """One object's SQL engine on workerd, for `DurableObjectNamespace(sql_engine=...)`."""

    def __init__(self, server: WorkerdServer, object_name: str) -> None:
        self._server = server
        self.object_name = object_name
        self.sql = WorkerdSql(self)
        # the open transaction: each statement (JSON-ready) with the answer the caller was given,
        # and the digest of the object's history and those statements (the key of `answers_seen`)
        self._transaction: list[tuple[list[Any], str]] | None = None
        self._digest = hashlib.sha256()

    def exec(self, query: str, bindings: tuple[Any, ...]) -> SqlCursor:
        statement = [query, [encode_binding(value) for value in bindings]]
        if self._transaction is None:  # outside transactionSync a statement commits on its own
            (answer,) = self._server.run(self.object_name, [statement])
            self._committed([(statement, answer)])
            return decode_answer(answer)
        self._digest.update(json.dumps(statement).encode())
        key = self._digest.hexdigest()
        answer = self._server.answers_seen.get(key)
        if answer is None:
            # Earlier statements answer again; should they answer otherwise now, the commit catches it.
            answers = self._server.run(self.object_name, [s for s, _ in self._transaction] + [statement], probe=True)
            answer = self._server.answers_seen[key] = answers[-1]
        self._transaction.append((statement, answer))
        return decode_answer(answer)

    def transactionSync(self, fn: Callable[[], Any]) -> Any:
        if self._transaction is not None:
            raise SqlError("nested transactionSync is not modelled by the workerd fixture (the ledger never nests)")
        self._transaction = []
        self._digest = hashlib.sha256(self._server.histories.get(self.object_name, "").encode())
        try:
            result = fn()
        finally:
            done, self._transaction = self._transaction, None
        if done:  # a callback that raised skipped this: its statements only ever ran rolled back
            self._server.run(self.object_name, [s for s, _ in done], expect=[answer for _, answer in done])
            self._committed(done)
        return result

    def _committed(self, statements: list[tuple[list[Any], str]]) -> None:
        history = hashlib.sha256(self._server.histories.get(self.object_name, "").encode())
        history.update(json.dumps(statements).encode())
        self._server.histories[self.object_name] = history.hexdigest()

    def close(self) -> None:
        """Nothing to release: the object's data stays in workerd, as a Durable Object's survives eviction."""


def workerd_sql_engines(server: WorkerdServer | None = None) -> Callable[[DurableObjectId], WorkerdSqlEngine]:
    """SQL engines for one namespace: its objects get a fresh name prefix on the (shared) server,
    so every namespace, hence every test, starts from empty objects."""
    server = server or shared_server()
    prefix = uuid.uuid4().hex
    return lambda object_id: WorkerdSqlEngine(server, f"{prefix}-{object_id.hex}")


@asynccontextmanager
async def workerd_authority(directory: Path, clock: Any):
    """The real WorldObject hosted by the stand-in runtime (RPC, alarms, queue) with its SQL on
    workerd: an authority factory of the conformance suite's shape."""
    async with standin_authority(directory, clock, sql_engine=workerd_sql_engines()) as authority:
        yield authority
