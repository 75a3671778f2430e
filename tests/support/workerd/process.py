"""One `workerd serve` child process of the test session: started with a control fd, so the port
its socket listens on is read from workerd itself (a config may say port 0), logging to a file,
stopped by its PID, and sent SIGTERM by the kernel should pytest die without its teardown."""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


class WorkerdError(RuntimeError):
    """A workerd fixture could not do its job (workerd missing, not starting, answering an HTTP error)."""


def _die_with_parent() -> None:
    # Runs in the child before exec: workerd gets SIGTERM if pytest dies without its teardown.
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class WorkerdProcess:
    """`argv` (a workerd command line, given `--control-fd` here) running until `stop()`; `port` is
    where its socket named `socket` listens, once workerd said so within `ready_timeout_s`."""

    def __init__(self, argv: Sequence[str], log_path: Path, *, socket: str = "http",
                 ready_timeout_s: float = 20.0) -> None:  # fmt: skip
        if threading.current_thread() is not threading.main_thread():
            raise WorkerdError("start workerd from the main thread (its parent-death signal follows the forking thread)")
        self.log_path = log_path
        self._log = log_path.open("ab")
        read_fd, write_fd = os.pipe()
        try:
            try:
                self.process = subprocess.Popen(
                    [argv[0], *argv[1:2], f"--control-fd={write_fd}", *argv[2:]],
                    pass_fds=(write_fd,), stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                    preexec_fn=_die_with_parent,
                )  # fmt: skip
            finally:
                os.close(write_fd)  # workerd holds its end; EOF on ours means it exited
            self.port = self._await_port(read_fd, socket, ready_timeout_s)
        except BaseException:
            self.stop()
            raise
        finally:
            os.close(read_fd)

    @property
    def pid(self) -> int:
        return self.process.pid

    def _await_port(self, control_fd: int, socket: str, timeout_s: float) -> int:
        """workerd writes one JSON line per socket on its control fd once it listens."""
        deadline = time.monotonic() + timeout_s
        buffered = b""
        while time.monotonic() < deadline:
            readable, _, _ = select.select([control_fd], [], [], deadline - time.monotonic())
            if not readable:
                break
            chunk = os.read(control_fd, 4096)
            if not chunk:
                raise WorkerdError(f"workerd exited ({self.process.wait()}) before listening: {self.log()}")
            buffered += chunk
            *lines, buffered = buffered.split(b"\n")
            for line in lines:
                event = json.loads(line)
                if event.get("event") == "listen" and event.get("socket") == socket:
                    return int(event["port"])
        raise WorkerdError(f"workerd did not listen within {timeout_s} s: {self.log()}")

    def log(self, limit: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-limit:]

    def stop(self) -> None:
        """SIGTERM by PID, SIGKILL if it has not exited within 10 s."""
        process = getattr(self, "process", None)
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._log.close()
