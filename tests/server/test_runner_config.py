"""`archetype runner` refusals: each one line, exit 2 (the console script), and the runner id
fencing under it (`RunnerRegistry.join`, `hold_runner_id`): two live processes never share an id."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from archetype.commands.port import ManualClock
from archetype.data_directory import serve_instance
from archetype.remote_runner import hold_runner_id, runner_instance
from archetype.runner_registry import RunnerBusyError, RunnerRegistry
from local_catalog import open_local_authority

pytestmark = pytest.mark.timeout(120)
ARCHETYPE = str(Path(sys.executable).parent / "archetype")


def refused(cwd: Path, *args: str) -> str:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ARCHETYPE_")}
    process = subprocess.run([ARCHETYPE, "runner", *args], cwd=cwd, env=environment, capture_output=True, text=True,
                             timeout=60)  # fmt: skip
    assert process.returncode == 2, (process.stdout, process.stderr)
    lines = process.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), process.stderr
    return lines[0]


def test_a_runner_without_a_token_file_is_refused(tmp_path):
    assert "setting 'token_file'" in refused(tmp_path)
    assert "--token-file" in refused(tmp_path, "--token-file", str(tmp_path / "missing"))


def test_a_runner_whose_server_does_not_answer_is_refused(tmp_path):
    (tmp_path / "token").write_text("t-operator")
    line = refused(tmp_path, "--url", "http://127.0.0.1:9", "--token-file", str(tmp_path / "token"), "--runner-id", "r-unreachable")
    assert line.startswith("error: --url http://127.0.0.1:9: cannot reach it"), line


async def test_a_runner_id_live_elsewhere_is_refused_and_the_same_instance_resumes(tmp_path):
    clock = ManualClock()
    authority = open_local_authority(tmp_path, clock=clock)
    try:
        await RunnerRegistry(authority, "r1", "runner@other-host", 5_000).join()
        with pytest.raises(RunnerBusyError, match="runner id 'r1' is held by 'runner@other-host'"):
            await RunnerRegistry(authority, "r1", runner_instance(), 5_000).join()
        restarted = RunnerRegistry(authority, "r1", "runner@other-host", 5_000)
        await restarted.join()  # the same instance: at once, live or not
        assert await restarted.live() == ["r1"]
        await restarted.leave()
        await RunnerRegistry(authority, "r1", serve_instance(tmp_path), 5_000).join()  # left: free at once
    finally:
        await authority.close()


def test_a_second_live_runner_of_the_same_id_on_one_host_is_refused():
    with hold_runner_id("http://127.0.0.1:8787", "r-same"):
        with pytest.raises(RunnerBusyError, match="already runs on this host"):
            with hold_runner_id("http://127.0.0.1:8787/", "r-same"):
                pass
        with hold_runner_id("http://127.0.0.1:8787", "r-other"):  # another id is another runner
            pass
    with hold_runner_id("http://127.0.0.1:8787", "r-same"):  # the first one stopped: free again
        pass
