"""archetype: durable world commands for tick-based simulation worlds.

`archetype.world` and `archetype.commands` run under Pyodide too (stdlib + pydantic only);
`Runtime` is the CPython composition root and is imported lazily so the Worker never loads it.
"""

from typing import Any

from archetype.commands.failures import Permanent, Retryable

__all__ = ["Permanent", "Retryable", "Runtime"]


def __getattr__(name: str) -> Any:
    if name == "Runtime":
        from archetype.runtime import Runtime

        return Runtime
    raise AttributeError(f"module 'archetype' has no attribute {name!r}")
