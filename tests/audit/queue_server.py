"""A loopback HTTP server implementing Cloudflare Queues' pull-consumer contract for one queue,
and the producer side workerd calls for a queue binding.

pull leases visible messages for `visibility_timeout_ms` (each delivery gets a new lease id and
counts an attempt); ack deletes a message whose lease is current; retry makes it visible again
after `delay_seconds`; a lease that expired is void, and the message is delivered again. A message
delivered more than `max_retries` + 1 times moves to `dead_letters`.

The producer side: a Worker's queue binding whose service is this server (`LocalWorker(queue_address=
queue.address)`, src/worker/local_workerd.py) posts each `sendBatch` to `/batch` as
`{"messages": [{"body": <base64>, "contentType": "json"}, ...]}` and needs a 200 with the queue's
metrics. `fail_pushes("refuse")` answers 500 instead (a queue that is down), `fail_pushes("hang")`
holds each request unanswered until `fail_pushes(None)`, `push_delay_s` answers each push that
late (a slow queue); every push is recorded in `pushes`.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from tests.audit.seaweed import WeedMini

PushFailure = Literal["refuse", "hang"]
HANG_AT_MOST_S = 300.0  # a held push is answered (refused) by then, so no thread outlives a test for long


@dataclass(frozen=True)
class Push:
    """One `/batch` request from the runtime: when, the world ids of its events, and the answer."""

    at: float
    world_ids: tuple[str, ...]
    outcome: str  # "stored", "refused", "held", "rejected"


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up on a held push, or closed its connection: nothing to report


@dataclass
class Stored:
    id: str
    body: str
    timestamp_ms: int
    attempts: int = 0
    visible_at: float = 0.0
    lease_id: str | None = None
    deliveries: list[str] = field(default_factory=list)


class LoopbackQueue:
    def __init__(self, *, account_id: str = "acct", queue_id: str = "audit", token: str = "queue-token",
                 max_retries: int = 3) -> None:  # fmt: skip
        self.account_id, self.queue_id, self.token, self.max_retries = account_id, queue_id, token, max_retries
        self.messages: dict[str, Stored] = {}
        self.dead_letters: list[Stored] = []
        self.acked: list[str] = []
        self.skipped_s = 0.0  # time moved on by `advance`, on top of the monotonic clock
        self.pushes: list[Push] = []
        self.received: list[Any] = []  # every message body stored, in arrival order, kept after its ack
        self.push_delay_s = 0.0
        self._push_failure: PushFailure | None = None
        self._released = threading.Event()
        self._lock = threading.Lock()
        self._server = _QuietServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/client/v4"

    def __enter__(self) -> LoopbackQueue:
        self._thread.start()
        return self

    @property
    def address(self) -> str:
        """`host:port` of the producer side, for a workerd service."""
        return f"127.0.0.1:{self._server.server_address[1]}"

    def __exit__(self, *exc: object) -> None:
        self.fail_pushes(None)
        self._server.shutdown()
        self._server.server_close()

    def send(self, body: Any) -> str:
        """The producer side: what `queue.send(body, {contentType: "json"})` stores."""
        return self._store(json.dumps(body))

    def _store(self, text: str) -> str:
        with self._lock:
            message = Stored(uuid.uuid4().hex, text, int(time.time() * 1000))
            self.messages[message.id] = message
            self.received.append(json.loads(text))
            return message.id

    def bodies(self, world_id: str) -> list[Any]:
        """The bodies of the messages about `world_id` stored so far, in the order they arrived
        (consumed or not)."""
        with self._lock:
            return [body for body in self.received if isinstance(body, dict) and body.get("world_id") == world_id]

    def fail_pushes(self, failure: PushFailure | None) -> None:
        """From now on, refuse or hold the runtime's pushes; None: take them again (held ones are refused)."""
        with self._lock:
            self._push_failure = failure
            released, self._released = self._released, threading.Event()
        released.set()

    def push(self, messages: list[dict[str, Any]]) -> str:
        """A `/batch` from the runtime: its outcome ("stored" unless pushes fail or a message is not
        a JSON message, "rejected", which the consumer could not read)."""
        if any(m.get("contentType") != "json" for m in messages):
            self._record((), "rejected")
            return "rejected"
        texts = [base64.b64decode(m["body"]).decode() for m in messages]
        world_ids = tuple(sorted({str(json.loads(text).get("world_id")) for text in texts}))
        with self._lock:
            failure, released = self._push_failure, self._released
        if failure == "hang":
            self._record(world_ids, "held")
            released.wait(HANG_AT_MOST_S)
            return "held"
        if failure == "refuse":
            self._record(world_ids, "refused")
            return "refused"
        time.sleep(self.push_delay_s)
        for text in texts:
            self._store(text)
        self._record(world_ids, "stored")
        return "stored"

    def _record(self, world_ids: tuple[str, ...], outcome: str) -> None:
        with self._lock:
            self.pushes.append(Push(time.time(), world_ids, outcome))

    def metrics(self) -> dict[str, Any]:
        with self._lock:
            oldest = min((m.timestamp_ms for m in self.messages.values()), default=0)
            return {"backlogCount": len(self.messages), "backlogBytes": sum(len(m.body) for m in self.messages.values()),
                    "oldestMessageTimestamp": oldest}  # fmt: skip

    def pending(self) -> int:
        with self._lock:
            return len(self.messages)

    def advance(self, seconds: float) -> None:
        """Move the queue's clock on (leases expire) without waiting: a test's timing then does not
        depend on how fast a busy machine runs it."""
        with self._lock:
            self.skipped_s += seconds

    def _now(self) -> float:
        return time.monotonic() + self.skipped_s

    # -- the contract --
    def pull(self, batch_size: int, visibility_timeout_ms: int) -> dict[str, Any]:
        now = self._now()
        out = []
        with self._lock:
            for message in list(self.messages.values()):
                if len(out) >= batch_size:
                    break
                if message.visible_at > now:
                    continue
                if message.attempts > self.max_retries:
                    self.dead_letters.append(self.messages.pop(message.id))
                    continue
                message.attempts += 1
                message.lease_id = uuid.uuid4().hex
                message.deliveries.append(message.lease_id)
                message.visible_at = now + visibility_timeout_ms / 1000
                out.append({
                    "id": message.id, "body": message.body, "attempts": message.attempts, "lease_id": message.lease_id,
                    "timestamp_ms": message.timestamp_ms, "metadata": {"CF-Content-Type": "json"},
                })  # fmt: skip
            return {"messages": out, "message_backlog_count": len(self.messages)}

    def ack(self, acks: list[dict[str, Any]], retries: list[dict[str, Any]]) -> dict[str, Any]:
        now = self._now()
        counts, warnings = {"ackCount": 0, "retryCount": 0}, []
        with self._lock:
            leased = {m.lease_id: m for m in self.messages.values() if m.lease_id and m.visible_at > now}
            for entry in acks:
                message = leased.pop(entry["lease_id"], None)
                if message is None:
                    warnings.append(f"lease {entry['lease_id']} is not current")
                    continue
                del self.messages[message.id]
                self.acked.append(message.id)
                counts["ackCount"] += 1
            for entry in retries:
                message = leased.pop(entry["lease_id"], None)
                if message is None:
                    warnings.append(f"lease {entry['lease_id']} is not current")
                    continue
                message.lease_id, message.visible_at = None, now + entry.get("delay_seconds", 0)
                counts["retryCount"] += 1
        return {**counts, "warnings": warnings}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        queue = self
        prefix = f"/client/v4/accounts/{self.account_id}/queues/{self.queue_id}/messages/"

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if self.path == "/batch":  # the runtime's push (no token: it comes from the binding)
                    outcome = queue.push(body["messages"])
                    if outcome == "stored":
                        return self._answer(200, {"metadata": {"metrics": queue.metrics()}})
                    return self._answer(400 if outcome == "rejected" else 500, {"error": f"batch {outcome}"})
                if self.headers.get("Authorization") != f"Bearer {queue.token}":
                    return self._answer(401, {"success": False, "errors": [{"code": 10000, "message": "Authentication error"}]})
                if self.path == prefix + "pull":
                    result = queue.pull(body.get("batch_size", 5), body.get("visibility_timeout_ms", 30_000))
                elif self.path == prefix + "ack":
                    result = queue.ack(body.get("acks", []), body.get("retries", []))
                else:
                    return self._answer(404, {"success": False, "errors": [{"code": 7003, "message": "No route"}]})
                self._answer(200, {"success": True, "errors": [], "messages": [], "result": result})

        return Handler


def consume_once(queue: LoopbackQueue, weed: WeedMini) -> subprocess.CompletedProcess[str]:
    """`archetype audit consume --once` in a child process: from `queue` into `weed`'s Iceberg REST catalog."""
    from tests.audit.seaweed import BUCKET

    properties = [f"--catalog-property={key}={value}" for key, value in weed.catalog_properties().items()]
    return subprocess.run(
        [sys.executable, "-m", "archetype.cli", "audit", "consume", "--once", "--account-id", queue.account_id,
         "--queue-id", queue.queue_id, "--queue-api", queue.api, "--catalog-uri", weed.iceberg, "--warehouse", BUCKET,
         *properties],
        env={**os.environ, "CLOUDFLARE_QUEUES_TOKEN": queue.token}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
