"""The audit writer's child process when its parent is gone: one line on stderr, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(120)


def test_a_writer_whose_parent_is_gone_says_so_in_one_line(tmp_path):
    writer = subprocess.Popen([sys.executable, "-m", "archetype.audit.writer", str(tmp_path / "data")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    assert writer.stdin is not None and writer.stdout is not None and writer.stderr is not None
    writer.stdout.close()  # the parent reads no more answers: it died, SIGKILL included
    # a request in flight when the parent died: its answer has nowhere to go
    writer.stdin.write(json.dumps({"world_id": "w1", "path": str(tmp_path / "gone.arrow")}).encode() + b"\n")
    writer.stdin.close()
    code = writer.wait(60)
    lines = writer.stderr.read().decode().splitlines()
    assert lines == ["archetype audit writer: its parent process is gone (broken pipe); exiting"], lines
    assert code == 0
