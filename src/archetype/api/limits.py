"""Request limits in front of the application: single-valued headers, the path's encoded slashes,
then the body's size and read time, then strict JSON.

A path holding an encoded slash (`%2F`) is refused with 422 `invalid_request`: the framework
routes on the decoded path, so `/worlds/w1%2Fcommands` would reach the route of
`/worlds/w1/commands`, and no identifier (world, command, method) may hold a slash anyway.

A header that names one thing (`Authorization`, `Idempotency-Key`, `Content-Type`) sent twice is
ambiguous: frameworks silently take one of them (the first, here), so a proxy and the app could
act on different values. Such a request is refused with 400 `duplicate_header`.

The body is read (up to the limit) before the application sees it, whether or not the client
declared a Content-Length, so no route ever parses more than `max_bytes`: oversized bodies are
refused with 413. The runner protocol's calls that carry a world's state (`publish`,
`migrate_components`), from an operator, may be larger: `max_state_bytes`, so that every tick
the state limits let a runner prepare reaches its authority (docs/ledger.md, "State limits").
The whole body must arrive within `body_timeout_s` of the request's headers; a client trickling
it (or never sending it) is answered 408 `request_timeout` with `Connection: close`, so the
server drops the connection instead of holding it open forever.

A body the routes would parse as JSON (a JSON content type, or none) is then checked by the one
strict parser, `archetype.canonical.parse_json`, before any route sees it: Python's `json`, which
the framework parses with, accepts NaN and Infinity literals, turns 1e400 into an infinity, keeps
lone surrogate escapes, takes the last of duplicate keys and recurses as deep as the text nests.
Such a body is refused with 422 `non_canonical_value` and a JSONPath to the offending value;
text that is not JSON at all is left to the route (400 `invalid_json`).
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Callable
from email.message import Message
from typing import Any

from fastapi.security.utils import get_authorization_scheme_param

from archetype.api.errors import (
    DuplicateHeaderError,
    InvalidRequestError,
    PayloadTooLargeError,
    RequestTimeoutError,
    UnauthenticatedError,
    error_response,
)
from archetype.canonical import MAX_DEPTH, NonCanonicalValueError, parse_json
from archetype.commands.options import Role
from archetype.commands.registry import NonCanonicalCommandError

DEFAULT_MAX_BODY_BYTES = 1 << 20
# A tick's state write within the state limits (WRITE_SET_LIMIT, as JSON in a body: its chunks'
# quotes escaped), and within the 32 MiB a call to a Durable Object may carry.
DEFAULT_MAX_STATE_BYTES = 32 << 20
STATE_ROUTE = re.compile(r"/worlds/[^/]+/ledger/(?:publish|migrate_components)")
DEFAULT_BODY_TIMEOUT_S = 20.0
SINGLE_VALUED_HEADERS = (b"authorization", b"idempotency-key", b"content-type")
ENCODED_SLASH = b"%2f"
# The scope keys under which a JSON body that passed the strict parser is handed on, parsed, and
# the request's headers as a dict (each single-valued one sent once): the hot routes use them
# instead of parsing the body and the headers again (archetype.api.hot).
PARSED_BODY = "archetype.parsed_body"
HEADERS = "archetype.headers"
MAX_BODY_DEPTH = MAX_DEPTH
"""The deepest nesting a JSON request body may have (component data has its own, smaller limit)."""


@functools.lru_cache(maxsize=64)  # clients send a few spellings; parsing one as a MIME header costs more than the admission's SQL
def parsed_as_json(content_type: bytes | None) -> bool:
    """Whether a route may parse a body with this Content-Type as JSON (no type at all included,
    as some framework versions do)."""
    if not content_type:
        return True
    message = Message()
    message["content-type"] = content_type.decode("latin-1")
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


def strict_json(body: bytes) -> tuple[Any, NonCanonicalCommandError | None]:
    """`body` parsed (None when it is not JSON at all: the route says so), and why it must not
    reach a route (None when it may): it is JSON without a canonical value."""
    try:
        return parse_json(body, max_depth=MAX_BODY_DEPTH, integers=False), None  # integer fields have their own bounds
    except NonCanonicalValueError as exc:
        return None, NonCanonicalCommandError.at("$", exc)
    except ValueError:  # not JSON at all (json.JSONDecodeError, UnicodeDecodeError)
        return None, None


class BodyLimit:
    def __init__(self, app: Any, max_bytes: int = DEFAULT_MAX_BODY_BYTES, body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
                 max_state_bytes: int = DEFAULT_MAX_STATE_BYTES, state: Any = None) -> None:  # fmt: skip
        self.app = app
        self.max_bytes, self.max_state_bytes = max_bytes, max_state_bytes
        self.state = state  # the app's: its token table says who is an operator
        self.body_timeout_s = body_timeout_s
        self._late: set[asyncio.Task[Any]] = set()  # tasks this layer cancelled: their body came too late
        self._deadlines: BodyDeadlines | None = None  # of the loop serving now

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw = scope.get("headers") or ()
        headers = dict(raw)
        if len(headers) != len(raw):  # some name repeats: refused if it is one of the single-valued ones
            names = [name for name, _ in raw]
            repeated = next((name for name in SINGLE_VALUED_HEADERS if names.count(name) > 1), None)
            if repeated is not None:
                error = DuplicateHeaderError(f"the {repeated.decode()} header was sent more than once; send it once")
                await error_response(error)(scope, receive, send)
                return
        scope[HEADERS] = headers
        if ENCODED_SLASH in (scope.get("raw_path") or b"").split(b"?", 1)[0].lower():
            # the framework routes on the decoded path, where `w1%2Fcommands` would be two segments
            slash = InvalidRequestError("an encoded slash (%2F) in a path is never a path separator, and no id holds one")
            await error_response(slash)(scope, receive, send)
            return
        limit = self._limit(scope, headers)
        declared = headers.get(b"content-length")
        if declared is not None:
            if not declared.isdigit():
                await error_response(InvalidRequestError("Content-Length is not a number"))(scope, receive, send)
                return
            if int(declared) > limit:
                await error_response(_too_large(limit))(scope, receive, send)
                return
        # The deadline cancels this task, as asyncio.timeout's would, through BodyDeadlines: one
        # timer for every request reading its body, not a timer set and cancelled per request.
        task = asyncio.current_task()
        assert task is not None  # an ASGI app runs in a task
        loop, cancelling = task.get_loop(), task.cancelling()
        deadlines = self._deadlines
        if deadlines is None or deadlines.loop is not loop:
            deadlines = self._deadlines = BodyDeadlines(loop, self._expire)
        deadlines.add(task, loop.time() + self.body_timeout_s)
        try:
            try:
                body = await self._read_body(receive, limit)
            finally:
                deadlines.discard(task)
        except asyncio.CancelledError:
            if task not in self._late:
                raise
            self._late.discard(task)
            if task.uncancel() > cancelling:  # cancelled for another reason as well: that one stands
                raise
            late = RequestTimeoutError(f"the request body did not arrive within {self.body_timeout_s:g} s")
            await error_response(late, headers={"Connection": "close"})(scope, receive, send)
            return
        except PayloadTooLargeError as error:
            await error_response(error)(scope, receive, send)
            return
        if body is None:
            return  # the client went away before sending its body
        if body and parsed_as_json(headers.get(b"content-type")):
            value, refusal = strict_json(body)
            if refusal is not None:
                await error_response(refusal)(scope, receive, send)
                return
            if value is not None:
                scope[PARSED_BODY] = value
        await self.app(scope, replay(body, receive), send)

    def on_hot_path(self, path: Any) -> None:  # archetype.api.hot.HotPath: a hot request's whole body is at hand
        path.max_bytes = self.max_bytes

    def _expire(self, task: asyncio.Task[Any]) -> None:
        self._late.add(task)
        task.cancel()

    def _limit(self, scope: dict[str, Any], headers: dict[bytes, bytes]) -> int:
        """`max_state_bytes` for an operator's call carrying state, else `max_bytes`."""
        if self.state is None or scope["method"] != "POST" or not STATE_ROUTE.fullmatch(scope["path"]):
            return self.max_bytes
        scheme, token = get_authorization_scheme_param(headers.get(b"authorization", b"").decode("latin-1"))
        try:
            operator = scheme.lower() == "bearer" and self.state.tokens.authenticate(token).has(Role.operator)
        except UnauthenticatedError:
            operator = False
        return self.max_state_bytes if operator else self.max_bytes

    async def _read_body(self, receive: Any, limit: int) -> bytes | None:
        """The whole body; None when the client went away before sending it."""
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            body += message.get("body", b"")
            if len(body) > limit:
                raise _too_large(limit)
            if not message.get("more_body", False):
                return bytes(body)


class BodyDeadlines:
    """The body deadlines of the requests reading their body on one loop, behind one timer.

    A timer set and cancelled per request (~6k instructions of uvloop's `call_at` per admission
    alone, docs/performance.md) cost more than the dict entry each request makes here. Every deadline here is the
    request's start plus the same timeout, so they come due in the order they were added: the
    dict keeps that order, and the one timer waits for the oldest; when it fires, it expires those
    due and waits for the next one."""

    def __init__(self, loop: asyncio.AbstractEventLoop, expire: Callable[[asyncio.Task[Any]], None]) -> None:
        self.loop = loop
        self._expire = expire
        self._due: dict[asyncio.Task[Any], float] = {}  # in the order they come due
        self._timer: asyncio.TimerHandle | None = None

    def add(self, task: asyncio.Task[Any], due: float) -> None:
        self._due[task] = due
        if self._timer is None:
            self._timer = self.loop.call_at(due, self._fire)

    def discard(self, task: asyncio.Task[Any]) -> None:
        self._due.pop(task, None)

    def _fire(self) -> None:
        self._timer = None
        now = self.loop.time()
        while self._due:
            task, due = next(iter(self._due.items()))
            if due > now:
                self._timer = self.loop.call_at(due, self._fire)
                return
            del self._due[task]
            self._expire(task)


def _too_large(limit: int) -> PayloadTooLargeError:
    return PayloadTooLargeError(f"request bodies are limited to {limit} bytes")


def replay(body: bytes, receive: Any) -> Any:
    """`receive`, giving `body` as the first message (the body was read already)."""
    sent = False

    async def replayed() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed
