"""The projector's Iceberg writer, in a child process of its own.

pyiceberg's append is mostly Python (manifests, metadata, statistics) and holds the GIL, so in a
thread it cannot overlap the projector's own Python work (reading the outbox, building Arrow,
acknowledging). A child process can: the parent reads and converts batch N+1 while the child
commits batch N. The child is `python -m archetype.audit.writer <data_dir>`; it speaks a tiny
protocol on its pipes, one request at a time:

    parent -> child: {"world_id": w, "bytes": n}\\n  followed by n bytes of Arrow IPC stream
    child -> parent: {"appended": k}\\n  or  {"error": "<type>: <message>"}\\n

Closing the child's stdin ends it. A child that died is replaced on the next append.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pyarrow as pa


class AuditWriteError(RuntimeError):
    """The writer process failed to append a batch; nothing of that batch was committed by it."""


def encode(rows: pa.Table) -> bytes:
    """Rows as the writer receives them: an Arrow IPC stream (call it off the event loop)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as stream:
        stream.write_table(rows)
    return sink.getvalue().to_pybytes()


class ProcessWriter:
    """Appends batches through `AuditTable.append_in_order` in a child process over `<data_dir>/audit`.

    `submit` writes the request at once, without yielding to the event loop, so the child starts
    committing while the caller goes on with its own (blocking) ledger work; one request at a time.
    """

    def __init__(self, data_dir: str | Path) -> None:
        self._data_dir = str(Path(data_dir).resolve())
        self._child: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        if self._child is None or self._child.returncode is not None:
            self._child = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "archetype.audit.writer", self._data_dir,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=1 << 20,
            )  # fmt: skip

    def submit(self, world_id: str, payload: bytes) -> asyncio.Task[int]:
        """Send one batch (from `encode`) to the started child; the task yields the rows appended."""
        child = self._child
        if child is None:
            raise RuntimeError("start() the writer before submitting")
        try:
            child.stdin.write(json.dumps({"world_id": world_id, "bytes": len(payload)}).encode() + b"\n" + payload)
        except (BrokenPipeError, ConnectionResetError, RuntimeError) as exc:
            error = AuditWriteError(f"audit writer process died: {exc}")
            return asyncio.ensure_future(_raise(error))
        return asyncio.ensure_future(self._reply(child))

    @staticmethod
    async def _reply(child: asyncio.subprocess.Process) -> int:
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
            child.stdin.close()
            try:
                await asyncio.wait_for(child.wait(), timeout=10)
            except asyncio.TimeoutError:
                child.kill()
                await child.wait()


async def _raise(error: Exception) -> int:
    raise error


def serve(data_dir: str) -> None:
    from archetype.audit.catalog import local_catalog
    from archetype.audit.table import AuditTable

    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # stray prints must not corrupt the reply channel
    table = AuditTable(local_catalog(data_dir))
    while header := requests.readline():
        request = json.loads(header)
        rows = pa.ipc.open_stream(requests.read(request["bytes"])).read_all()
        try:
            reply = {"appended": table.append_in_order(request["world_id"], rows)}
        except Exception as exc:  # reported to the parent, which raises it; this process stays usable
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        replies.write(json.dumps(reply).encode() + b"\n")
        replies.flush()


if __name__ == "__main__":
    serve(sys.argv[1])
