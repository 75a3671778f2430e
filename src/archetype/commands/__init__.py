"""Governed entry and durable work: registry, dispatcher, scheduler, ledger and their errors."""

from archetype.commands.dispatcher import CommandDispatcher, HandlerContext
from archetype.commands.errors import (
    CommandConflictError,
    CommandError,
    InvalidCommandError,
    LeaseLostError,
    NotDurableError,
    OperationUnavailableError,
    PermissionDeniedError,
    QuotaExceededError,
    ReservationNotOwnedError,
    StaleWriterError,
    UnregisteredOperationError,
    WorldClosingError,
    WorldExistsError,
    WorldNotFoundError,
)
from archetype.commands.families import default_registry
from archetype.commands.http_translator import SubmitCommandRequest
from archetype.commands.options import ActorCtx, DurableOptions, Role
from archetype.commands.registry import DurableOperation, OperationRegistry, OperationSpec
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
    "HandlerContext",
    "InvalidCommandError",
    "LeaseLostError",
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
    "UnregisteredOperationError",
    "WorldClosingError",
    "WorldExistsError",
    "WorldNotFoundError",
    "default_registry",
]
