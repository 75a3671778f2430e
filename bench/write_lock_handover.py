"""The catalog's write lock between processes: how long a small writer waits for it while a busy
writer in another process commits back to back.

    .venv/bin/python bench/write_lock_handover.py [--seconds 4] [--hold-ms 3] [--every-ms 10] [--rounds 3]
                                                  [--burners 0,3] [--no-record]

Each round, for each way of waiting, a fresh catalog (`synchronous=FULL`) and a child process that
runs write transactions back to back (an insert, then `--hold-ms` of sleep inside the transaction,
as a group commit's work would be) for `--seconds`; meanwhile this process runs one-row write
transactions every `--every-ms` and times each from its start to its commit. The ways of waiting:

- `busy handler`: the port with no writer lock, as before: SQLite's busy handler polls (the baseline);
- `flock alone`: the kernel lock on `<catalog>-writer` only, without `-next` (the holder that comes
  back at once can take it again before the woken waiter runs);
- `writer lock`: the port as it is (`local_catalog.writer_lock`).

Both processes wait the same way. Each `--burners` entry is a run with that many processes spinning
on the CPU meanwhile (a loaded machine, where a woken waiter is not scheduled at once). Printed and
recorded in docs/performance.md under its own heading: the small writer's transactions, their p50,
p99 and worst time, and the busy writer's commits per second.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from perf_doc import replace_section  # noqa: E402

from local_catalog import SqliteSqlPort  # noqa: E402
from local_catalog.writer_lock import WriterLock  # noqa: E402

HEADING = "## Write-lock hand-over between processes (bench/write_lock_handover.py)"
MODES = ("busy handler", "flock alone", "writer lock")


class FlockAlone(WriterLock):
    """The writer lock without its line: a waiter blocks on `-writer` alone."""

    def _take_now(self) -> bool:
        try:
            fcntl.flock(self._writer, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self._held = True
        return True

    def _wait_in_line(self) -> None:
        taken = False
        try:
            fcntl.flock(self._writer, fcntl.LOCK_EX)
            taken = True
        finally:
            with self._state:
                self._waiting = False
                if taken and not self._wanted:
                    fcntl.flock(self._writer, fcntl.LOCK_UN)
                self._held = taken and self._wanted
                self._state.notify()


def open_port(path: Path, mode: str) -> SqliteSqlPort:
    port = SqliteSqlPort(path)
    assert port._writer_lock is not None
    if mode == "busy handler":
        port._writer_lock.close()
        port._writer_lock = None
    elif mode == "flock alone":
        port._writer_lock.close()
        port._writer_lock = FlockAlone(path, 30.0)
    return port


def busy_writer(path: Path, mode: str, seconds: float, hold_s: float) -> None:
    port = open_port(path, mode)
    commits = 0

    def write() -> None:
        port.execute("INSERT INTO t (who) VALUES ('busy')")
        time.sleep(hold_s)

    port.transaction(write)
    print("ready", flush=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        port.transaction(write)
        commits += 1
    print(commits / seconds, flush=True)


def measure(mode: str, seconds: float, hold_ms: float, every_s: float) -> tuple[list[float], float]:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "catalog.sqlite3"
        port = open_port(path, mode)
        port.execute("CREATE TABLE t (who TEXT)")
        child = subprocess.Popen([sys.executable, __file__, "--busy-writer", mode, str(path), str(seconds), str(hold_ms)],
                                 stdout=subprocess.PIPE, text=True)  # fmt: skip
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        waits = []
        end = time.monotonic() + seconds - 0.2  # none left when the busy writer stops
        while time.monotonic() < end:
            started = time.perf_counter()
            port.transaction(lambda: port.execute("INSERT INTO t (who) VALUES ('small')"))
            waits.append(time.perf_counter() - started)
            time.sleep(every_s)
        busy_rate = float(child.stdout.readline())
        child.wait()
        port.close()
    return waits, busy_rate


def run(args: argparse.Namespace, burners: int) -> dict[str, tuple[list[float], list[float]]]:
    results: dict[str, tuple[list[float], list[float]]] = {mode: ([], []) for mode in MODES}
    spinning = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(burners)]
    try:
        for _ in range(args.rounds):
            for mode in MODES:
                waits, rate = measure(mode, args.seconds, args.hold_ms, args.every_ms / 1000)
                results[mode][0].extend(waits)
                results[mode][1].append(rate)
    finally:
        for burner in spinning:
            burner.kill()
            burner.wait()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="the busy writer's run, per round and way")
    parser.add_argument("--hold-ms", type=float, default=3.0, help="the busy writer's sleep inside each transaction")
    parser.add_argument("--every-ms", type=float, default=10.0, help="the small writer's pause between transactions")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each running every way once")
    parser.add_argument("--burners", default="0,3", help="processes spinning on the CPU meanwhile, one run per entry")
    parser.add_argument("--no-record", action="store_true", help="print only; leave docs/performance.md alone")
    parser.add_argument("--busy-writer", nargs=4, metavar=("MODE", "PATH", "SECONDS", "HOLD_MS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.busy_writer:
        mode, path, seconds, hold_ms = args.busy_writer
        busy_writer(Path(path), mode, float(seconds), float(hold_ms) / 1000)
        return
    rows = []
    for burners in (int(n) for n in args.burners.split(",")):
        for mode, (waits, rates) in run(args, burners).items():
            q = statistics.quantiles(waits, n=100, method="inclusive") if len(waits) > 1 else waits * 99
            rows.append(f"| {burners} | {mode} | {len(waits)} | {statistics.median(waits) * 1000:.1f} | "
                        f"{q[98] * 1000:.1f} | {max(waits) * 1000:.1f} | {statistics.mean(rates):.0f} |")  # fmt: skip
    lines = [
        HEADING,
        "",
        f"`.venv/bin/python bench/write_lock_handover.py --seconds {args.seconds:g} --hold-ms {args.hold_ms:g} "
        f"--every-ms {args.every_ms:g} --rounds {args.rounds} --burners {args.burners}`; Python "
        f"{platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores "
        f"shared with other work (load average {os.getloadavg()[0]:.1f} at the end). A busy writer commits back to "
        f"back in a child process ({args.hold_ms:g} ms held per transaction, `synchronous=FULL`) while a small writer "
        f"in this one writes a row every {args.every_ms:g} ms; {args.rounds} x {args.seconds:g} s per way of waiting, "
        "the small writer's time per transaction (its wait for the lock and its commit).",
        "",
        "| CPU burners | waiting | small writes | p50 ms | p99 ms | worst ms | busy writer commits/s |",
        "|---|---|---|---|---|---|---|",
        *rows,
    ]
    print("\n".join(lines))
    if not args.no_record:
        replace_section(HEADING, lines)


if __name__ == "__main__":
    main()
