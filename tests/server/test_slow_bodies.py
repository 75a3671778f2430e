"""Slow clients on a real loopback socket: a client trickling (or withholding) its body is answered
408 `request_timeout` and disconnected once the body timeout passes, and under `archetype serve`
one trickling its request head is disconnected too, while others are served."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest

from archetype.api import create_app
from local_catalog import open_local_authority
from tests.api.conftest import TOKENS
from tests.server.loopback import LoopbackServer
from tests.support.serve import serving

pytestmark = pytest.mark.timeout(240)
BODY_TIMEOUT_S = 0.5
SLOW_CLIENTS = 40
SOCKET_TIMEOUT_S = 60  # how long a read waits for the server to answer or close: generous, for a busy machine


@pytest.fixture
async def slow_served(tmp_path):
    authority = open_local_authority(tmp_path / "data")
    with LoopbackServer(create_app(authority, tokens=TOKENS, body_timeout_s=BODY_TIMEOUT_S)) as server:
        yield server
    await authority.close()


def open_slow_request(url: str) -> socket.socket:
    """A request that declares 100 bytes of body and sends 10 of them."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT_S)
    sock.sendall(
        b"POST /worlds HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t-admin\r\n"
        b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n" + b'{"name": "'
    )
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    answer = b""
    while chunk := sock.recv(65536):
        answer += chunk
    return answer


def test_slow_bodies_are_answered_408_and_disconnected(slow_served):
    sockets = [open_slow_request(slow_served.url) for _ in range(SLOW_CLIENTS)]
    started = time.monotonic()
    try:
        # meanwhile a prompt client is served as usual
        assert httpx.get(f"{slow_served.url}/health", timeout=10).status_code == 200
        for sock in sockets:
            head, _, body = read_until_closed(sock).partition(b"\r\n\r\n")  # the server closes the connection
            assert head.startswith(b"HTTP/1.1 408 "), head
            assert b"connection: close" in head.lower()
            assert json.loads(body)["code"] == "request_timeout"
        assert time.monotonic() - started >= BODY_TIMEOUT_S  # answered at the deadline (in time: the sockets' own)
    finally:
        for sock in sockets:
            sock.close()
    # nothing was created from the partial bodies
    worlds = httpx.post(f"{slow_served.url}/ledger/list_worlds", json={}, headers={"Authorization": "Bearer t-admin"})
    assert worlds.json() == []


def test_a_body_that_arrives_in_time_is_served(slow_served):
    sock = open_slow_request(slow_served.url)
    try:
        sock.sendall(b'arena", "world_id": "w1"}'.ljust(90))  # the remaining 90 bytes, in time
        head, _, body = read_until_closed_or_answered(sock)
        assert head.startswith(b"HTTP/1.1 201 "), head
        assert json.loads(body)["world_id"] == "w1"
    finally:
        sock.close()


def read_until_closed_or_answered(sock: socket.socket) -> tuple[bytes, bytes, bytes]:
    """A keep-alive answer: read the head, then Content-Length bytes of body."""
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(65536)
    head, _, body = answer.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:"))
    while len(body) < length:
        body += sock.recv(65536)
    return head, b"", body


def test_serve_closes_connections_whose_request_head_trickles(tmp_path):
    """uvicorn itself never times out a request head; `archetype serve` does (HeadDeadline)."""
    with serving(tmp_path, "--body-timeout", str(BODY_TIMEOUT_S)) as (process, url):
        host, port = url.removeprefix("http://").split(":")
        trickling = [socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT_S) for _ in range(SLOW_CLIENTS)]
        for sock in trickling:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        with socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT_S) as prompt:  # keep-alive, two requests in time
            for _ in range(2):
                prompt.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                assert read_until_closed_or_answered(prompt)[0].startswith(b"HTTP/1.1 200 ")
            for sock in trickling:
                assert read_until_closed(sock) == b""  # closed without an answer
            assert read_until_closed(prompt) == b""  # idle after its answers: closed too, in time
        for sock in trickling:
            sock.close()
