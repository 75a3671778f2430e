"""Governed entry and durable work: registry, dispatcher, scheduler, ledger and their errors."""

from archetype.commands.audit_history import AuditEvent, GetAuditHistory
from archetype.commands.dispatcher import CommandDispatcher, HandlerContext
from archetype.commands.errors import (
    AuditUnavailableError,
    CommandConflictError,
    CommandError,
    CommandNotFoundError,
    InvalidCommandError,
    LeaseLostError,
    NotDeadLetteredError,
    NotDurableError,
    OperationUnavailableError,
    PermissionDeniedError,
    QuotaExceededError,
    RedriveConflictError,
    ReservationNotOwnedError,
    StaleWriterError,
    UnregisteredOperationError,
    WorldClosingError,
    WorldEdgeHostedError,
    WorldExistsError,
    WorldNotFoundError,
)
from archetype.commands.failures import Permanent, Retryable
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
    WorldHealth,
)

__all__ = [
    "ActorCtx",
    "AuditEvent",
    "AuditUnavailableError",
    "CommandConflictError",
    "CommandDispatcher",
    "CommandError",
    "CommandNotFoundError",
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
    "LeaseLostError",
    "NonCanonicalCommandError",
    "NotDeadLetteredError",
    "NotDurableError",
    "OperationRegistry",
    "OperationSpec",
    "OperationUnavailableError",
    "Permanent",
    "PermissionDeniedError",
    "QuotaExceededError",
    "RedriveConflictError",
    "ReservationNotOwnedError",
    "Retryable",
    "Role",
    "SpawnAdmission",
    "StaleWriterError",
    "SubmitCommandRequest",
    "UnregisteredOperationError",
    "WorldClosingError",
    "WorldEdgeHostedError",
    "WorldExistsError",
    "WorldHealth",
    "WorldNotFoundError",
    "default_registry",
]
