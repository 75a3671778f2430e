"""`./dev edge-dev` as a user runs it (docs/deployment.md, "Local sessions"): wrangler dev on the
pinned workerd with the offline Pyodide bundle, the token table from the environment, a game
module whose `edge-*` worlds step by their object's alarm; the Client works against it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest

from archetype import Client
from tests.support.workerd.python_worker import require_runtime
from tests.workerd.test_real_runtime import SETTLE_S, mover

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "edge-dev-token"
START_TIMEOUT_S = 240.0  # the build, wrangler, then workerd's cold start, on a loaded 2-core machine

pytestmark = pytest.mark.timeout(420)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_edge_dev_runs_the_worker_offline_with_the_tokens_from_the_environment(tmp_path):
    require_runtime()
    port = free_port()
    env = {**os.environ, "ARCHETYPE_TOKENS": json.dumps({TOKEN: {"principal": "me", "roles": ["admin"]}})}
    output = tmp_path / "edge-dev.out"
    with output.open("wb") as out:
        dev = subprocess.Popen(
            [str(ROOT / "dev"), "edge-dev", "--module", "tests.server.game", "--port", str(port),
             "--persist-to", str(tmp_path / "state")],
            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: wrangler and the workerd it starts stop with it
        )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert dev.poll() is None, f"edge-dev exited ({dev.returncode}):\n{output.read_text()[-4000:]}"
            assert time.monotonic() < deadline, f"edge-dev did not answer within {START_TIMEOUT_S} s:\n{output.read_text()[-4000:]}"
            try:
                if httpx.get(f"{url}/health", timeout=START_TIMEOUT_S).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.5)
        assert any(line.startswith(f"edge-dev: {url} (workerd 1.20260822.1 ") for line in output.read_text().splitlines())
        world_id = f"edge-{uuid.uuid4().hex[:8]}"
        with Client(url, token=TOKEN) as client:
            client.create_world("edge dev", world_id=world_id)
            client.submit(world_id, mover(), idempotency_key="spawn-dev")
            settled = client.wait(world_id, "spawn-dev", timeout=SETTLE_S)
            assert (settled.status, settled.principal) == ("APPLIED", "me")
        assert httpx.get(f"{url}/worlds", headers={"authorization": "Bearer nobody"}).status_code == 401
    finally:
        stop_group(dev)


def stop_group(process: subprocess.Popen) -> None:
    """SIGTERM to edge-dev (wrangler, by then), as Ctrl-C would; its process group, workerd included,
    must be gone soon after (SIGKILLed, and the test failed, if not)."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    raise AssertionError("a process of edge-dev (wrangler's workerd?) outlived it by 15 s")


def test_edge_dev_without_the_bundle_says_how_to_get_it_in_one_line(tmp_path):
    env = {**os.environ, "ARCHETYPE_WORKERD_PYTHON_BUNDLE": str(tmp_path / "nowhere.capnp.bin")}
    run = subprocess.run([str(ROOT / "dev"), "edge-dev"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120, stdin=subprocess.DEVNULL)  # fmt: skip
    assert run.returncode == 1
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("edge-dev: workerd's Python bundle") and "shared/workerd-python" in lines[0]
