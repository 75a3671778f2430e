"""Governed entry and durable work: registry, dispatcher, scheduler, ledger and their errors."""

from archetype.commands.audit_history import AuditEvent, GetAuditHistory
from archetype.commands.dispatcher import CommandDispatcher, HandlerContext
from archetype.commands.errors import (
    AuditUnavailableError,
    CommandConflictError,
    CommandError,
    InvalidCommandError,
    InvalidComponentDataError,
    LeaseLostError,
    MigrationConflictError,
    NotDurableError,
    OperationUnavailableError,
    PermissionDeniedError,
    QuotaExceededError,
    ReservationNotOwnedError,
    StaleWriterError,
    UnknownComponentError,
    UnregisteredOperationError,
    UnsupportedComponentSchemaError,
    WorldClosingError,
    WorldExistsError,
    WorldNotFoundError,
)
from archetype.commands.families import default_registry
from archetype.commands.http_translator import SubmitCommandRequest
from archetype.commands.options import ActorCtx, DurableOptions, Role
from archetype.commands.registry import DurableOperation, NonCanonicalCommandError, OperationRegistry, OperationSpec
from archetype.commands.scheduler import (
    CommandIdentity,
    CommandRecord,
    CommandScheduler,
    CommandStatus,
    DeferredItem,
    SpawnAdmission,
)

__all__ = [
    "ActorCtx",
    "AuditEvent",
    "AuditUnavailableError",
    "CommandConflictError",
    "CommandDispatcher",
    "CommandError",
    "CommandIdentity",
    "CommandRecord",
    "CommandScheduler",
    "CommandStatus",
    "DeferredItem",
    "DurableOperation",
    "DurableOptions",
    "GetAuditHistory",
    "HandlerContext",
    "InvalidCommandError",
    "InvalidComponentDataError",
    "LeaseLostError",
    "MigrationConflictError",
    "NonCanonicalCommandError",
    "NotDurableError",
    "OperationRegistry",
    "OperationSpec",
    "OperationUnavailableError",
    "PermissionDeniedError",
    "QuotaExceededError",
    "ReservationNotOwnedError",
    "Role",
    "SpawnAdmission",
    "StaleWriterError",
    "SubmitCommandRequest",
    "UnknownComponentError",
    "UnregisteredOperationError",
    "UnsupportedComponentSchemaError",
    "WorldClosingError",
    "WorldExistsError",
    "WorldNotFoundError",
    "default_registry",
]
