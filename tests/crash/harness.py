"""What the crash tests share: their processes, a read-only view of the catalog, `archetype serve`.

Every process a test starts stops by itself: the test's `finally` stops it, and should the test
process die first, the kernel signals its children (PR_SET_PDEATHSIG: SIGKILL for the crash
processes' zygote, which forks them and takes them with it, SIGTERM for serve); the crash runner
also exits when its parent is gone or after --max-seconds. Every wait has a deadline, and everything listens on loopback only.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import json
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from archetype.commands import ledger_sql as q
from local_catalog import CATALOG_FILE

ROOT = Path(__file__).resolve().parents[2]
PR_SET_PDEATHSIG = 1
READY_S = 60  # a process start under load: interpreter, imports, opening the catalog
READY = object()  # stands for the process's ready-file path in its arguments
T = TypeVar("T")


def dies_with_parent(sig: signal.Signals) -> Callable[[], None]:
    """A preexec_fn: the child gets `sig` when the test process dies, however it dies (Linux)."""

    def arrange() -> None:
        if sys.platform.startswith("linux"):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig))

    return arrange


def wait_for(predicate: Callable[[], T], what: str, timeout: float, *, every: float = 0.005,
             alive: Callable[[], None] | None = None) -> T:  # fmt: skip
    """Poll `predicate` until it answers something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if alive is not None:
            alive()
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(every)


class _Zygote:
    """The test process's one tests/crash/zygote.py, started at the first Proc (see there why)."""

    _popen: subprocess.Popen[bytes] | None = None

    @classmethod
    def start(cls, module: str, args: list[str], log: Path, exit_file: Path, env: dict[str, str]) -> int:
        if cls._popen is None or cls._popen.poll() is not None:
            cls._popen = subprocess.Popen([sys.executable, "-m", "tests.crash.zygote"], cwd=ROOT, stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, preexec_fn=dies_with_parent(signal.SIGKILL))  # fmt: skip
            atexit.register(cls._stop, cls._popen)
        assert cls._popen.stdin is not None and cls._popen.stdout is not None
        cls._popen.stdin.write(json.dumps([module, args, str(log), str(exit_file), env]).encode() + b"\n")
        cls._popen.stdin.flush()
        line = cls._popen.stdout.readline()
        assert line, f"the crash tests' zygote exited with {cls._popen.wait(10)}"
        return int(line)

    @staticmethod
    def _stop(popen: subprocess.Popen[bytes]) -> None:
        """Its input closed, it exits, and its children with it."""
        for pipe in (popen.stdin, popen.stdout):
            if pipe is not None:
                pipe.close()
        popen.wait(10)


class Proc:
    """One run of a crash-test process, its output kept in a log file for failure reports; forked
    by the zygote, so not this process's child: its exit code comes from the zygote's exit file."""

    def __init__(self, tmp: Path, module: str, *args: object, env: dict[str, str] | None = None) -> None:
        self.name = f"{module}-{time.monotonic_ns()}"
        self.log = tmp / f"{self.name}.log"
        self.ready = tmp / f"{self.name}.ready"
        self._exit_file = tmp / f"{self.name}.exit"
        self.returncode: int | None = None
        argv = [str(self.ready) if a is READY else str(a) for a in args]
        self.started = time.monotonic()
        self.pid = _Zygote.start(f"tests.crash.{module}", argv, self.log, self._exit_file, env or {})
        self._pidfd = os.pidfd_open(self.pid)  # signals reach this process, never a later one with its pid

    def poll(self) -> int | None:
        if self.returncode is None and self._exit_file.exists():
            self.returncode = int(self._exit_file.read_text())
            os.close(self._pidfd)
        return self.returncode

    def alive(self) -> bool:
        return self.poll() is None

    def kill(self) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):  # exited meanwhile
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
        self.wait(10)

    def wait(self, timeout: float) -> int:
        """Its exit code, once the zygote reaped it; TimeoutError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while (code := self.poll()) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} still runs after {timeout}s")
            time.sleep(0.005)
        return code

    def wait_ready(self) -> None:
        wait_for(self.ready.exists, f"{self.name} to start", READY_S, every=0.01, alive=self.expect_alive)

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def expect_alive(self) -> None:
        assert self.alive(), f"{self.name} exited by itself with {self.returncode}:\n{self.output()}"

    def wait_exit(self, timeout: float) -> int:
        try:
            return self.wait(timeout)
        except TimeoutError:
            self.kill()
            raise AssertionError(f"{self.name} did not finish within {timeout}s:\n{self.output()}") from None

    def expect_clean_exit(self, timeout: float) -> None:
        code = self.wait_exit(timeout)
        assert code == 0, f"{self.name} failed with {code}:\n{self.output()}"


class CatalogView:
    """Read-only SQL on the catalog, for watching runners from outside without taking its write
    lock (the ledger's own reads are BEGIN IMMEDIATE transactions). WAL readers never block the
    writer, and each query sees one committed state."""

    def __init__(self, data: Path) -> None:
        self._conn = sqlite3.connect(f"file:{data / CATALOG_FILE}?mode=ro", uri=True, isolation_level=None)

    def close(self) -> None:
        self._conn.close()

    def _rows(self, sql: str, *params: object) -> list[tuple]:
        return self._conn.execute(sql, params).fetchall()

    # A command's status and lease as the ledger answers them: a lease is an entry of the world row's
    # lease map (docs/storage.md, "Rows per command"), read with the ledger's own SQL fragments.
    _NOW = f"WITH {q.HELD_CTE.format(world='?1')} SELECT {{}} FROM {q.COMMANDS_NOW_JOIN} WHERE c.world_id = ?1"

    def statuses(self, world_id: str) -> Counter[str]:
        sql = self._NOW.format(f"{q.COMMAND_STATUS_EXPR}, count(*)") + " GROUP BY 1"
        return Counter(dict(self._rows(sql, world_id)))

    def leased_by(self, world_id: str) -> dict[str, int]:
        """LEASED commands per lease session."""
        sql = (
            self._NOW.format(f"{q.LEASE_SESSION_EXPR}, count(*)") + f" AND {q.LEASE_ENTRY_EXPR} IS NOT NULL GROUP BY 1"
        )
        return dict(self._rows(sql, world_id))

    def world(self, world_id: str) -> dict[str, Any]:
        cursor = self._conn.execute("SELECT * FROM worlds WHERE world_id = ?", (world_id,))
        names = [d[0] for d in cursor.description]
        row = cursor.fetchone()
        return dict(zip(names, row, strict=True)) if row else {}

    def guard(self, world_id: str) -> tuple[int, str] | None:
        world = self.world(world_id)
        return None if world.get("guard_session") is None else (world["guard_sequence"], world["guard_session"])

    def lease_expiry_ms(self, world_id: str, session: str) -> int | None:
        sql = self._NOW.format(f"min(json_extract({q.LEASE_ENTRY_EXPR}, '$[2]'))") + f" AND {q.LEASE_SESSION_EXPR} = ?2"
        return self._rows(sql, world_id, session)[0][0]

    def command(self, world_id: str, sequence: int | None = None, *, command_id: str | None = None) -> dict[str, Any]:
        """One command, by sequence or by command id (in the trusted callers' scope)."""
        if command_id is None:
            cursor = self._conn.execute(q.GET_COMMAND_BY_SEQUENCE, (world_id, sequence))
        else:
            cursor = self._conn.execute(q.GET_COMMAND, (world_id, "", command_id))
        names = [name.strip() for name in q.COMMAND_COLUMNS.split(",")]
        return dict(zip(names, cursor.fetchone(), strict=True))


class Cli:
    """A real `archetype` CLI process, its stdout lines read as they come, its stderr in a file."""

    def __init__(self, tmp: Path, kind: str, *argv: str) -> None:
        self.name = f"{kind}-{time.monotonic_ns()}"
        self.stderr_path = tmp / f"{self.name}.stderr"
        with self.stderr_path.open("wb") as stderr:
            self.popen = subprocess.Popen([sys.executable, "-m", "archetype.cli", *argv], cwd=ROOT,
                                          env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                                          stderr=stderr, text=True, preexec_fn=dies_with_parent(signal.SIGTERM))  # fmt: skip
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read_stdout, daemon=True).start()

    def _read_stdout(self) -> None:
        with self.popen.stdout:  # type: ignore[union-attr]
            for line in self.popen.stdout:  # type: ignore[union-attr]
                self.lines.put(line)
        self.lines.put(None)

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def next_line(self, timeout: float) -> str | None:
        """The next line the process prints on stdout (None at end of output); fails after `timeout`."""
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"{self.name} printed nothing within {timeout}s; stderr:\n{self.stderr()[-4000:]}"
            ) from None

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, then the exit code (and the final {"stopped": true} line checked by callers)."""
        self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"{self.name} did not stop within {timeout}s of SIGTERM:\n{self.stderr()[-4000:]}"
            ) from None

    def kill(self) -> None:
        if self.alive():
            self.popen.kill()
            self.popen.wait(timeout=10)


class Serve(Cli):
    """`archetype serve` (the real CLI) on 127.0.0.1, any free port (or `port`), with a tokens file."""

    def __init__(self, tmp: Path, data: Path, tokens: dict[str, Any], *extra: str, port: int = 0) -> None:
        tokens_file = tmp / "tokens.json"
        tokens_file.write_text(json.dumps(tokens))
        super().__init__(tmp, "serve", "serve", "--data", str(data), "--host", "127.0.0.1", "--port", str(port),
                         "--tokens", str(tokens_file), "--tick-rate", "20", *extra)  # fmt: skip
        self.url: str | None = None

    def wait_serving(self, timeout: float = READY_S) -> str:
        line = self.next_line(timeout)
        assert line, f"{self.name} exited with {self.popen.wait(10)} before serving:\n{self.stderr()[-4000:]}"
        self.url = json.loads(line)["serving"]
        assert self.url.startswith("http://127.0.0.1:"), self.url
        return self.url


class RemoteRunner(Cli):
    """`archetype runner` (the real CLI) stepping its share of a server's worlds over HTTP."""

    def __init__(self, tmp: Path, url: str, token: str, *extra: str) -> None:
        token_file = tmp / f"token-{time.monotonic_ns()}"
        token_file.write_text(token)
        super().__init__(
            tmp, "runner", "runner", "--url", url, "--token-file", str(token_file), "--tick-rate", "20", *extra
        )

    def wait_running(self, timeout: float = READY_S) -> dict[str, Any]:
        line = self.next_line(timeout)
        assert line, f"{self.name} exited with {self.popen.wait(10)} before running:\n{self.stderr()[-4000:]}"
        return json.loads(line)


class LedgerDump:
    """Everything the ledger holds about one world, read after every process is gone."""

    PAGE = 1_000

    def __init__(self, data: Path, world_id: str) -> None:
        from local_catalog import open_local_authority

        authority = open_local_authority(data)
        ledger = authority.ledger
        try:
            self.world = ledger.world_info(world_id)
            self.commands = self._pages(
                lambda after: ledger.history(world_id, after_sequence=after, limit=self.PAGE), "sequence", 0
            )
            self.events = self._pages(lambda after: ledger.read_outbox(world_id, after, self.PAGE), "event_seq", 0)
            self.manifests = self._pages(lambda after: ledger.manifests(world_id, after, self.PAGE), "tick", -1)
            self.entities: dict[int, dict[str, Any]] = {}
            after = 0
            while page := ledger.load_state(world_id, after_entity_id=after)["entities"]:
                for entity in page:
                    self.entities[entity["entity_id"]] = {
                        v["name"]: v["data"] for v in json.loads(entity["components"])
                    }
                after = page[-1]["entity_id"]
        finally:
            asyncio.run(authority.close())
        self.by_id = {row["command_id"]: row for row in self.commands}
        assert len(self.by_id) == len(self.commands), "command ids are unique within the trusted scope"

    @staticmethod
    def _pages(read: Callable[[Any], list[dict[str, Any]]], key: str, start: Any) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        while page := read(start):
            rows.extend(page)
            start = page[-1][key]
        return rows

    def statuses(self) -> Counter[str]:
        return Counter(row["status"] for row in self.commands)

    def event_types(self, events: list[dict[str, Any]] | None = None) -> dict[str, list[str]]:
        """Per command id, its event types in event order."""
        per_command: dict[str, list[str]] = {}
        for event in self.events if events is None else events:
            per_command.setdefault(event["command_id"], []).append(event["event_type"])
        return per_command

    def applied_in(self) -> Counter[str]:
        """How many published manifests applied each command."""
        return Counter(s["command_id"] for m in self.manifests for s in m["settlements"] if s["outcome"] == "applied")
