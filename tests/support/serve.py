"""`archetype serve` as a real process on loopback, for the tests that need one: started with the
suite's token table and game module, and always stopped, reaped and its pipes closed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from tests.api.conftest import TOKENS

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 60  # generous: a busy machine (load 4-8) starts and steps slowly
T = TypeVar("T")


@contextmanager
def running(command: list[str], env: dict[str, str], cwd: Path = ROOT) -> Iterator[subprocess.Popen[str]]:
    """`command` run in `cwd` with text pipes for stdout and stderr; on the way
    out, however the block ended, it is killed if it still runs and reaped, and its pipes are
    closed (left open, each leaked a file and a ResourceWarning into whichever test collected it)."""
    with subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        try:
            yield process
        finally:
            if process.poll() is None:
                process.kill()


@contextmanager
def serving(tmp_path: Path, *extra: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """(process, url) of `archetype serve` over `tmp_path/data` with the suite's tokens and game
    module, `running` until the block ends."""
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps(TOKENS))
    command = [sys.executable, "-m", "archetype.cli", "serve", "--data", str(tmp_path / "data"), "--port", "0",
               "--tokens", str(tokens), "--tick-rate", "20", "--module", "tests.server.game", *extra]  # fmt: skip
    with running(command, {**os.environ, "PYTHONPATH": str(ROOT)}) as process:
        assert process.stdout is not None and process.stderr is not None
        line = process.stdout.readline()
        assert line, f"serve printed nothing: {process.stderr.read() if process.poll() is not None else ''}"
        yield process, json.loads(line)["serving"]


def wait_for(predicate: Callable[[], T], what: str) -> T:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
