"""Typed errors with stable codes. HTTP answers, Durable Object RPC results and the HTTP client
all carry the `code`, so a caller gets the same class back from either authority."""

from __future__ import annotations

from archetype.world.error_text import error_text


class CommandError(Exception):
    code = "command_error"
    http_status = 400
    retry_after_s: int | None = None  # a retryable refusal: how long to wait (HTTP `Retry-After`)

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


class UnregisteredOperationError(CommandError, LookupError):
    """Also a LookupError: a stored row naming an operation this process has not registered is unverifiable."""

    code, http_status = "unregistered_operation", 400


class NotDurableError(CommandError):
    code, http_status = "not_durable", 400


class InvalidCommandError(CommandError, ValueError):
    """Bad input: also a ValueError, so a row failing verification at materialization is REJECTED."""

    code, http_status = "invalid_command", 422


class UnknownComponentError(InvalidCommandError):
    """A component value or type names a (name, fingerprint) the world has not recorded, or one a
    declared migration superseded; the message starts with the JSONPath of the value."""

    code, http_status = "unknown_component", 422


class InvalidComponentDataError(InvalidCommandError):
    """Component data that does not fit its recorded schema; the message starts with the JSONPath
    of the first value that does not fit (`$.components[0].data.x: expected integer, got string`)."""

    code, http_status = "invalid_component_data", 422


class UnsupportedComponentSchemaError(InvalidCommandError):
    """A component schema the ledger will not record: not the canonical prefixed schema of its
    component, a fingerprint that is not its digest, or a keyword outside the validated subset."""

    code, http_status = "unsupported_schema", 422


class MigrationConflictError(CommandError):
    """A component migration that does not match the ledger: it was recorded differently, or the
    open commands it rewrites are not all the open commands naming the old fingerprint."""

    code, http_status = "migration_conflict", 409


class PermissionDeniedError(CommandError):
    code, http_status = "permission_denied", 403


class OperationUnavailableError(CommandError):
    code, http_status = "operation_unavailable", 403


class CommandConflictError(CommandError):
    code, http_status = "command_conflict", 409


class ReservationNotOwnedError(CommandError):
    code, http_status = "reservation_not_owned", 409


class CommandNotFoundError(CommandError):
    code, http_status = "command_not_found", 404


class AmbiguousCommandError(CommandError):
    """A command id looked up in every scope names commands of several principals: name one."""

    code, http_status = "ambiguous_command", 409


class NotDeadLetteredError(CommandError):
    """Only a DEAD_LETTER command is redriven."""

    code, http_status = "not_dead_lettered", 409


class RedriveConflictError(CommandError):
    """The dead letter was already redriven, under another command id."""

    code, http_status = "already_redriven", 409


class TickNotRetainedError(CommandError):
    """The world's state at that tick is not held: retention pruned it (the tick is older than the
    retention window), or the world has not published it yet (the tick is after its tick head)."""

    code, http_status = "tick_not_retained", 404


class WorldNotFoundError(CommandError):
    code, http_status = "world_not_found", 404


class WorldExistsError(CommandError):
    code, http_status = "world_exists", 409


class WorldClosingError(CommandError):
    code, http_status = "world_closing", 409


class WorldForkingError(CommandError):
    """A fork on the Durable Object whose copy from its source has not completed: no world yet."""

    code, http_status = "world_forking", 409


class StaleWriterError(CommandError):
    code, http_status = "stale_writer", 409


class LeaseLostError(CommandError):
    code, http_status = "lease_lost", 409


class WorldEdgeHostedError(CommandError):
    """The world is stepped by its Durable Object's alarm (edge-hosted): a remote runner may not
    take its writer. Refused before anything changes, so the object's writer epoch stays."""

    code, http_status = "world_edge_hosted", 409


class WorldLeaseHeldError(CommandError):
    """Another host holds the world lease and it has not expired: a claim changes nothing. The
    caller leaves the world to its host, and may claim it once the lease expired."""

    code, http_status = "world_lease_held", 409


class RunnerIdHeldError(CommandError):
    """`register_runner` of a runner id that another instance holds, unexpired: two live processes
    never share a runner id (they would split the worlds as one and both step them). Nothing
    changed; the caller picks another id, or registers once that instance's registration expired."""

    code, http_status = "runner_id_held", 409


class QuotaExceededError(CommandError):
    code, http_status = "quota_exceeded", 429


class LedgerSchemaError(CommandError):
    """The catalog was written by a newer version of archetype than this one: refuse, never guess."""

    code, http_status = "ledger_schema_too_new", 500


class AuditUnavailableError(CommandError):
    """The runtime has no audit projection to read (GetAuditHistory never falls back to the ledger)."""

    code, http_status = "audit_unavailable", 503


class StorageUnavailableError(CommandError):
    """The authority's storage could not write (full, or failing with an I/O error): the
    transaction rolled back, nothing changed; the same call succeeds once there is room again."""

    code, http_status = "storage_unavailable", 503
    retry_after_s: int | None = 5


# What SQLite (the catalog's sqlite3, a Durable Object's storage) answers when the disk is full or
# fails, and the operating system's errors for the same: names, and the messages that carry them.
STORAGE_ERROR_NAMES = ("SQLITE_FULL", "SQLITE_IOERR")
STORAGE_ERROR_MESSAGES = ("database or disk is full", "disk i/o error", "no space left on device", "disk quota exceeded",
                          *(name.lower() for name in STORAGE_ERROR_NAMES))  # fmt: skip
STORAGE_ERRNOS = (5, 28, 122)  # EIO, ENOSPC, EDQUOT (Linux; the message check covers the others)


def storage_unavailable(exc: BaseException) -> StorageUnavailableError | None:
    """`exc` as a StorageUnavailableError when it says that storage is full or failing (None when
    it says anything else). Every SqlPort passes what its storage raised through this one test."""
    name = getattr(exc, "sqlite_errorname", None)
    text = error_text(exc, 200)
    if (
        (isinstance(name, str) and name.startswith(STORAGE_ERROR_NAMES))
        or getattr(exc, "errno", None) in STORAGE_ERRNOS
        or any(message in text.lower() for message in STORAGE_ERROR_MESSAGES)
    ):
        return StorageUnavailableError(f"the storage cannot write ({text}); nothing was written, retry later")
    return None


def refuses_content(exc: BaseException) -> bool:
    """Whether `exc` is an authority's refusal of what a call carries (`invalid_command` and its
    kin, 422; `payload_too_large`, 413): the same call would be refused again, whenever it is made."""
    return isinstance(exc, CommandError) and exc.http_status in (413, 422)


def error_class(code: str) -> type[CommandError]:
    """The loaded CommandError subclass with this code (CommandError itself for an unknown code).

    Every subclass registers by defining `code`, wherever it lives (the HTTP layer adds its own),
    so there is no table to keep in step.
    """
    pending: list[type[CommandError]] = [CommandError]
    found: dict[str, type[CommandError]] = {}
    while pending:
        cls = pending.pop()
        found.setdefault(cls.code, cls)
        pending.extend(cls.__subclasses__())
    return found.get(code, CommandError)


def error_from_json(body: dict[str, str]) -> CommandError:
    return error_class(body.get("code", ""))(body.get("message", ""))
