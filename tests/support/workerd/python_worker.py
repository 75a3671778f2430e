"""Our Worker and its Durable Objects in the real Workers runtime (the real-runtime rung of
docs/verification.md): the staged Worker, run by the pinned workerd (package.json `workerd-python`)
with workerd's offline Pyodide bundle, on 127.0.0.1, its objects' SQLite files on local disk.

One per test session, started on first use (a cold start takes 10-25 s: workerd loads Pyodide and
imports the Worker) and stopped at session end (tests/conftest.py), or by the kernel if pytest dies;
tests isolate by world id. The bundle is staged with `tests.server.game` (worlds named `edge-*` are
stepped by their object's alarm, the rest by a runner) and `tests/workerd/harness_entry.py` as its
main module: a request's `x-archetype-test-namespace` gives it Durable Objects of their own and its
`x-archetype-test-now-ms` sets their clock (without them: the objects' own names, the system clock).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from archetype.commands.port import ManualClock
from archetype.remote import HttpAuthority
from tests.audit.queue_server import LoopbackQueue
from tests.support.clock_header import ClockHeader
from tests.support.roles import EVERY_METHOD
from tests.support.workerd.process import WorkerdError, WorkerdProcess
from tests.workerd.harness_entry import NAMESPACE_HEADER, NOW_HEADER
from worker.local_workerd import LocalWorker, MissingRuntimeError, check_runtime

ROOT = Path(__file__).resolve().parents[3]
HARNESS_ENTRY = ROOT / "tests" / "workerd" / "harness_entry.py"
MODULES = ("tests.server.game",)
TOKENS = {
    "workerd-admin": {"principal": "root", "roles": EVERY_METHOD},
    "workerd-operator": {"principal": "ops", "roles": ["operator"]},
    "workerd-player": {"principal": "pat", "roles": ["player"]},
}
ADMIN_TOKEN, OPERATOR_TOKEN, PLAYER_TOKEN = TOKENS
# Edge-hosted worlds tick at the product's pace (durable_world.edge.TICK_INTERVAL_MS, one second):
# the edge-hosting parity scripts step a world one interval at a time, as serve's runner does. A
# failed audit send is retried after AUDIT_RETRY_DELAY_MS, then with backoff.
VARS = {"AUDIT_RETRY_DELAY_MS": "1000"}
# workerd listens only once the Worker is loaded (Pyodide, then the Worker's imports): 11-25 s
# measured on a 2-core machine at load 3-9; generous, for a busier one.
LISTEN_TIMEOUT_S = 180.0
HEALTH_TIMEOUT_S = 60.0


class PythonWorker:
    """The deployment: `url`, `tokens`, `storage` (the objects' SQLite files), `log_path` (workerd's
    output: the Worker's Python logs land there, one JSON line each), `queue` (the audit queue the
    objects send to: a LoopbackQueue, Cloudflare's pull API for consumers), `restart()`; `build_s`
    (staging and config) and `cold_starts` (seconds from each start to the first answer of /health)
    say what it cost."""

    def __init__(self, directory: Path | None = None, *, modules: Sequence[str] = MODULES,
                 tokens: Mapping[str, object] = TOKENS, vars: Mapping[str, str] | None = None) -> None:  # fmt: skip
        """The tests' deployment by default; a bench stages its own `modules`, `tokens`, `vars` (over VARS)."""
        check_runtime()
        self.directory = directory or Path(tempfile.mkdtemp(prefix="archetype-workerd-python-"))
        self._owns_directory = directory is None
        self.tokens = tokens
        self.queue = LoopbackQueue().__enter__()
        self.local = LocalWorker(self.directory, modules=modules, tokens=tokens, vars={**VARS, **(vars or {})},
                                 main=HARNESS_ENTRY, queue_address=self.queue.address)  # fmt: skip
        self.log_path = self.directory / "workerd.log"
        self.cold_starts: list[float] = []
        self._port = 0
        self._process: WorkerdProcess | None = None
        try:
            started = time.monotonic()
            self.local.build()
            self.build_s = time.monotonic() - started
            self.start()
        except BaseException:
            self.close()
            raise

    @property
    def storage(self) -> Path:
        return self.local.storage_dir

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        """Start workerd (on the port of the previous start, if any, so clients keep their URL) and
        wait until the Worker answers /health."""
        if self._process is not None:
            raise WorkerdError("the Worker runs already; restart() it")
        started = time.monotonic()
        socket = [f"--socket-addr=http=127.0.0.1:{self._port}"] if self._port else []
        self._process = WorkerdProcess(self.local.command(*socket), self.log_path, ready_timeout_s=LISTEN_TIMEOUT_S)
        self._port = self._process.port
        try:
            self._await_health()
        except BaseException:
            self.stop()
            raise
        self.cold_starts.append(time.monotonic() - started)

    def _await_health(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + HEALTH_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.process.poll() is not None:
                raise WorkerdError(f"workerd exited ({self._process.process.returncode}): {self.log()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=HEALTH_TIMEOUT_S).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise WorkerdError(f"the Worker did not answer /health within {HEALTH_TIMEOUT_S} s: {self.log()}")

    def stop(self) -> None:
        """Stop workerd by its PID; the storage stays (`start()` resumes on it)."""
        process, self._process = self._process, None
        if process is not None:
            process.stop()

    def restart(self) -> None:
        """Stop and start again on the same local disk and port: the objects' storage survives, as
        it does an eviction; every isolate, object instance and in-memory state is new."""
        self.stop()
        self.start()

    def log(self, limit: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-limit:] if self.log_path.exists() else ""

    def json_logs(self) -> list[dict[str, Any]]:
        """The Python log records in workerd's output so far (one JSON object per line, durable_world.logs)."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        records = []
        for line in text.splitlines():
            with contextlib.suppress(ValueError):
                if isinstance(record := json.loads(line), dict):
                    records.append(record)
        return records

    def close(self) -> None:
        self.stop()
        self.queue.__exit__(None, None, None)
        if self._owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)


_shared: PythonWorker | None = None
_failed: BaseException | None = None


def require_runtime() -> None:
    """Where the pinned workerd or the offline bundle is missing, skip the test with one line
    saying how to get it; under CI=true, fail it."""
    try:
        check_runtime()
    except MissingRuntimeError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the real-runtime tests cannot run: {exc}", pytrace=False)
        pytest.skip(str(exc))


def shared_python_worker() -> PythonWorker:
    """The session's deployment, started on first use (tests/conftest.py stops it at session end);
    skipped or failed by `require_runtime`. A deployment that failed to start fails every later
    caller at once."""
    global _shared, _failed
    require_runtime()
    if _failed is not None:
        raise WorkerdError(f"the session's Worker failed to start: {_failed}")
    if _shared is None:
        try:
            _shared = PythonWorker()
        except BaseException as exc:
            _failed = exc
            raise
    return _shared


def stop_shared_python_worker() -> None:
    global _shared
    if _shared is not None:
        worker, _shared = _shared, None
        worker.close()


@asynccontextmanager
async def worker_workerd_authority(directory: Path, clock: ManualClock):
    """The HTTP client authority against the session's deployment, in a test namespace of its own
    on the test's clock (tests/workerd/harness_entry.py): a conformance authority factory."""
    worker = shared_python_worker()
    headers = {NAMESPACE_HEADER: uuid.uuid4().hex}
    authority = HttpAuthority(worker.url, token=ADMIN_TOKEN, transport=ClockHeader(clock, NOW_HEADER, headers))
    try:
        yield authority
    finally:
        await authority.close()
