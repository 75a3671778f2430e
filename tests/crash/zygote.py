"""Starts the crash tests' processes (runner, feeder, destroyer) by fork from one interpreter that
imported them once, so that a restart costs a fork, not an interpreter's start-up and its imports
(pyiceberg's included: 1-4 s at a load of 4, most of a runner's start; tests/crash/test_sigkill.py
restarts its runner 30 times).

Each child is a process of its own as before: its own catalog connection and locks, opened after
the fork, its output in its log file, killed by SIGKILL from the test. It runs its module as
`python -m` would, with a fresh random seed, and dies with the zygote (PR_SET_PDEATHSIG), which
dies with the test process. The zygote reaps each child and writes its exit code (as
`subprocess` gives it: -9 for SIGKILL) to the file the request named.

Protocol, one JSON line each way: [module, args, log file, exit file, extra environment] in,
the child's pid out. It exits when its input closes.
Usage: python -m tests.crash.zygote
"""

from __future__ import annotations

import json
import os
import random
import runpy
import select
import signal
import sys
import traceback

# what every start would import again; Runtime.open_local's audit projection (pyiceberg) the longest
import archetype.audit.log  # noqa: F401
import tests.crash.destroyer
import tests.crash.feeder
import tests.crash.runner  # noqa: F401
from tests.crash.harness import dies_with_parent


def _child(module: str, args: list[str], log: str, env: dict[str, str]) -> None:
    code: object = 1
    try:
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        nothing = os.open(os.devnull, os.O_RDONLY)
        os.dup2(nothing, 0)
        os.close(nothing)
        dies_with_parent(signal.SIGKILL)()
        os.environ.update(env)
        random.seed()
        sys.argv = [module, *args]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        traceback.print_exc()
    finally:
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code or 0)


def _reap(exits: dict[int, str]) -> None:
    while exits:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        path = exits.pop(pid)
        with open(f"{path}.tmp", "w") as out:
            out.write(str(os.waitstatus_to_exitcode(status)))
        os.replace(f"{path}.tmp", path)  # whole or absent


def main() -> None:
    exits: dict[int, str] = {}
    pending = b""
    while True:
        readable, _, _ = select.select([0], [], [], 0.005)
        _reap(exits)
        if not readable:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            return
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            module, args, log, exit_path, env = json.loads(line)
            pid = os.fork()
            if pid == 0:
                _child(module, args, log, env)
            exits[pid] = exit_path
            os.write(1, f"{pid}\n".encode())


if __name__ == "__main__":
    main()
