"""The registry every runtime, server and Worker starts from: all families' exact registrations."""

from __future__ import annotations

from archetype.commands.audit_history import register_audit_history
from archetype.commands.registry import OperationRegistry
from archetype.world.family import register_world_family


def default_registry() -> OperationRegistry:
    registry = OperationRegistry()
    register_world_family(registry)
    register_audit_history(registry)
    return registry
