"""A second `archetype serve` on one data directory: with the same runner id it is refused with one
line and exit 2; with another id it joins as a cooperating runner (tests/crash/test_cooperating_runners.py
splits worlds between two). Never a silent fight.

Each live runner holds an OS lock on `<data>/runners/<runner id>.lock`, which the OS drops when the
process dies, however it dies (SIGKILL included): a restart under the same id then starts at once.
The singleton duties (audit projector, retention) follow `<data>/serve.lock`: one runner holds it,
and another takes it on when that one dies.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import TOKENS
from tests.crash.harness import Serve

pytestmark = [pytest.mark.crash, pytest.mark.timeout(240)]

EXIT_S = 60


def test_the_same_runner_id_twice_is_refused_and_another_joins(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = Serve(tmp_path, data, TOKENS, "--runner-id", "runner-one")
    others: list[Serve] = []
    try:
        url = first.wait_serving()
        second = Serve(tmp_path, data, TOKENS, "--runner-id", "runner-one")
        # started alongside the refused one (both meet the first live): one start-up waited for, not two;
        # its short world lease makes it look for the duties' lock every half second, not every 3.3 s
        joined = Serve(tmp_path, data, TOKENS, "--runner-id", "runner-two", "--world-lease", "1.5")
        others += [second, joined]
        line = second.next_line(EXIT_S)  # None: its stdout closed without a line, it never served
        assert line is None, f"a second serve with the same runner id started: {line}"
        assert second.popen.wait(EXIT_S) == 2, second.stderr()
        lines = second.stderr().strip().splitlines()
        assert len(lines) == 1 and "already served by runner 'runner-one'" in lines[0], second.stderr()
        assert "another --runner-id to join it" in lines[0]
        print(f"refusal: {lines[0]}")
        assert first.alive()
        with httpx.Client(base_url=url, timeout=10) as http:
            assert http.get("/health").json() == {"status": "ok"}

        joined.wait_serving()
        assert (data / "serve.lock").read_text() == f"runner 'runner-one' (pid {first.popen.pid})"  # the duties stay

        first.kill()  # SIGKILL: the OS drops its locks with the process
        deadline = time.monotonic() + EXIT_S
        while "runner-two" not in (data / "serve.lock").read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (data / "serve.lock").read_text() == f"runner 'runner-two' (pid {joined.popen.pid})"
        again = Serve(tmp_path, data, TOKENS, "--runner-id", "runner-one")
        others.append(again)
        again.wait_serving()
        assert again.stop() == 0, again.stderr()
        assert joined.stop() == 0, joined.stderr()
    finally:
        for serve in (first, *others):
            serve.kill()
