"""`serve`'s hold on its data directory: the lock of its runner id (`hold_data_directory`), which
refuses a second live process of the id, and the lock of the singleton duties (the audit projector
and retention), which one runner of the directory holds at a time (`singleton_duties`). The locks
are the OS's (`hold_lock`): it drops them however a process dies."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import IO

from archetype.commands.ledger import RUNNER_ID_PATTERN
from archetype.runner_registry import RunnerBusyError
from archetype.settings import ConfigurationError

log = logging.getLogger("archetype.serve")

RUNNERS_DIR = "runners"  # <data>/runners/<runner id>.lock: held by the live process of that id
DUTIES_LOCK = "serve.lock"  # held by the one runner doing the singleton duties (audit projector, retention)


def hold_lock(path: Path) -> IO[str] | None:
    """`path` opened and exclusively flock'ed, or None when a live process holds it."""
    handle = open(path, "a+")  # stays open for as long as the lock is held
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def _holder(path: Path) -> str:
    with contextlib.suppress(OSError):
        return path.read_text().strip() or "another process"
    return "another process"


class Runners:
    """This `serve` process's hold on its data directory, beside its registration in the ledger's
    runner registry (`RunnerRegistry`, which says which runners are live).

    Each process holds `<data>/runners/<runner id>.lock` for its life (the OS drops it however the
    process dies). The registry cannot refuse a second `serve` of the same id on the same data
    directory (same host, same directory: the same instance, which is how a restarted runner gets
    its id back at once); the lock refuses it, at once and with one line. One of the processes,
    whoever holds `<data>/serve.lock`, does the singleton duties: the audit projector (one writer of
    the Iceberg table) and retention, which only a process beside the catalog file can do. When it
    dies another takes them on.
    """

    def __init__(self, data: Path, runner_id: str, handle: IO[str], pid: int | None = None) -> None:
        self.data, self.runner_id = data, runner_id
        self.pid = pid or os.getpid()  # the serve process's, which the operator signals
        self.handle = handle  # the runner id's lock, shared with the stepping process (archetype.stepper)
        self._duties: IO[str] | None = None

    def take_duties(self) -> bool:
        """Whether this runner does the singleton duties: it holds their lock, or takes it now."""
        if self._duties is None:
            self._duties = hold_lock(self.data / DUTIES_LOCK)
            if self._duties is not None:
                self._duties.truncate(0)
                self._duties.write(f"runner {self.runner_id!r} (pid {self.pid})")
                self._duties.flush()
        return self._duties is not None

    def close(self) -> None:
        for handle in (self._duties, self.handle):
            if handle is not None:
                handle.close()  # closing the descriptor drops its flock


@contextlib.contextmanager
def hold_data_directory(data: Path, runner_id: str | None) -> Iterator[Runners]:
    """Hold this runner's id on the data directory for the life of the process.

    Several runners share a data directory, each under its own stable id (a restarted runner takes
    back its own leases at once, and a crash is recognised as one); the same id twice is refused,
    with one line. Which worlds each steps is decided by the runner registry and world leases
    (docs/ledger.md).
    """
    runner_id = runner_id or f"serve@{socket.gethostname()}"
    if not RUNNER_ID_PATTERN.fullmatch(runner_id):
        raise ConfigurationError(f"--runner-id {runner_id!r} must match {RUNNER_ID_PATTERN.pattern}")
    (data / RUNNERS_DIR).mkdir(exist_ok=True)
    path = data / RUNNERS_DIR / f"{runner_id}.lock"
    handle = hold_lock(path)
    if handle is None:
        raise RunnerBusyError(
            f"{data} is already served by {_holder(path)}; give this one another --runner-id to join it as a "
            f"cooperating runner, or another --data"
        )
    handle.truncate(0)
    handle.write(f"runner {runner_id!r} (pid {os.getpid()})")
    handle.flush()
    runners = Runners(data, runner_id, handle)
    try:
        yield runners
    finally:
        runners.close()


def serve_instance(data: Path) -> str:
    """Where a `serve` runs, as the runner registry tells a restart from another process: the same
    host and data directory are the same runner restarted (its own lock file refuses a second live one)."""
    return f"serve@{socket.gethostname()}:{data.resolve()}"


async def singleton_duties(runners: Runners, stop: asyncio.Event, every_s: float, *duties: Callable[[], Awaitable[None]]) -> None:
    """Run the duties only one runner of a data directory may run, once this runner holds their
    lock: at once if no other live runner does, else when that one dies."""
    while not stop.is_set():
        if runners.take_duties():
            log.info("runner %s runs the audit projector and retention for %s", runners.runner_id, runners.data)
            await asyncio.gather(*(duty() for duty in duties))
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=every_s)
