"""`archetype serve`'s stepping process, and the HTTP process's side of it (CPython only).

`serve` answers HTTP in one OS process and steps worlds in another, so that neither waits for the
other's CPU (the GIL serialises threads: a thread would not do). The stepping process is this
serve's runner: it steps the worlds with work (`WorldRunner`), holds their world leases under the
serve's runner id, learns of new commands from the catalog (`pending_worlds`, each pass), and runs
the singleton duties (the audit projector and retention) when this serve has them. The HTTP
process keeps no world in memory (`EdgeWorlds`); the two share the SQLite catalog.

One channel joins them, a socket pair: the stepping process writes `ready` once it has opened the
catalog, then its metrics every second (the HTTP process relays them at `/metrics`); it reads
nothing, and end-of-file means the HTTP process is gone (SIGKILL included), so it stops by itself
and never steps on as an orphan. It registers in the ledger's runner registry under the runner id
(archetype.server.RunnerRegistry: what the other runners split the worlds by), and inherits the
runner id's lock (`<data>/runners/<id>.lock`), so a second serve of the id is refused until both
processes are gone.

The HTTP process restarts a stepping process that died (a restart resumes the runner id's leases
at once); one that dies before it is ready `STARTS` times in a row makes `serve` stop with one line
and exit 3 (`StepperFailedError`); one refused (its runner id is live in the runner registry under
another instance) makes it stop at once with the refusal's line and exit 2, as any setting serve refuses.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from typing import IO

from archetype.metrics import Metrics, configure_logging
from archetype.settings import ConfigurationError, ServeSettings

log = logging.getLogger("archetype.serve")

STARTS = 3  # deaths in a row before ready, after which serve gives up rather than restart forever
RESTART_DELAY_S = 0.5  # between a death and the next start: a crash loop stays cheap
METRICS_EVERY_S = 1.0
READY = b"ready\n"
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
        self.pid: int | None = None
        self.ready = False  # a stepping process has been ready once
        self._ready = False  # the current one is
        self.refusal: str | None = None  # why the current one refused to run: final, not a crash

    def latest_metrics(self) -> bytes:
        return self.metrics

    async def run(self, stop: asyncio.Event) -> None:
        """Keep a stepping process running until `stop` is set, then stop it (it finishes its
        tick and gives its leases back). Raises StepperFailedError, having set `stop`, when one
        will not start."""
        failed = 0
        while not stop.is_set():
            code = await self._run_once(stop)
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
            log.error("the stepping process (pid %s) exited (%s); starting another", self.pid, _exit_status(code))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=RESTART_DELAY_S)

    async def _run_once(self, stop: asyncio.Event) -> int | None:
        """Run one stepping process: its exit code when it died, None when `stop` stopped it."""
        ours, theirs = socket.socketpair()
        self._ready, self.refusal = False, None
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
        reader, writer = await asyncio.open_connection(sock=ours, limit=64 * 1024 * 1024)
        listening = asyncio.create_task(self._listen(reader))
        exited = asyncio.create_task(process.wait())
        stopping = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait((exited, stopping), return_when=asyncio.FIRST_COMPLETED)
            if exited.done():
                with contextlib.suppress(TimeoutError):  # what it wrote before it exited: a refusal, say
                    await asyncio.wait_for(listening, timeout=1)
                return exited.result()
            process.terminate()
            await exited
            return None
        finally:
            stopping.cancel()
            listening.cancel()
            writer.close()

    async def _listen(self, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):  # it died mid-frame: its exit says why
            while line := await reader.readline():
                if line == READY:
                    self.ready = self._ready = True
                elif line.startswith(REFUSED):
                    self.refusal = line[len(REFUSED) :].decode().strip()
                elif line.startswith(b"metrics "):
                    self.metrics = await reader.readexactly(int(line.split()[1]))


async def report_to_parent(channel: socket.socket, metrics: Metrics, stop: asyncio.Event) -> None:
    """The stepping process's side of the channel: `ready`, then its metrics every second, until
    `stop`; sets `stop` when the HTTP process is gone."""
    reader, writer = await asyncio.open_connection(sock=channel)
    gone = asyncio.create_task(reader.read())  # the parent writes nothing: this ends only at its end
    stopping = asyncio.create_task(stop.wait())
    try:
        writer.write(READY)
        while not stop.is_set() and not gone.done():
            exposition = metrics.stepper_exposition()
            writer.write(b"metrics %d\n" % len(exposition) + exposition)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.wait((gone, stopping), return_when=asyncio.FIRST_COMPLETED), METRICS_EVERY_S)
        if gone.done() and not stop.is_set():
            log.warning("the serve process (parent of this stepping process) is gone; stopping")
            stop.set()
    finally:
        gone.cancel()
        stopping.cancel()
        writer.close()


def main() -> None:
    """The stepping process: `python -c "from archetype.stepper import main; main()" CHANNEL_FD LOCK_FD SETTINGS`."""
    channel_fd, lock_fd, settings = sys.argv[1:4]
    config = ServeSettings.model_validate_json(settings)
    configure_logging(config.log_level, config.log_format)
    from archetype.server import step_worlds  # not at the top: the server imports this module

    channel = socket.socket(fileno=int(channel_fd))
    try:
        asyncio.run(step_worlds(config, channel, os.fdopen(int(lock_fd), "a+")))
    except ConfigurationError as exc:  # before ready: serve says it in one line and stops
        channel.sendall(REFUSED + str(exc).encode() + b"\n")
        sys.exit(2)
