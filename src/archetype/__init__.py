"""archetype: durable world commands for tick-based simulation worlds.

`archetype.world` and `archetype.commands` run under Pyodide too (stdlib + pydantic only);
`Runtime` (the CPython composition root) and `Client` / `AsyncClient` (the HTTP client, httpx)
are imported lazily so the Worker never loads them (not even under `TYPE_CHECKING`: the Worker's
bundle is this package's static import closure, src/worker/stage.py). Type checkers see them from
`archetype.runtime` and `archetype.client`.
"""

from typing import Any

from archetype.commands.failures import Permanent, Retryable

__all__ = ["AsyncClient", "Client", "Permanent", "Retryable", "Runtime"]
_LAZY = {"Runtime": "archetype.runtime", "Client": "archetype.client", "AsyncClient": "archetype.client"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'archetype' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)
