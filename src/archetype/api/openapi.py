"""What the OpenAPI document says about failures: every route lists the statuses it can answer,
each with the `{"code", "message"}` envelope and the exact codes it may carry (an enum, so a
schema check catches a code a route answers but does not publish).

The lists are built from the error classes themselves (their `code` and `http_status`), so the
document and the handlers cannot drift apart on a status or a spelling.
"""

from __future__ import annotations

from typing import Any

from archetype.api.errors import (
    DuplicateHeaderError,
    InvalidJsonError,
    InvalidRequestError,
    PayloadTooLargeError,
    RequestTimeoutError,
    RouteNotFoundError,
    ShuttingDownError,
    UnauthenticatedError,
    UnsupportedCommandTypeError,
)
from archetype.commands.errors import (
    AmbiguousCommandError,
    AuditUnavailableError,
    CommandConflictError,
    CommandError,
    CommandNotFoundError,
    InvalidCommandError,
    InvalidComponentDataError,
    LeaseLostError,
    MigrationConflictError,
    NotDeadLetteredError,
    NotDurableError,
    OperationUnavailableError,
    PermissionDeniedError,
    QuotaExceededError,
    RedriveConflictError,
    ReservationNotOwnedError,
    StaleWriterError,
    StorageUnavailableError,
    TickNotRetainedError,
    UnknownComponentError,
    UnregisteredOperationError,
    UnsupportedComponentSchemaError,
    WorldClosingError,
    WorldEdgeHostedError,
    WorldExistsError,
    WorldNotFoundError,
)
from archetype.commands.http_translator import IdempotencyKeyMismatchError
from archetype.commands.registry import NonCanonicalCommandError

Errors = tuple[type[CommandError], ...]

# Any request, before a route runs (archetype.api.limits): headers, body size, read time, strict JSON.
FRONT_DOOR: Errors = (DuplicateHeaderError, RequestTimeoutError, PayloadTooLargeError, NonCanonicalCommandError,
                      InvalidRequestError)  # fmt: skip
AUTHENTICATED: Errors = (UnauthenticatedError, PermissionDeniedError)
# Any route reads or writes the authority's storage, which may be full or failing (retryable).
STORAGE: Errors = (StorageUnavailableError,)
# Component values that name a type the world has not recorded, or data that does not fit it.
COMPONENTS: Errors = (UnknownComponentError, InvalidComponentDataError, UnsupportedComponentSchemaError)
# A path parameter that decodes to more path segments lands on no route.
WORLD_PATH: Errors = (RouteNotFoundError, WorldNotFoundError)
JSON_BODY: Errors = (InvalidJsonError,)
ADMITTING: Errors = (ShuttingDownError, WorldClosingError)
SUBMITTING: Errors = (*JSON_BODY, *ADMITTING, UnsupportedCommandTypeError, IdempotencyKeyMismatchError, InvalidCommandError,
                      CommandConflictError, QuotaExceededError, UnregisteredOperationError, *COMPONENTS)  # fmt: skip
LEDGER: Errors = (*JSON_BODY, ShuttingDownError, UnregisteredOperationError, NotDurableError, InvalidCommandError,
                  OperationUnavailableError, CommandConflictError, ReservationNotOwnedError, WorldNotFoundError,
                  WorldExistsError, WorldClosingError, StaleWriterError, LeaseLostError, QuotaExceededError,
                  WorldEdgeHostedError, RouteNotFoundError, CommandNotFoundError, AmbiguousCommandError, NotDeadLetteredError,
                  RedriveConflictError,
                  *COMPONENTS, MigrationConflictError)  # fmt: skip
CREATE_WORLD: Errors = (*JSON_BODY, ShuttingDownError, InvalidCommandError, WorldExistsError, WorldClosingError)
FORK_WORLD: Errors = (*WORLD_PATH, *CREATE_WORLD, TickNotRetainedError, UnknownComponentError, OperationUnavailableError)
DESTROY_WORLD: Errors = (*WORLD_PATH, ShuttingDownError, WorldClosingError)
RETRY_WORLD: Errors = (*WORLD_PATH, *ADMITTING)
READ_COMMAND: Errors = (*WORLD_PATH, CommandNotFoundError, AmbiguousCommandError)
READ_OUTCOMES: Errors = (*WORLD_PATH, *JSON_BODY, AmbiguousCommandError)
READ_STATE: Errors = (*WORLD_PATH, UnknownComponentError, TickNotRetainedError)
READ_AUDIT: Errors = (*WORLD_PATH, AuditUnavailableError)
# a redrive passes admission's component check: a dead letter of a type migrated since is refused
REDRIVE: Errors = (*WORLD_PATH, *ADMITTING, CommandNotFoundError, AmbiguousCommandError, NotDeadLetteredError,
                   RedriveConflictError, CommandConflictError, UnknownComponentError, InvalidComponentDataError)  # fmt: skip


def error_responses(*groups: Errors, authenticated: bool = True) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route answering the errors of `groups` (plus the front door's, the role
    gate's when `authenticated`, and the storage's)."""
    classes = [*FRONT_DOOR, *(AUTHENTICATED if authenticated else ()), *(cls for group in groups for cls in group), *STORAGE]
    codes: dict[int, list[str]] = {}
    for cls in classes:
        if cls.code not in codes.setdefault(cls.http_status, []):
            codes[cls.http_status].append(cls.code)
    return {status: _response(codes[status]) for status in sorted(codes)}


def _response(codes: list[str]) -> dict[str, Any]:
    schema = {
        "title": "Error",
        "type": "object",
        "required": ["code", "message"],
        "properties": {"code": {"type": "string", "enum": codes}, "message": {"type": "string"}},
        "additionalProperties": False,
    }
    return {"description": ", ".join(f"`{code}`" for code in codes), "content": {"application/json": {"schema": schema}}}
