"""One runner id, one live process: a second `archetype serve` with the same --runner-id is refused.

The id is held by an OS lock on `<data>/runners/<id>.lock` for the life of the process, so the
refusal needs no cooperation from the first process, and the lock goes when the process dies,
however it dies (SIGKILL included): a restart with the same id then starts at once. With
different ids both serve (they may contend for worlds: not asserted here).
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.api.conftest import TOKENS
from tests.crash.harness import Serve

pytestmark = [pytest.mark.crash, pytest.mark.timeout(240)]

EXIT_S = 60


def test_a_second_serve_with_the_same_runner_id_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = Serve(tmp_path, data, TOKENS, "--runner-id", "runner-one")
    others: list[Serve] = []
    try:
        url = first.wait_serving()
        second = Serve(tmp_path, data, TOKENS, "--runner-id", "runner-one")
        others.append(second)
        line = second.next_line(EXIT_S)  # None: its stdout closed without a line, it never served
        assert line is None, f"a second serve with the same runner id started: {line}"
        assert second.popen.wait(EXIT_S) == 2, second.stderr()
        naming = [line for line in second.stderr().splitlines() if "runner-one" in line]
        assert len(naming) == 1 and "already running" in naming[0], second.stderr()
        print(f"refusal: {naming[0]}")
        assert first.alive()
        with httpx.Client(base_url=url, timeout=10) as http:
            assert http.get("/health").json() == {"status": "ok"}

        third = Serve(tmp_path, data, TOKENS, "--runner-id", "runner-two")
        others.append(third)
        third.wait_serving()
        assert first.alive() and third.alive()
        assert third.stop() == 0, third.stderr()

        first.kill()  # SIGKILL: the OS drops the lock with the process
        again = Serve(tmp_path, data, TOKENS, "--runner-id", "runner-one")
        others.append(again)
        again.wait_serving()
        assert again.stop() == 0, again.stderr()
    finally:
        for serve in (first, *others):
            serve.kill()
