"""Faults at the Authority seam: the real authority, with a hook around every ledger call.

A hook can record the call, fail it before it runs (nothing happened), or lose its answer after
it ran (it happened, the caller cannot know): the three things a network does to a runner.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from archetype.commands.authority import Authority

Hook = Callable[[str, dict[str, Any]], Any]


class AuthoritySeam(Authority):
    def __init__(self, inner: Authority, *, before: Hook | None = None, after: Hook | None = None) -> None:
        self.inner = inner
        self.before, self.after = before, after
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def rpc(self, method: str, arguments: dict[str, Any]) -> Any:
        self.calls.append((method, arguments))
        if self.before is not None:
            await _maybe_await(self.before(method, arguments))
        result = await self.inner.rpc(method, arguments)
        if self.after is not None:
            await _maybe_await(self.after(method, arguments))
        return result

    async def close(self) -> None:
        await self.inner.close()


async def _maybe_await(value: Any) -> None:
    if hasattr(value, "__await__"):
        await value


def answer_lost(inner: Authority, method: str) -> AuthoritySeam:
    """Carries `method` out for real, then loses the answer (a dropped connection)."""

    def lose(called: str, arguments: dict[str, Any]) -> None:
        if called == method:
            raise ConnectionResetError(f"connection reset after {method} was carried out")

    return AuthoritySeam(inner, after=lose)
