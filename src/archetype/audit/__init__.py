"""The audit projection (CPython only: it uses pyiceberg). Never imported by Worker code.

Names resolve lazily so `archetype --help` and the CLI's audit group load pyiceberg only when used.
"""

from typing import Any

__all__ = ["AuditLog", "AuditTable"]


def __getattr__(name: str) -> Any:
    if name == "AuditLog":
        from archetype.audit.log import AuditLog

        return AuditLog
    if name == "AuditTable":
        from archetype.audit.table import AuditTable

        return AuditTable
    raise AttributeError(f"module 'archetype.audit' has no attribute {name!r}")
