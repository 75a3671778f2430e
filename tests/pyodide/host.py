"""The CPython side of the Pyodide harness: starts tests/pyodide/host.mjs (Node + the npm Pyodide)
once, and calls functions inside its interpreters (tests/pyodide/harness.py, scenarios.py)."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HOST = Path(__file__).with_name("host.mjs")
STARTUP_TIMEOUT_S = 120
CALL_TIMEOUT_S = 120


# Maglev is the highest tier V8 may compile the host's JavaScript to. With TurboFan, Node 22.23.3
# (and 22.23.5) died of a V8 fatal error ("unreachable code" in
# Deoptimizer::DoComputeBuiltinContinuation) at test_ffi's storage values after test_edge's alarms,
# in every run at a load of about 4 (2026-12-04) though not in the idle CI runs before: a JIT timing bug, not a Pyodide behaviour
# the tests check (WebAssembly's own tiers are unaffected).
NODE_FLAGS = ("--max-opt=2",)


class PyodideError(AssertionError):
    """A call that raised inside Pyodide; the message is the Python traceback from there."""


def node_binary() -> str:
    """The project's Node 22 (npm `node-<platform>` in node_modules), else the machine's."""
    local = ROOT / "node_modules" / ".bin" / "node"
    if local.exists():
        return str(local)
    found = shutil.which("node")
    if found is None:
        raise RuntimeError("no Node.js: run ./dev setup")
    return found


def missing_setup() -> str | None:
    """Why the harness cannot start on this checkout, or None."""
    if not (ROOT / "node_modules" / "pyodide" / "pyodide.asm.wasm").exists():
        return "node_modules/pyodide is missing: run ./dev setup"
    if not any((ROOT / ".pyodide-wheels").glob("*.whl")):
        return ".pyodide-wheels/ is missing: run ./dev setup"
    return None


class PyodideHost:
    """One Node process for a test session; its "main" interpreter boots at start."""

    def __init__(self) -> None:
        started = time.perf_counter()
        self._process = subprocess.Popen(
            [node_binary(), *NODE_FLAGS, str(HOST), str(ROOT)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
            env={**os.environ, "NODE_NO_WARNINGS": "1"},
        )  # fmt: skip
        self._stderr: list[str] = []
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        self._next_id = 0
        self._lock = threading.Lock()
        ready = self._read(STARTUP_TIMEOUT_S)
        if "ready" not in ready:
            raise RuntimeError(f"the Pyodide host did not start: {ready}")
        self.port: int = ready["ready"]["port"]
        self.url = f"http://127.0.0.1:{self.port}"
        self.timings: dict[str, float] = ready["ready"]["timings"]
        self.startup_s = time.perf_counter() - started

    def _drain_stderr(self) -> None:
        for line in self._process.stderr:
            self._stderr.append(line)

    def output(self) -> str:
        """What Python printed in the interpreters (and Node's own warnings)."""
        return "".join(self._stderr)

    def _read(self, timeout: float) -> dict[str, Any]:
        result: list[str] = []
        reader = threading.Thread(target=lambda: result.append(self._process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        if not result or not result[0]:
            self.close()
            raise RuntimeError(f"the Pyodide host stopped answering; its output:\n{self.output()[-4000:]}")
        return json.loads(result[0])

    def request(self, op: str, timeout: float = CALL_TIMEOUT_S, **fields: Any) -> Any:
        with self._lock:
            self._next_id += 1
            self._process.stdin.write(json.dumps({"id": self._next_id, "op": op, **fields}) + "\n")
            self._process.stdin.flush()
            answer = self._read(timeout)
        if not answer["ok"]:
            raise PyodideError(answer["error"])
        return answer["value"]

    def call(self, function: str, interpreter: str = "main", **kwargs: Any) -> Any:
        """`function` is "module:name" inside the interpreter; kwargs and result are JSON."""
        return self.request("call", function=function, interpreter=interpreter, kwargs=kwargs)

    def boot(self, interpreter: str, *, bundle: Path) -> dict[str, float]:
        """A fresh interpreter that sees only `bundle` (and its python_modules/), not src/."""
        return self.request("boot", interpreter=interpreter, bundle=str(bundle))

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.stdin.close()  # host.mjs exits when its stdin closes
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()


_shared: PyodideHost | None = None


def shared_host() -> PyodideHost:
    """The session's host, started on first use (start-up is paid once per test run); it stops
    when the test process exits, by atexit or, failing that, because its stdin closes."""
    global _shared
    if _shared is None:
        reason = missing_setup()
        if reason is not None:
            raise RuntimeError(reason)
        _shared = PyodideHost()
        atexit.register(_shared.close)
    return _shared
