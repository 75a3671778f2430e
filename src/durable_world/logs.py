"""The Worker's and its objects' Python logs, one JSON line each.

workerd passes what Python writes to stderr to its own log, line by line (Cloudflare's Workers
Logs parse a JSON line into fields); a traceback or a multi-line message would be split into
lines nobody can put back together. `configure()` (called once, when the Worker's entry is
imported on the runtime) sends every record of INFO and above to stderr as one JSON object:
level, logger, message, the world id where known, and the traceback as one field.

The world id comes from the record (`extra={"world_id": ...}`) or from the world the object is
working for (`world_context`: an RPC's `world_id` argument, an alarm's tick or delivery of one
world), so library code that logs without naming the world still says which one it was.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import logging
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TextIO, TypeVar

_world_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("archetype_world_id", default=None)

T = TypeVar("T")


@contextlib.contextmanager
def world_context(world_id: str | None) -> Iterator[None]:
    """Records logged inside carry `world_id` (None: none known)."""
    token = _world_id.set(world_id if isinstance(world_id, str) else None)
    try:
        yield
    finally:
        _world_id.reset(token)


def for_world(method: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """A coroutine method whose first argument is a world id, run in that world's `world_context`."""

    @functools.wraps(method)
    async def wrapper(self: Any, world_id: str, *args: Any, **kwargs: Any) -> T:
        with world_context(world_id):
            return await method(self, world_id, *args, **kwargs)

    return wrapper


class JsonLineFormatter(logging.Formatter):
    """A record as one line of JSON: {"level", "logger", "message", "world_id"?, "exception"?}."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {"level": record.levelname, "logger": record.name, "message": record.getMessage()}
        world_id = getattr(record, "world_id", None) or _world_id.get()
        if world_id is not None:
            line["world_id"] = world_id
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)  # escapes every newline: one line whatever the message holds


def configure(stream: TextIO | None = None, level: int = logging.INFO) -> logging.Handler:
    """Log every record of `level` and above as JSON lines to `stream` (stderr), once: a second call
    answers the handler of the first."""
    root = logging.getLogger()
    for handler in root.handlers:
        if isinstance(handler.formatter, JsonLineFormatter):
            return handler
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonLineFormatter())
    root.addHandler(handler)
    root.setLevel(level)
    return handler
