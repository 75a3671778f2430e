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


def _ipc(rows: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as stream:
        stream.write_table(rows)
    return sink.getvalue().to_pybytes()


class ProcessWriter:
    """Appends batches through `AuditTable.append_in_order` in a child process over `<data_dir>/audit`."""

    def __init__(self, data_dir: str | Path) -> None:
        self._data_dir = str(Path(data_dir).resolve())
        self._child: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()

    async def _process(self) -> asyncio.subprocess.Process:
        if self._child is None or self._child.returncode is not None:
            self._child = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "archetype.audit.writer", self._data_dir,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=1 << 20,
            )  # fmt: skip
        return self._child

    async def append_in_order(self, world_id: str, rows: pa.Table) -> int:
        payload = await asyncio.to_thread(_ipc, rows)
        async with self._lock:  # one request in flight per child
            child = await self._process()
            try:
                child.stdin.write(json.dumps({"world_id": world_id, "bytes": len(payload)}).encode() + b"\n" + payload)
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
