"""One data directory, one live `archetype serve`: a second one is refused with one line, exit 2.

Two serves on one catalog would fight over every world (each load fences the other's writer), so
the data directory is held by an OS lock on `<data>/serve.lock` for the life of the process. The
refusal needs no cooperation from the first process (whatever runner id either gives), and the
lock goes when the process dies, however it dies (SIGKILL included): a restart then starts at once.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.api.conftest import TOKENS
from tests.crash.harness import Serve

pytestmark = [pytest.mark.crash, pytest.mark.timeout(240)]

EXIT_S = 60


@pytest.mark.parametrize("second_id", ["runner-one", "runner-two"])
def test_a_second_serve_on_the_same_data_directory_is_refused(tmp_path: Path, second_id: str) -> None:
    data = tmp_path / "data"
    first = Serve(tmp_path, data, TOKENS, "--runner-id", "runner-one")
    others: list[Serve] = []
    try:
        url = first.wait_serving()
        second = Serve(tmp_path, data, TOKENS, "--runner-id", second_id)
        others.append(second)
        line = second.next_line(EXIT_S)  # None: its stdout closed without a line, it never served
        assert line is None, f"a second serve on the same data directory started: {line}"
        assert second.popen.wait(EXIT_S) == 2, second.stderr()
        lines = second.stderr().strip().splitlines()
        assert len(lines) == 1 and "already served by runner 'runner-one'" in lines[0], second.stderr()
        print(f"refusal: {lines[0]}")
        assert first.alive()
        with httpx.Client(base_url=url, timeout=10) as http:
            assert http.get("/health").json() == {"status": "ok"}

        first.kill()  # SIGKILL: the OS drops the lock with the process
        again = Serve(tmp_path, data, TOKENS, "--runner-id", second_id)
        others.append(again)
        again.wait_serving()
        assert again.stop() == 0, again.stderr()
    finally:
        for serve in (first, *others):
            serve.kill()
