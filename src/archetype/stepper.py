"""`archetype serve`'s stepping process, and the HTTP process's side of it (CPython only): the
process, its channel and its entry point (`main`); what it runs is archetype.stepping.

`serve` answers HTTP in one OS process and steps worlds in another, so that neither waits for the
other's CPU (the GIL serialises threads: a thread would not do). The stepping process is this
serve's runner: it steps the worlds with work (`WorldRunner`), holds their world leases under the
serve's runner id, learns of new commands from the catalog (`pending_worlds`, each pass), and runs
the singleton duties (the audit projector and retention) when this serve has them. The HTTP
process keeps no world in memory (`EdgeWorlds`); the two share the SQLite catalog.

One channel joins them, a socket pair: the stepping process writes `ready` once it has opened the
catalog, then a line every second, its metrics (the HTTP process relays them at `/metrics`) or a
`beat`, from a thread of its own (`Reporter`), so that only a hung process falls silent: silence
longer than `--hang-timeout` makes the HTTP process kill it and start another. It reads nothing,
and end-of-file means the HTTP process is gone (SIGKILL included), so it stops by itself and never
steps on as an orphan. It registers in the ledger's runner registry under the runner id
(archetype.runner_registry.RunnerRegistry: what the other runners split the worlds by), and inherits the
runner id's lock (`<data>/runners/<id>.lock`), so a second serve of the id is refused until both
processes are gone.

The HTTP process restarts a stepping process that died or hung (a restart resumes the runner id's
leases at once); one that dies before it is ready `STARTS` times in a row makes `serve` stop with one line
and exit 3 (`StepperFailedError`); one refused (its runner id is live in the runner registry under
another instance) makes it stop at once with the refusal's line and exit 2, as any setting serve refuses.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import queue
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import IO

from archetype.commands.port import StorageFault
from archetype.metrics import Metrics, configure_logging
from archetype.settings import ConfigurationError, ServeSettings

log = logging.getLogger("archetype.serve")

STARTS = 3  # deaths in a row before ready, after which serve gives up rather than restart forever
RESTART_DELAY_S = 0.5  # between a death and the next start: a crash loop stays cheap
METRICS_EVERY_S = 1.0  # and the heartbeat: serve takes silence longer than --hang-timeout for a hang
POLL_S = 0.05  # how soon the reporter thread sends what the loop queued (`ready`)
READY = b"ready\n"
STORAGE = b"storage "  # then one line: the JSON of its catalog's StorageFault, or null once a write succeeded
REFUSED = b"refused "  # then one line: why the stepping process may not run (its runner id is live elsewhere)


class StepperFailedError(Exception):
    """`serve`'s stepping process died before it was ready `STARTS` times in a row; serve stopped."""


def _exit_status(code: int) -> str:
    return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"


class Stepper:
    """The HTTP process's handle on its stepping process: starts it, restarts it when it dies,
    stops it, and keeps its last metrics."""

    def __init__(self, config: ServeSettings, lock: IO[str]) -> None:
        self.config, self.lock = config, lock
        self.metrics = b""  # its last exposition of Metrics.STEPPER_SERIES
        self.storage_fault: StorageFault | None = None  # why its catalog's writes fail, as it last said
        self.pid: int | None = None
        self.ready = False  # a stepping process has been ready once
        self._ready = False  # the current one is
        self.refusal: str | None = None  # why the current one refused to run: final, not a crash
        self._heard = 0.0  # loop time of the current one's last line: its heartbeat (Reporter)

    def latest_metrics(self) -> bytes:
        return self.metrics

    async def run(self, stop: asyncio.Event) -> None:
        """Keep a stepping process running until `stop` is set, then stop it (it finishes its
        tick and gives its leases back). Raises StepperFailedError, having set `stop`, when one
        will not start."""
        failed = 0
        while not stop.is_set():
            code, hung = await self._run_once(stop)
            if code is None:
                return
            if self.refusal is not None:  # a restart would be refused the same way
                stop.set()
                raise ConfigurationError(self.refusal)
            failed = 0 if self._ready else failed + 1
            if failed >= STARTS:
                stop.set()
                raise StepperFailedError(
                    f"the stepping process exited ({_exit_status(code)}) before it was ready, {failed} times in a row; "
                    f"serve stopped (the lines above say why)"
                )
            if not hung:  # a hang had its own line
                log.error("the stepping process (pid %s) exited (%s); starting another", self.pid, _exit_status(code))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=RESTART_DELAY_S)

    async def _run_once(self, stop: asyncio.Event) -> tuple[int | None, bool]:
        """Run one stepping process: its exit code when it died (None when `stop` stopped it), and
        whether it hung (silent `hang_timeout` seconds: killed with SIGKILL, then a death like any)."""
        ours, theirs = socket.socketpair()
        self._ready, self.refusal, self.storage_fault = False, None, None
        try:
            fds = (theirs.fileno(), self.lock.fileno())
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-c", "from archetype.stepper import main; main()", *map(str, fds),
                self.config.model_dump_json(), pass_fds=fds, stdin=asyncio.subprocess.DEVNULL,
                stdout=sys.stderr.fileno(),  # its prints must not mix into serve's JSON lines on stdout
                start_new_session=True,  # a terminal's ^C reaches serve, which stops it in order
            )  # fmt: skip
        finally:
            theirs.close()
        self.pid = process.pid
        self._heard = asyncio.get_running_loop().time()
        reader, writer = await asyncio.open_connection(sock=ours, limit=64 * 1024 * 1024)
        listening = asyncio.create_task(self._listen(reader))
        exited = asyncio.create_task(process.wait())
        stopping = asyncio.create_task(stop.wait())
        silent = asyncio.create_task(self._silence())
        try:
            await asyncio.wait((exited, stopping, silent), return_when=asyncio.FIRST_COMPLETED)
            if not exited.done() and stopping.done():
                process.terminate()  # it finishes its tick, gives its leases back, and beats meanwhile
                await asyncio.wait((exited, silent), return_when=asyncio.FIRST_COMPLETED)
            hung = silent.done() and not exited.done()
            if hung:
                log.error("the stepping process (pid %s) sent nothing for %.1f s: hung; killed it (SIGKILL)%s", self.pid,
                          self.config.hang_timeout, "" if stop.is_set() else ", starting another")  # fmt: skip
                process.kill()
            code = await exited
            if stop.is_set():
                return None, hung
            with contextlib.suppress(TimeoutError):  # what it wrote before it exited: a refusal, say
                await asyncio.wait_for(listening, timeout=1)
            return code, hung
        finally:
            for task in (stopping, listening, silent):
                task.cancel()
            writer.close()

    async def _silence(self) -> None:
        """Return once the current stepping process has sent nothing for `hang_timeout` seconds."""
        loop = asyncio.get_running_loop()
        while (quiet := loop.time() - self._heard) < self.config.hang_timeout:
            await asyncio.sleep(self.config.hang_timeout - quiet)

    async def _listen(self, reader: asyncio.StreamReader) -> None:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):  # it died mid-frame: its exit says why
            while line := await reader.readline():
                self._heard = loop.time()  # any line: a metrics frame, a beat
                if line == READY:
                    self.ready = self._ready = True
                elif line.startswith(REFUSED):
                    self.refusal = line[len(REFUSED) :].decode().strip()
                elif line.startswith(STORAGE):
                    fault = json.loads(line[len(STORAGE) :])
                    self.storage_fault = None if fault is None else StorageFault(**fault)
                elif line.startswith(b"metrics "):
                    self.metrics = await reader.readexactly(int(line.split()[1]))


class Reporter:
    """The stepping process's side of the channel, in a thread of its own: it writes `ready`, then
    every `METRICS_EVERY_S` the metrics the event loop last exposed, or `beat` when the loop exposed
    none since (it is busy). Its silence is what serve takes for a hang, so it must not come from
    the loop: a processor may hold the loop for a long tick, and that is no hang. The thread runs on
    whatever the loop does; it stops only with the process: SIGSTOP, a deadlock, a C call that never
    gives the GIL back. A loop held longer than `hang_timeout_s` is logged here, once, not killed
    (docs/cli.md, *serve's two processes*). It reads only end-of-file: the HTTP process is gone."""

    def __init__(self, channel: socket.socket, hang_timeout_s: float) -> None:
        self.channel, self.hang_timeout_s = channel, hang_timeout_s
        self._frames: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()  # the loop's, sent in order
        self._exposition: bytes | None = None  # the loop's latest, not sent yet
        self._exposed_at = time.monotonic()  # when the loop last exposed: how long it has been held
        self._held_since: float | None = None
        self._stop: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None
        self._gone = False
        self._thread = threading.Thread(target=self._run, name="stepper-reporter", daemon=True)
        self._thread.start()

    def send(self, frame: bytes) -> None:
        self._frames.put(frame)

    def close(self) -> None:
        """Send what is queued, then end the thread."""
        self._frames.put(None)
        self._thread.join(timeout=5)

    async def expose(self, metrics: Metrics, stop: asyncio.Event, storage_fault: Callable[[], StorageFault | None]) -> None:
        """The loop's side: `ready`, then the metrics every second, and the catalog's `storage_fault`
        when it changed, until `stop`; sets `stop` when the HTTP process is gone (the thread saw
        end-of-file)."""
        self._stop = asyncio.get_running_loop(), stop
        if self._gone:
            stop.set()
        self.send(READY)
        said: StorageFault | None = None
        while not stop.is_set():
            if (fault := storage_fault()) != said:
                said = fault
                self.send(STORAGE + json.dumps(None if fault is None else vars(fault)).encode() + b"\n")
            self._exposition, self._exposed_at = metrics.stepper_exposition(), time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), METRICS_EVERY_S)

    def _run(self) -> None:
        next_beat = time.monotonic()
        try:
            while True:
                readable, _, _ = select.select([self.channel], [], [], POLL_S)
                if readable and not self.channel.recv(1):
                    return self._parent_gone()
                while not self._frames.empty():
                    frame = self._frames.get()
                    if frame is None:
                        return
                    self.channel.sendall(frame)
                exposition, self._exposition = self._exposition, None
                if exposition is not None:  # sent as soon as exposed: /metrics lags the loop by no more than before
                    self.channel.sendall(b"metrics %d\n" % len(exposition) + exposition)
                    next_beat = time.monotonic() + METRICS_EVERY_S
                elif time.monotonic() >= next_beat:  # the loop exposed nothing for a second: it is busy
                    self.channel.sendall(b"beat\n")
                    next_beat = time.monotonic() + METRICS_EVERY_S
                self._watch_loop()
        except OSError:  # the HTTP process is gone (a broken pipe)
            self._parent_gone()

    def _watch_loop(self) -> None:
        held = time.monotonic() - self._exposed_at
        running = self._stop is not None and not self._stop[1].is_set()  # not starting, not stopping
        if running and held > self.hang_timeout_s and self._held_since is None:
            self._held_since = self._exposed_at
            log.warning("the event loop of the stepping process has not run for %.0f s: a processor or hook holds it "
                        "(a long tick, or an endless loop); not a hang, so not restarted", held)  # fmt: skip
        elif self._held_since is not None and held <= METRICS_EVERY_S * 2:
            log.warning("the event loop of the stepping process runs again, after %.1f s",
                        self._exposed_at - self._held_since)  # fmt: skip
            self._held_since = None

    def _parent_gone(self) -> None:
        self._gone = True
        if self._stop is not None:
            loop, stop = self._stop
            log.warning("the serve process (parent of this stepping process) is gone; stopping")
            with contextlib.suppress(RuntimeError):  # the loop already closed: the process is ending
                loop.call_soon_threadsafe(stop.set)


def main() -> None:
    """The stepping process: `python -c "from archetype.stepper import main; main()" CHANNEL_FD LOCK_FD SETTINGS`."""
    channel_fd, lock_fd, settings = sys.argv[1:4]
    config = ServeSettings.model_validate_json(settings)
    configure_logging(config.log_level, config.log_format)
    reporter = Reporter(socket.socket(fileno=int(channel_fd)), config.hang_timeout)  # beating before the slow imports
    from archetype.stepping import step_worlds  # not at the top: the reporter beats through the slow imports

    try:
        asyncio.run(step_worlds(config, reporter.expose, os.fdopen(int(lock_fd), "a+")))
    except ConfigurationError as exc:  # before ready: serve says it in one line and stops
        reporter.send(REFUSED + str(exc).encode() + b"\n")
        sys.exit(2)
    finally:
        reporter.close()
