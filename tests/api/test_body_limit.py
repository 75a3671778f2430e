"""BodyLimit's body deadline on its own (no socket): a late body is answered 408 and no route
runs; a request also cancelled for another reason (a server shutting down) stays cancelled."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from archetype.api.limits import BodyLimit

TIMEOUT_S = 0.05
SCOPE = {"type": "http", "method": "POST", "path": "/worlds", "headers": [(b"content-type", b"application/json")]}


async def route(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("no route runs for a body that never came")


async def late_request(also_cancelled: bool) -> tuple[asyncio.Task[None], list[dict[str, Any]]]:
    sent: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()

    async def receive() -> dict[str, Any]:
        if also_cancelled:  # a second cancellation, due with the deadline: both come before the task resumes
            loop.call_later(TIMEOUT_S, task.cancel)
        await asyncio.Event().wait()  # the body never comes
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    task = asyncio.create_task(BodyLimit(route, body_timeout_s=TIMEOUT_S)(dict(SCOPE), receive, send))
    await asyncio.wait([task], timeout=60)  # returns once the task is done: generous for a busy machine
    return task, sent


async def test_a_late_body_is_answered_408_and_closes_the_connection():
    task, sent = await late_request(also_cancelled=False)
    assert task.done() and not task.cancelled()
    assert sent[0]["status"] == 408 and (b"connection", b"close") in sent[0]["headers"]
    assert b'"code":"request_timeout"' in sent[1]["body"]


async def test_a_late_body_cancelled_for_another_reason_too_stays_cancelled():
    task, sent = await late_request(also_cancelled=True)
    assert task.cancelled()
    assert sent == []
    with pytest.raises(asyncio.CancelledError):
        await task
