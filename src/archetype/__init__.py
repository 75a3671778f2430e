"""archetype: durable world commands for tick-based simulation worlds.

`archetype.world` and `archetype.commands` run under Pyodide too (stdlib + pydantic only);
`Runtime` (the CPython composition root) and `Client` / `AsyncClient` (the HTTP client, httpx)
are imported lazily so the Worker never loads them.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # type checkers see the real classes; at run time they load on first use
    from archetype.client import AsyncClient, Client
    from archetype.runtime import Runtime

__all__ = ["AsyncClient", "Client", "Runtime"]
_LAZY = {"Runtime": "archetype.runtime", "Client": "archetype.client", "AsyncClient": "archetype.client"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'archetype' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)
