"""The audit queue of the real-runtime deployment, as a service that keeps what it is sent: workerd
hands a queue binding's sends to it over HTTP (src/worker/local_workerd.py, DROP_QUEUE_JS says the
request format), and the tests read back each world's messages in the order they arrived, as the
objects' `sendBatch` calls serialised them (JSON, contentType "json")."""

from __future__ import annotations

import base64
import json
import threading
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

METRICS = {"metadata": {"metrics": {"backlogCount": 0, "backlogBytes": 0, "oldestMessageTimestamp": 0}}}


class QueueRecorder:
    """A loopback HTTP service: `address` for LocalWorker(queue_address=...), `bodies(world_id)`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bodies: dict[str, list[Any]] = defaultdict(list)
        self.requests: list[dict[str, Any]] = []  # every request as received: its path, headers and messages
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                received = json.loads(self.rfile.read(length) or b"{}")
                recorder._receive(self.path, dict(self.headers), received)
                answer = json.dumps(METRICS).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host}:{port}"

    def _receive(self, path: str, headers: dict[str, str], received: dict[str, Any]) -> None:
        messages = received.get("messages", [received] if "body" in received else [])
        with self._lock:
            self.requests.append({"path": path, "headers": headers, "messages": messages})
            for message in messages:
                body = json.loads(base64.b64decode(message["body"]))
                self._bodies[body.get("world_id", "")].append(body)

    def bodies(self, world_id: str) -> list[Any]:
        """The message bodies about `world_id`, in the order they arrived."""
        with self._lock:
            return list(self._bodies.get(world_id, []))

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
