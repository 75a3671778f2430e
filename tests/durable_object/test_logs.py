"""The Worker's log lines (durable_world.logs): one JSON object per record, whatever it holds; the
real runtime's output is read in tests/workerd/test_audit_queue.py."""

from __future__ import annotations

import io
import json
import logging

from durable_world.logs import JsonLineFormatter, configure, world_context


def test_a_record_is_one_json_line_with_its_world_and_traceback():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLineFormatter())
    log = logging.getLogger("test_logs.one_line")
    log.addHandler(handler)
    log.propagate = False
    try:
        with world_context("w-1"):
            try:
                raise ValueError("bad\nvalue")
            except ValueError:
                log.exception("tick %d failed:\n%s", 3, "two lines")
        log.warning("named", extra={"world_id": "w-2"})
        log.warning("no world")
    finally:
        log.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3
    first, second, third = map(json.loads, lines)
    assert {k: first[k] for k in ("level", "logger", "message", "world_id")} == {
        "level": "ERROR", "logger": "test_logs.one_line", "message": "tick 3 failed:\ntwo lines", "world_id": "w-1"}  # fmt: skip
    assert first["exception"].startswith("Traceback") and "ValueError: bad\nvalue" in first["exception"]
    assert second["world_id"] == "w-2" and "world_id" not in third


def test_configure_installs_one_handler_at_info():
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        handler = configure(io.StringIO())
        assert configure(io.StringIO()) is handler and root.level == logging.INFO
        assert [h for h in root.handlers if isinstance(h.formatter, JsonLineFormatter)] == [handler]
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
