"""The one interface runners and the scheduler use to reach a control authority.

An authority answers `call(method, **args)` for the ledger methods in `LEDGER_METHODS`, with
plain JSON arguments and results, and raises the typed `CommandError` a ledger raised. The local
authority runs the ledger in-process; the Durable Object and the HTTP client reach it remotely.
"""

from __future__ import annotations

from typing import Any, Protocol

from archetype.commands.errors import UnregisteredOperationError
from archetype.commands.ledger import LEDGER_METHODS, Ledger


class Authority(Protocol):
    async def call(self, method: str, **args: Any) -> Any: ...

    async def close(self) -> None: ...


class InProcessAuthority:
    def __init__(self, ledger: Ledger, close: Any = None) -> None:
        self.ledger = ledger
        self._close = close

    async def call(self, method: str, **args: Any) -> Any:
        if method not in LEDGER_METHODS:
            raise UnregisteredOperationError(f"{method!r} is not a ledger method")
        return getattr(self.ledger, method)(**args)

    async def close(self) -> None:
        if self._close is not None:
            self._close()
