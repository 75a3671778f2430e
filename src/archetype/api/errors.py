"""The HTTP edge's own errors and the handlers that answer every failure as `{"code", "message"}`.

Domain errors keep the code and status their `CommandError` class declares; bad input (malformed
JSON, wrong types, unknown fields, oversized bodies) is a 4xx with a stable code, never a 5xx.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from pydantic_core import ErrorDetails
from starlette.exceptions import HTTPException as StarletteHTTPException

from archetype.commands.errors import CommandError, CommandNotFoundError, InvalidCommandError  # noqa: F401  (re-exported: an HTTP code too)
from archetype.commands.http_translator import UNSUPPORTED_TYPE_ERROR
from archetype.commands.registry import NonCanonicalCommandError
from archetype.world.components import non_canonical_refusal
from archetype.world.error_text import error_text, safe_text, type_name

ERROR_DETAILS_SHOWN = 3
MESSAGE_LIMIT = 2_000  # characters of an error message an answer carries
log = logging.getLogger("archetype.api")


class UnauthenticatedError(CommandError):
    code, http_status = "unauthenticated", 401


class InvalidJsonError(CommandError):
    code, http_status = "invalid_json", 400


class InvalidRequestError(InvalidCommandError):
    """Bad input refused by the HTTP edge before the domain saw it (wrong types, missing or unknown
    fields, out-of-range numbers): an InvalidCommandError, so a remote runner catches it as the
    same refusal the ledger makes in-process."""

    code, http_status = "invalid_request", 422


class DuplicateHeaderError(CommandError):
    code, http_status = "duplicate_header", 400


class RequestTimeoutError(CommandError):
    code, http_status = "request_timeout", 408


class UnsupportedCommandTypeError(InvalidRequestError):
    code = UNSUPPORTED_TYPE_ERROR


class RouteNotFoundError(CommandError):
    code, http_status = "not_found", 404


class MethodNotAllowedError(CommandError):
    code, http_status = "method_not_allowed", 405


class PayloadTooLargeError(CommandError):
    code, http_status = "payload_too_large", 413


class ShuttingDownError(CommandError):
    code, http_status = "shutting_down", 503


class InternalError(CommandError):
    code, http_status = "internal_error", 500


# The framework's own refusals: 400 is FastAPI failing to decode a body as JSON (bytes that are
# not UTF-8, say), which the strict parser in front lets through to the route as "not JSON".
_BY_HTTP_STATUS = {400: InvalidJsonError, 404: RouteNotFoundError, 405: MethodNotAllowedError, 413: PayloadTooLargeError}


def error_response(error: CommandError, headers: dict[str, str] | None = None) -> JSONResponse:
    if error.http_status == 401:
        headers = {**(headers or {}), "WWW-Authenticate": "Bearer"}
    if error.retry_after_s is not None:
        headers = {**(headers or {}), "Retry-After": str(error.retry_after_s)}
    # valid Unicode and bounded, whatever it echoes of the input (a lone surrogate, a megabyte)
    body = {key: safe_text(str(value), MESSAGE_LIMIT) for key, value in error.to_json().items()}
    return JSONResponse(body, status_code=error.http_status, headers=headers)


def validation_error(errors: Sequence[ErrorDetails]) -> CommandError:
    """One coded error for a list of pydantic errors: malformed JSON, unsupported type, a value
    without a canonical form (with its JSONPath from the body), or invalid."""
    if any(e.get("type") == "json_invalid" for e in errors):
        return InvalidJsonError("the body is not valid JSON")
    for e in errors:
        if e.get("type") == UNSUPPORTED_TYPE_ERROR:
            return UnsupportedCommandTypeError(e["msg"])
    body_errors = [e for e in errors if tuple(e.get("loc", ()))[:1] == ("body",)]
    refusal = non_canonical_refusal(body_errors, skip=1) or non_canonical_refusal(errors)
    if refusal is not None:
        return NonCanonicalCommandError.at("$", refusal)
    shown = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ())) or 'body'}: {e.get('msg')}" for e in errors[:ERROR_DETAILS_SHOWN])
    more = f" (and {len(errors) - ERROR_DETAILS_SHOWN} more)" if len(errors) > ERROR_DETAILS_SHOWN else ""
    return InvalidRequestError(shown + more)


def install_error_handlers(app: FastAPI) -> None:
    # Registered by decorator: add_exception_handler is typed for handlers of any Exception only
    @app.exception_handler(CommandError)
    async def command_error(request: Request, exc: CommandError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def request_invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(validation_error(list(exc.errors())))

    @app.exception_handler(ValidationError)
    async def model_invalid(request: Request, exc: ValidationError) -> JSONResponse:
        return error_response(validation_error(exc.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        cls = _BY_HTTP_STATUS.get(exc.status_code)
        if cls is None:
            return JSONResponse({"code": f"http_{exc.status_code}", "message": str(exc.detail)}, status_code=exc.status_code)
        return error_response(cls(str(exc.detail)))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        return unexpected_error(request.method, request.url.path, exc)


def unexpected_error(method: str, path: str, exc: Exception) -> JSONResponse:
    """The answer to an exception nothing expected (logged with its traceback): 500 `internal_error`."""
    log.error("unexpected error answering %s %s: %s", method, safe_text(path), error_text(exc), exc_info=exc)
    return error_response(InternalError(f"internal error ({type_name(exc)}); see the server log"))
