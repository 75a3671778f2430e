"""`archetype serve` configuration mistakes, as a user makes them with the installed console script:
each is one line on stderr naming what to fix, exit code 2, and nothing created on disk."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from tests.support.serve import WAIT_S, running

pytestmark = pytest.mark.timeout(240)
ARCHETYPE = str(Path(sys.executable).parent / "archetype")  # the console script, not `python -m`
ROOT = Path(__file__).resolve().parents[2]


def serve(cwd: Path, *args: str, **env: str) -> AbstractContextManager[subprocess.Popen[str]]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ARCHETYPE_")}
    return running([ARCHETYPE, "serve", *args], {**environment, **env}, cwd=cwd)


def refused(cwd: Path, *args: str, **env: str) -> str:
    with serve(cwd, *args, **env) as process:
        out, err = process.communicate(timeout=WAIT_S)
    assert process.returncode == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert not (cwd / "data").exists(), "a refused serve created its catalog"
    return lines[0]


def tokens(tmp_path: Path, table: object) -> str:
    (tmp_path / "tokens.json").write_text(json.dumps(table))
    return str(tmp_path / "tokens.json")


@pytest.mark.parametrize(
    "table,says",
    [
        ({"t": {"roles": ["admin"]}}, "entry 1 principal: Field required"),
        ({"t": {"principal": "root", "roles": "admin"}}, "entry 1 roles: Input should be a valid list"),
        ({"t": {"principal": "root", "roles": ["root"]}}, "entry 1 roles[0]: Input should be 'viewer', 'player', 'analyst', 'operator'"),
        (["t"], "a JSON object"),
    ],
    ids=["no-principal", "roles-a-string", "unknown-role", "not-an-object"],
)
def test_a_bad_token_table(tmp_path, table, says):
    line = refused(tmp_path, "--data", "data", "--tokens", tokens(tmp_path, table))
    assert says in line and "tokens.json" in line


def test_a_missing_token_file(tmp_path):
    assert "No such file or directory" in refused(tmp_path, "--data", "data", "--tokens", "nope.json")


def test_a_module_that_does_not_import(tmp_path):
    line = refused(tmp_path, "--data", "data", "--module", "comps")
    assert line == ("error: --module comps: cannot import 'comps'; run from the directory that holds it, or add that "
                    "directory to PYTHONPATH")  # fmt: skip
    (tmp_path / "broken.py").write_text("raise RuntimeError('no calibration file')\n")
    assert refused(tmp_path, "--data", "data", "--module", "broken") == (
        "error: --module broken: importing it raised RuntimeError: no calibration file"
    )


def test_a_module_in_the_working_directory_imports(tmp_path):
    (tmp_path / "comps.py").write_text("from archetype.world import Component\n\nclass Hull(Component):\n    hp: int\n")
    with serve(tmp_path, "--data", "data", "--port", "0", "--module", "comps", ARCHETYPE_TOKENS='{"t": {"principal": "a"}}') as process:
        assert json.loads(process.stdout.readline())["serving"].startswith("http://127.0.0.1:")
        process.terminate()
        assert process.wait(WAIT_S) == 0


def test_a_busy_port_creates_nothing(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        line = refused(tmp_path, "--data", "data", "--port", str(port), ARCHETYPE_TOKENS="{}")
    assert line == f"error: cannot listen on 127.0.0.1:{port}: Address already in use; stop what uses it, or pick another --port"


def test_bad_settings_from_flags_the_environment_and_the_config_file(tmp_path):
    assert "setting 'tick_rate': Input should be greater than or equal to 0.1" in refused(tmp_path, "--tick-rate", "0")
    assert "fix --port, ARCHETYPE_PORT" in refused(tmp_path, ARCHETYPE_PORT="http")
    (tmp_path / "archetype.toml").write_text('[serve]\ndata = "data"\nsynchronous = "OFF"\n')
    assert "setting 'synchronous': Input should be 'FULL' or 'NORMAL'" in refused(tmp_path)
    (tmp_path / "archetype.toml").write_text("[serve\n")
    assert refused(tmp_path).startswith("error: config file archetype.toml: ")


def test_a_second_serve_with_the_same_runner_id_is_one_line(tmp_path):
    with serve(tmp_path, "--data", "data", "--port", "0", "--runner-id", "r1", ARCHETYPE_TOKENS="{}") as first:
        json.loads(first.stdout.readline())
        with serve(tmp_path, "--data", "data", "--port", "0", "--runner-id", "r1", ARCHETYPE_TOKENS="{}") as second:
            _, err = second.communicate(timeout=WAIT_S)
        assert second.returncode == 2
        assert err.strip().splitlines() == [
            f"error: data is already served by runner 'r1' (pid {first.pid}); give this one another --runner-id to "
            "join it as a cooperating runner, or another --data"
        ]
        first.terminate()
        assert first.wait(WAIT_S) == 0
