"""archetype: durable world commands for tick-based simulation worlds.

`archetype.world` and `archetype.commands` run under Pyodide too (stdlib + pydantic only);
`Runtime` (the CPython composition root) and `Client` / `AsyncClient` (the HTTP client, httpx)
are imported lazily so the Worker never loads them.
"""

from typing import Any

__all__ = ["AsyncClient", "Client", "Runtime"]


def __getattr__(name: str) -> Any:
    if name == "Runtime":
        from archetype.runtime import Runtime

        return Runtime
    if name in ("Client", "AsyncClient"):
        from archetype import client

        return getattr(client, name)
    raise AttributeError(f"module 'archetype' has no attribute {name!r}")
