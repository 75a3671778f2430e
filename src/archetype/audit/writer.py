"""The projector's Iceberg writer, in a child process of its own.

pyiceberg's append is mostly Python (manifests, metadata, statistics) and holds the GIL, so in a
thread it cannot overlap the projector's own Python work (reading the outbox, building Arrow,
acknowledging). A child process can: the parent reads and encodes batch N+1 while the child
commits batch N. The child is `python -m archetype.audit.writer <data_dir>`; one request at a time:

    parent -> child: {"world_id": w, "path": p}\n   p: an Arrow IPC file in the writer's spool directory
    child -> parent: {"appended": k}\n  or  {"error": "<type>: <message>"}\n

The batch travels through a spool file, not the pipe: the parent's event loop is often blocked
in synchronous ledger calls, and a large pipe write would only trickle out when it yields.
The child deletes each spool file once handled. Closing its stdin ends it; a child that died is
replaced by the next `start()`.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

import pyarrow as pa

from archetype.audit.catalog import AUDIT_DIR, local_catalog
from archetype.audit.table import AuditTable
from archetype.world.error_text import error_text


class AuditWriteError(RuntimeError):
    """The writer process failed to append a batch; nothing of that batch was committed by it."""


def encode(rows: pa.Table, directory: Path) -> str:
    """Write a batch for the writer (call it off the event loop); return the spool file's path."""
    path = directory / f"{uuid.uuid4().hex}.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, rows.schema) as stream:
        stream.write_table(rows)
    return str(path)


class ProcessWriter:
    """Appends batches through `AuditTable.append_in_order` in a child process over `<data_dir>/audit`.

    `submit` writes the request at once, without yielding to the event loop, so the child starts
    committing while the caller goes on with its own (blocking) ledger work; one request at a time.
    """

    def __init__(self, data_dir: str | Path) -> None:
        self._data_dir = Path(data_dir).resolve()
        self._child: asyncio.subprocess.Process | None = None
        self.spool: Path | None = None  # this writer's own spool directory while started

    async def start(self) -> None:
        if self._child is None or self._child.returncode is not None:
            if self.spool is None:
                (self._data_dir / AUDIT_DIR).mkdir(parents=True, exist_ok=True)
                self.spool = Path(tempfile.mkdtemp(prefix="spool-", dir=self._data_dir / AUDIT_DIR))
            self._child = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "archetype.audit.writer", str(self._data_dir),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip

    def submit(self, world_id: str, path: str) -> asyncio.Task[int]:
        """Send one batch (a spool file from `encode`) to the started child; the task yields the rows appended."""
        if self._child is None:
            raise RuntimeError("start() the writer before submitting")
        assert self._child.stdin is not None  # start() opens it as a pipe
        self._child.stdin.write(json.dumps({"world_id": world_id, "path": path}).encode() + b"\n")
        return asyncio.ensure_future(self._reply(self._child))

    @staticmethod
    async def _reply(child: asyncio.subprocess.Process) -> int:
        assert child.stdin is not None and child.stdout is not None  # start() opens both as pipes
        try:
            await child.stdin.drain()
            line = await child.stdout.readline()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise AuditWriteError(f"audit writer process died: {exc}") from exc
        if not line:
            raise AuditWriteError(f"audit writer process exited with code {await child.wait()}")
        reply = json.loads(line)
        if "error" in reply:
            raise AuditWriteError(reply["error"])
        return reply["appended"]

    async def close(self) -> None:
        child, self._child = self._child, None
        if child is not None and child.returncode is None:
            assert child.stdin is not None  # start() opens it as a pipe
            child.stdin.close()
            try:
                await asyncio.wait_for(child.wait(), timeout=10)
            except TimeoutError:
                child.kill()
                await child.wait()
        if self.spool is not None:
            shutil.rmtree(self.spool, ignore_errors=True)
            self.spool = None


def serve(data_dir: str) -> None:
    try:
        _serve(data_dir)
    except BrokenPipeError:  # the parent is gone (killed): nobody to answer; one line, not a traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # nor one at exit, flushing stdout (fd 1) again
        print("the audit writer's parent (the projector) is gone; stopping", file=sys.stderr)


def _serve(data_dir: str) -> None:
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # stray prints must not corrupt the reply channel
    table = AuditTable(local_catalog(data_dir))
    # Everything loaded so far (pyiceberg, pyarrow, the table) lives as long as this process: out of
    # the collector's sight, the full collections that pyiceberg's many short-lived objects trigger
    # stay cheap (they made every other append 2-3x slower).
    gc.freeze()
    while line := requests.readline():
        request = json.loads(line)
        try:
            with pa.memory_map(request["path"]) as source:
                rows = pa.ipc.open_stream(source).read_all()
            reply: dict[str, int | str] = {"appended": table.append_in_order(request["world_id"], rows)}
        except Exception as exc:  # reported to the parent, which raises it; this process stays usable
            reply = {"error": error_text(exc)}
        finally:
            Path(request["path"]).unlink(missing_ok=True)
        replies.write(json.dumps(reply).encode() + b"\n")
        replies.flush()


if __name__ == "__main__":
    serve(sys.argv[1])
