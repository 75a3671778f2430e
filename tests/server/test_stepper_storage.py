"""`archetype serve`'s `/health` hears of its stepping process's storage too: the stepping process
says when its catalog connection's writes are refused and when one succeeds again (a `storage`
line on the channel, archetype.stepper), and the HTTP process keeps what it last said."""

from __future__ import annotations

import asyncio
import socket

import pytest

from archetype.commands.port import StorageFault
from archetype.metrics import Metrics
from archetype.settings import ServeSettings
from archetype.stepper import Reporter, Stepper

pytestmark = pytest.mark.timeout(60)


async def until(condition) -> None:
    for _ in range(400):  # the reporter sends within a second: generous on a busy machine
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("not within 20 s")


async def test_the_http_process_keeps_what_the_stepping_process_last_said_of_its_storage(tmp_path):
    ours, theirs = socket.socketpair()
    reporter = Reporter(theirs, hang_timeout_s=60)
    stepper = Stepper(ServeSettings(data=tmp_path), lock=None)  # type: ignore[arg-type]  # only its channel's side
    reader, writer = await asyncio.open_connection(sock=ours)
    listening = asyncio.create_task(stepper._listen(reader))
    fault: list[StorageFault | None] = [None]
    stop = asyncio.Event()
    exposing = asyncio.create_task(reporter.expose(Metrics(0), stop, lambda: fault[0]))
    try:
        await until(lambda: stepper.ready)
        assert stepper.storage_fault is None
        fault[0] = StorageFault("StorageUnavailableError: the storage cannot write (database or disk is full)", 1_234)
        await until(lambda: stepper.storage_fault is not None)
        assert stepper.storage_fault == fault[0]
        fault[0] = None
        await until(lambda: stepper.storage_fault is None)
    finally:
        stop.set()
        await exposing
        reporter.close()
        theirs.close()  # the Reporter's end: the stepping process's, closed by its exit in serve
        writer.close()
        listening.cancel()
        await writer.wait_closed()
