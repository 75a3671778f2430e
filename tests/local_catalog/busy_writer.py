"""A writer of a catalog in a process of its own, for tests/local_catalog/test_writer_lock.py.

    python -m tests.local_catalog.busy_writer CATALOG busy SECONDS   write transactions back to back
    python -m tests.local_catalog.busy_writer CATALOG hold           one transaction held until killed

Each transaction inserts a row into `t` and sleeps 2 ms before its commit (`synchronous=FULL`), as
a group commit's work would; "ready" is printed once the first committed, "holding" from inside
the held one.
"""

from __future__ import annotations

import sys
import time

from local_catalog import SqliteSqlPort


def main(path: str, mode: str, seconds: str = "0") -> None:
    port = SqliteSqlPort(path)

    def write() -> None:
        port.execute("INSERT INTO t (who) VALUES ('busy')")
        time.sleep(0.002)

    if mode == "hold":
        port.transaction(lambda: (print("holding", flush=True), time.sleep(60)))
        return
    port.transaction(write)
    print("ready", flush=True)
    end = time.monotonic() + float(seconds)
    while time.monotonic() < end:
        port.transaction(write)


if __name__ == "__main__":
    main(*sys.argv[1:])
