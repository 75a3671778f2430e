"""The catalog's write lock handed from one of our writers to the next by the kernel.

Every writer of a catalog (a serve's HTTP process, its stepping process, the runner registry's
connection, the other runners' ones) takes SQLite's write lock with `BEGIN IMMEDIATE`, and one
that finds it taken waits in SQLite's busy handler, which polls: it sleeps 1, 2, 5, 10, ... up to
100 ms between tries and keeps no queue. A writer that has just committed and begins its next
transaction at once (the writer thread's next group) finds the lock free long before a sleeping
waiter looks again, so it wins again and again: most likely why a runner's registration went 10 s
without a renewal that committed, and expired (docs/performance.md, "Cooperating runners").

So our writers take an OS lock first, `<catalog>-writer`, and only then `BEGIN IMMEDIATE`; they
release it after COMMIT or ROLLBACK. A waiter sleeps in the kernel and is woken when the holder
releases. Being woken is not being first, though: the holder, on its way to its next transaction,
is already running and takes the lock again if the waiter is not scheduled first (on a loaded
machine it often is not: docs/performance.md, "Write-lock hand-over"). So a waiter
first takes `<catalog>-next` and holds it while it waits for `-writer`: a holder that comes back
queues for `-next` behind it, and the lock passes to the waiter. Among several waiters the kernel
picks the next one (no arrival order, but nobody polls and a waiter in line is never overtaken).

`flock` rather than POSIX record locks (`lockf`): a flock belongs to the open file, so two ports
of one process (the stepping process's and its registry's) exclude each other, where record locks
belong to the process and would not; OFD record locks would, with one file, but only on Linux and
with a `struct flock` packed by hand. The kernel drops a flock when its process dies, and
`fcntl.flock` releases the GIL while it blocks.

A blocking flock cannot time out, so a contended wait runs in a thread of its own, which the caller
waits for at most the busy timeout; a caller that gives up fails as SQLite would have (`database is
locked`), and the thread lets the lock go when it gets it, unless the port asks again meanwhile.

SQLite's own locks stay the truth: this only orders the writers that take it. Any other writer (the
sqlite3 shell, an archetype from before) still meets ours in the busy handler.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
import weakref
from pathlib import Path


class WriterLock:
    def __init__(self, catalog: Path, timeout_s: float) -> None:
        self._timeout_s = timeout_s
        self._writer = os.open(f"{catalog}-writer", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self._next = os.open(f"{catalog}-next", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        # Taken as `with self._mutex` everywhere (`_state` only waits and notifies on it): Condition's
        # __enter__ and __exit__ are Python calls, and a transaction takes the lock twice
        self._mutex = threading.Lock()
        self._state = threading.Condition(self._mutex)
        self._held = False  # by this port
        self._waiting = False  # a thread of this port is blocked in the kernel for it
        self._wanted = False  # and its caller still waits for that thread
        self._closed = False
        # a port dropped unclosed (tests open many) gives its descriptors back with it
        self._close_files = weakref.finalize(self, _close_all, self._writer, self._next)

    def release(self) -> None:
        with self._mutex:
            fcntl.flock(self._writer, fcntl.LOCK_UN)
            self._held = False

    def acquire(self) -> None:
        with self._mutex:
            if self._closed:
                raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
            if not self._waiting:  # else a wait given up on is still in the kernel: wait for it again
                if self._take_now():
                    return
                self._waiting = True
                threading.Thread(target=self._wait_in_line, name="catalog-writer-lock", daemon=True).start()
            self._wanted = True
            try:
                self._state.wait_for(lambda: not self._waiting, self._timeout_s)
            finally:
                self._wanted = False
            if not self._held:
                raise sqlite3.OperationalError("database is locked")

    def _take_now(self) -> bool:
        try:
            fcntl.flock(self._next, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # a waiter is in line
            return False
        try:
            fcntl.flock(self._writer, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self._held = True
        except BlockingIOError:
            pass
        finally:
            fcntl.flock(self._next, fcntl.LOCK_UN)
        return self._held

    def _wait_in_line(self) -> None:
        taken = False
        try:
            fcntl.flock(self._next, fcntl.LOCK_EX)
            try:
                fcntl.flock(self._writer, fcntl.LOCK_EX)
                taken = True
            finally:
                fcntl.flock(self._next, fcntl.LOCK_UN)
        finally:
            with self._mutex:
                self._waiting = False
                if taken and not self._wanted:  # its caller gave up: the lock goes to the next in line
                    fcntl.flock(self._writer, fcntl.LOCK_UN)
                self._held = taken and self._wanted
                if self._closed:
                    self._close_files()
                self._state.notify()

    def close(self) -> None:
        with self._mutex:
            self._closed = True
            if not self._waiting:  # else the waiting thread closes them: their numbers are its
                self._close_files()


def _close_all(*descriptors: int) -> None:
    for descriptor in descriptors:
        os.close(descriptor)
