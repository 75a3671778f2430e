"""serve's hot path (archetype.http_protocol.HeadDeadline with the app's HotPath) answers the hot
routes' requests without ASGI: every answer must be the bytes the ASGI path writes, status, headers
(their order and casing) and body, and the metrics must count the same. Each case below runs on a
real loopback socket against two serves of fresh stores, one with the hot path and one without,
and the raw bytes are compared (the `date` header aside)."""

from __future__ import annotations

import functools
import json
import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from archetype.api import create_app
from archetype.api.auth import TokenTable
from archetype.http_protocol import HeadDeadline
from archetype.metrics import Metrics, ObservedAuthority
from archetype.server import serve_app
from archetype.settings import ServeSettings
from local_catalog import open_local_authority
from tests.api.conftest import TOKENS
from tests.api.test_routes import value
from tests.component_modules.alpha import Position
from tests.server.loopback import LoopbackServer

pytestmark = pytest.mark.timeout(300)
BODY_TIMEOUT_S = 1.0
HEAD_TIMEOUT_S = 3.0  # how long a connection left with the rest of a refused body stays open
QUOTA = 30  # per principal and target tick; the quota case's tick has its own count
MAX_BODY = 1 << 20
SOCKET_TIMEOUT_S = 60


def request(path: str = "/worlds/w1/commands", body: bytes | dict | None = None, *, token: str | None = "t-player",
            key: str | None = None, headers: tuple[str, ...] = (), length: int | None = None,
            content_type: str | None = "application/json", version: str = "1.1") -> bytes:  # fmt: skip
    """The raw bytes of a request; `body` a dict is sent as JSON, `length` overrides the declared one
    (-1: none declared)."""
    data = json.dumps(body).encode() if isinstance(body, dict) else (body or b"")
    lines = [f"POST {path} HTTP/{version}", "Host: edge"]
    lines += [f"Authorization: Bearer {token}"] if token else []
    lines += [f"Idempotency-Key: {key}"] if key else []
    lines += [f"Content-Type: {content_type}"] if content_type else []
    lines += [f"Content-Length: {len(data) if length is None else length}"] if length != -1 else []
    lines += list(headers)
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


def despawn(entity: int = 1, tick: int = 1_000_000) -> dict:
    return {"type": "despawn", "tick": tick, "entity_id": entity}


@dataclass
class Case:
    """Bytes sent in turn on one connection, each part followed by reading `answers` answers
    (`None`: reading until the server closes); `hot`: answers the hot path should give."""

    name: str
    parts: list[tuple[bytes, int | None]]
    hot: int = 0
    pause_s: list[float] = field(default_factory=list)  # before each part after the first
    generated: bool = False  # the server generates the command's id


def one(data: bytes, answers: int | None = 1, hot: int = 0, name: str = "") -> Case:
    return Case(name, [(data, answers)], hot)


CHUNKED = (b"POST /worlds/w1/commands HTTP/1.1\r\nHost: edge\r\nAuthorization: Bearer t-player\r\nIdempotency-Key: c1\r\n"
           b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")  # fmt: skip
CHUNKED_BODY = json.dumps(despawn(9)).encode()
HALF = request(body=despawn(10), key="half")

def health(*headers: str, target: str = "/health", method: str = "GET", version: str = "1.1", body: bytes = b"") -> bytes:
    return ("\r\n".join([f"{method} {target} HTTP/{version}", "Host: edge", *headers]) + "\r\n\r\n").encode() + body


CASES = [
    one(request("/worlds", {"name": "one", "world_id": "w1"}, token="t-admin"), hot=1, name="create"),
    one(request("/worlds", {"name": "two", "world_id": "w1"}, token="t-admin"), hot=1, name="create again: 409"),
    one(request(body=despawn(), key="k1"), hot=1, name="accepted"),
    one(request(body=despawn(), key="k1"), hot=1, name="replay"),
    one(request(body=despawn(2), key="k1"), hot=1, name="key conflict"),
    one(request(body={"type": "spawn", "tick": 1_000_000, "components": [value(Position(x=0, y=0))]}, key="s1"), hot=1, name="spawn"),
    one(request("/worlds/nope/commands", despawn(), key="k2"), hot=1, name="unknown world"),
    Case("quota overflow", [(request(body=despawn(3 + i, tick=2_000_000), key=f"q{i}"), 1) for i in range(QUOTA + 1)], hot=QUOTA + 1),
    one(request(body=despawn(), key="n1", token=None), name="no token"),
    one(request(body=despawn(), key="n2", token="t-wrong"), name="unknown token"),
    one(request(body=despawn(), key="n3", headers=("Authorization: Basic eDp5",), token=None), name="not bearer"),
    one(request(body=despawn(), key="n4", token="t-viewer"), name="wrong role"),
    one(request(body=b'{"type": "despawn", ', key="b1"), name="bad JSON"),
    one(request(body={"type": "despawn", "tick": "soon", "entity_id": 1}, key="b2"), name="wrong types"),
    one(request(body=b'{"type": "despawn", "tick": NaN, "entity_id": 1}', key="b3"), name="non-canonical JSON"),
    one(request(body=despawn(), key="bad key!"), name="bad key"),
    one(request(body=despawn(), key="t1", content_type="text/plain"), name="text body"),
    one(request(body=despawn(), key="t2", content_type=None), name="no content type"),
    one(request("/worlds/w1/commands?x=1", despawn(), key="p1"), name="query string"),
    one(request("/worlds/w%31/commands", despawn(), key="p2"), name="escaped path"),
    one(request(body=despawn(), key="d1", headers=("Idempotency-Key: d2",)), name="duplicate key header"),
    one(request(body=b"x" * (MAX_BODY + 1), key="l1"), None, name="too large body"),
    one(request(body=despawn(), key="l2", length=MAX_BODY + 1), None, name="too large declared"),
    one(request(body=b"", key="e1"), name="empty body"),
    one(request(body=b"", key="m1", length=-1), name="no content-length"),
    one(CHUNKED + b"%x\r\n" % len(CHUNKED_BODY) + CHUNKED_BODY + b"\r\n0\r\n\r\n", name="chunked body"),
    one(request(body=despawn(11), key="x1", headers=("Expect: 100-continue",)), name="expect 100-continue"),
    one(request(body=despawn(12), key="v1", version="1.0"), None, name="HTTP/1.0"),
    one(request(body=despawn(13), key="cc", headers=("Connection: close",)), None, hot=1, name="connection close"),
    one(request(body=despawn(14), key="pp1") + request(body=despawn(15), key="pp2"), 2, hot=1, name="pipelined"),
    one(request(body=despawn(16), key="pp3") + request(body=despawn(17), key="pp4", token="t-viewer")
        + request(body=despawn(18), key="pp5"), 3, hot=1, name="pipelined, one refused"),  # fmt: skip
    Case("keep-alive", [(request(body=despawn(19 + i), key=f"ka{i}"), 1) for i in range(3)], hot=3),
    Case("body in two parts", [(HALF[:-5], 0), (HALF[-5:], 1)], pause_s=[0.2]),
    one(HALF[:-5], 0, name="disconnect mid-body"),
    Case("body deadline", [(HALF[:-5], None)]),
    Case("no key", [(request(body=despawn(20)), 1)], hot=1, generated=True),
    one(health(), hot=1, name="health"),
    Case("health, kept alive", [(health(), 1)] * 3, hot=3),
    one(health("Connection: close"), None, hot=1, name="health, connection close"),
    one(health(target="/health?full=1"), name="health with a query"),
    one(health("Content-Length: 2", body=b"{}"), name="health with a body"),
    one(health("Transfer-Encoding: chunked", body=b"0\r\n\r\n"), name="health, chunked"),
    one(health(version="1.0"), None, name="health over HTTP/1.0"),
    one(health("X-Probe: 1", "X-Probe: 2"), name="health, a header twice"),
    one(health() + request(body=despawn(21), key="hp1"), 2, hot=2, name="health, then an admission pipelined"),
]


def normal(answer: bytes, generated: bool) -> bytes:
    """Without what differs between two runs: the date, a world's times, a generated command id."""
    answer = re.sub(rb"\r\ndate: [^\r]*", b"\r\ndate: -", answer)
    answer = re.sub(rb'"(created_at|updated_at)":\d+', rb'"\1":0', answer)
    if not generated:  # a command id the server generated: its digest differs too
        return answer
    return re.sub(rb'"(command_id|digest)":"[^"]*"', rb'"\1":"-"', answer)


def read_answer(sock: socket.socket, buffer: bytearray) -> bytes:
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        assert chunk, f"closed mid-answer: {bytes(buffer)!r}"
        buffer += chunk
    head, _, _ = bytes(buffer).partition(b"\r\n\r\n")
    if head.startswith(b"HTTP/1.1 100 "):
        del buffer[: len(head) + 4]
        return head + b"\r\n\r\n" + read_answer(sock, buffer)
    length = int(re.search(rb"\r\ncontent-length: (\d+)", head).group(1))  # type: ignore[union-attr]
    size = len(head) + 4 + length
    while len(buffer) < size:
        chunk = sock.recv(65536)
        assert chunk, "closed mid-body"
        buffer += chunk
    answer = bytes(buffer[:size])
    del buffer[:size]
    return answer


def run(url: str, case: Case) -> list[bytes]:
    """Every answer of the case, and b"closed" where the server closed the connection."""
    host, port = url.removeprefix("http://").split(":")
    seen: list[bytes] = []
    with socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT_S) as sock:
        buffer = bytearray()
        for index, (data, answers) in enumerate(case.parts):
            if index and case.pause_s:
                time.sleep(case.pause_s[index - 1])
            sock.sendall(data)
            if answers is None:  # until closed
                while chunk := sock.recv(65536):
                    buffer += chunk
                seen += [normal(bytes(buffer), case.generated), b"closed"]
                return seen
            seen += [normal(read_answer(sock, buffer), case.generated) for _ in range(answers)]
    return seen


def series(url: str) -> list[str]:
    """The metrics' counts (not their durations): each request's and each admission outcome's."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT_S) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: edge\r\nAuthorization: Bearer t-viewer\r\n\r\n")
        text = read_answer(sock, bytearray()).decode()
    return [line for line in text.splitlines()
            if line.startswith(("archetype_http_request_duration_seconds_count", "archetype_admissions_total"))]  # fmt: skip


class Serve:
    """serve's app and HTTP protocol over a fresh store, in a thread; `hot` turns the hot path on."""

    def __init__(self, directory: Path, *, hot: bool) -> None:
        config = ServeSettings(data=directory, quota=QUOTA, body_timeout=BODY_TIMEOUT_S)
        self.metrics = Metrics()
        self.catalog = open_local_authority(directory, synchronous="NORMAL")
        self.app = serve_app(config, ObservedAuthority(self.catalog, self.metrics), TokenTable(TOKENS), self.metrics, None)
        assert self.app.hot_path is not None and self.app.hot_path.ready
        self.answered = 0  # by the hot path (whose answers alone it times itself)
        self.app.hot_path.observers.append(self.count)
        protocol = functools.partial(HeadDeadline, head_timeout_s=HEAD_TIMEOUT_S, hot_path=self.app.hot_path if hot else None)
        self.server = LoopbackServer(self.app, http=protocol, timeout_keep_alive=1)

    def count(self, *_: object) -> None:
        self.answered += 1


@pytest.fixture
async def serves(tmp_path):
    hot, asgi = Serve(tmp_path / "hot", hot=True), Serve(tmp_path / "asgi", hot=False)
    with hot.server, asgi.server:
        yield hot, asgi
    await hot.catalog.close()
    await asgi.catalog.close()


def test_the_hot_path_answers_every_case_as_the_asgi_path(serves):
    hot, asgi = serves
    for case in CASES:
        before = hot.answered
        assert run(hot.server.url, case) == run(asgi.server.url, case), case.name
        assert hot.answered - before == case.hot, case.name
    time.sleep(0.2)  # the disconnected client's and the deadline's requests are done with
    assert series(hot.server.url) == series(asgi.server.url)
    assert asgi.answered == 0


class Layer:
    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        await self.app(scope, receive, send)


async def test_only_an_app_whose_every_front_layer_says_what_it_does_has_a_hot_path(tmp_path):
    authority = open_local_authority(tmp_path / "data")
    try:
        app = create_app(authority, tokens=TOKENS)
        assert app.hot_path is not None and app.hot_path.ready
        app.front(Layer)  # a layer a request on the hot path would skip
        assert app.hot_path is None
        traced = create_app(authority, tokens=TOKENS, telemetry=True)  # every request through the framework
        assert traced.hot_path is not None and not traced.hot_path.ready
    finally:
        await authority.close()
