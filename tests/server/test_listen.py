"""serve's listening socket: connections get Nagle turned off, like uvicorn's own sockets, and no
child process of serve holds it, so a serve killed alone leaves its port free for a restart."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
from pathlib import Path

import httpx
import pytest

from archetype.server import listen
from tests.api.conftest import TOKENS
from tests.crash.harness import READY_S, Serve, wait_for


async def test_accepted_connections_have_nagle_off():
    sock = listen("127.0.0.1", 0)
    accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set_result(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    server = await asyncio.start_server(connected, sock=sock)
    _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
    # with Nagle on, every keep-alive answer after the first waited ~40 ms for the client's delayed ACK
    assert await asyncio.wait_for(accepted, 10) != 0
    writer.close()
    server.close()
    await server.wait_closed()


def _children(pid: int) -> list[int]:
    """Every live descendant of `pid` (Linux /proc)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        kids = [child for child, ppid in parents.items() if ppid == parent]
        found += kids
        frontier += kids
    return found


def _sockets(pid: int) -> set[str]:
    """The socket inodes `pid` holds open."""
    held = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                held.add(target[len("socket:[") : -1])
    return held


def _listener_inode(port: int) -> str:
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1].endswith(f":{port:04X}") and fields[3] == "0A":  # 0A: LISTEN
            return fields[9]
    raise AssertionError(f"nothing listens on port {port}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.timeout(240)
def test_no_child_of_serve_holds_its_listener_so_a_restart_gets_the_port(tmp_path):
    serve = Serve(tmp_path, tmp_path / "data", TOKENS)
    stepper = None
    try:
        url = serve.wait_serving()
        port = int(url.rsplit(":", 1)[1])
        with httpx.Client(base_url=url, timeout=30, headers={"Authorization": "Bearer t-admin"}) as http:
            assert http.post("/worlds", json={"name": "w", "world_id": "w1"}).status_code == 201
            assert http.post("/worlds/w1/commands", json={"type": "despawn", "tick": 0, "entity_id": 1}).status_code == 202
            # its settlement's events projected: the audit writer process runs beside the stepping process
            wait_for(lambda: http.get("/worlds/w1").json()["outbox_pending"] == 0 and len(_children(serve.popen.pid)) >= 2,
                     "the audit projection to run", READY_S)  # fmt: skip
        children = _children(serve.popen.pid)
        listener = _listener_inode(port)
        assert listener in _sockets(serve.popen.pid)
        for child in children:
            command = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            assert listener not in _sockets(child), f"{command!r} holds serve's listening socket"
        # serve alone dies; its stepping process is held still, so it cannot have exited by the restart
        stepper = min(children)
        os.kill(stepper, signal.SIGSTOP)
        serve.popen.kill()
        serve.popen.wait(30)
        again = Serve(tmp_path, tmp_path / "other-data", TOKENS, port=port)
        try:
            assert again.wait_serving() == url  # not "cannot listen on ...: Address already in use"
            assert again.stop() == 0
        finally:
            again.kill()
    finally:
        serve.kill()
        if stepper is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stepper, signal.SIGCONT)  # it sees the HTTP process gone and stops by itself
            wait_for(lambda: _gone(stepper), "the orphaned stepping process to stop", READY_S)


def _gone(pid: int) -> bool:
    """`pid` exited (reaped, or a zombie waiting for its new parent to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
