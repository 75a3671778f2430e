"""A request-body limit in front of the application: oversized bodies are refused with 413.

The body is read (up to the limit) before the application sees it, whether or not the client
declared a Content-Length, so no route ever parses more than `max_bytes`.
"""

from __future__ import annotations

from typing import Any

from archetype.api.errors import InvalidRequestError, PayloadTooLargeError, error_response

DEFAULT_MAX_BODY_BYTES = 1 << 20


class BodyLimit:
    def __init__(self, app: Any, max_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        declared = headers.get(b"content-length")
        if declared is not None:
            if not declared.isdigit():
                await error_response(InvalidRequestError("Content-Length is not a number"))(scope, receive, send)
                return
            if int(declared) > self.max_bytes:
                await self._too_large(scope, receive, send)
                return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away before sending its body
            body += message.get("body", b"")
            if len(body) > self.max_bytes:
                await self._too_large(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(bytes(body), receive), send)

    async def _too_large(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        error = PayloadTooLargeError(f"request bodies are limited to {self.max_bytes} bytes")
        await error_response(error)(scope, receive, send)


def _replay(body: bytes, receive: Any) -> Any:
    sent = False

    async def replayed() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed
