"""The remote `Authority`: each call goes to the Durable Object of its world.

Runs in the Worker (Pyodide). The namespace binding maps a world id to its object with
`idFromName`, so a world's ledger lives in exactly one object, wherever it is called from.
"""

from __future__ import annotations

from typing import Any

from archetype.commands.authority import Authority
from archetype.commands.errors import InvalidCommandError, OperationUnavailableError, UnregisteredOperationError
from archetype.commands.ledger import LEDGER_METHODS
from durable_world.envelope import unwrap
from durable_world.ffi import to_py

# No object sees every world, and a namespace cannot be enumerated from inside a Worker.
UNROUTABLE = frozenset({"list_worlds"})


class DurableObjectAuthority(Authority):
    def __init__(self, namespace: Any) -> None:
        self._namespace = namespace

    async def rpc(self, method: str, args: dict[str, Any]) -> Any:
        if method not in LEDGER_METHODS:
            raise UnregisteredOperationError(f"{method!r} is not a ledger method")
        if method in UNROUTABLE:
            raise OperationUnavailableError(
                f"{method} is not available on the Durable Object authority: each world lives in its own "
                "object and the namespace cannot be listed; keep a directory of world ids on the client side"
            )
        if not isinstance(args.get("world_id"), str):
            raise InvalidCommandError(f"{method} needs the world_id that names its Durable Object")
        stub = self._namespace.get(self._namespace.idFromName(args["world_id"]))
        return unwrap(to_py(await getattr(stub, method)(args)))
