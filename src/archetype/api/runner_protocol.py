"""The runner protocol over HTTP: the ledger methods a remote runner calls, behind one allowlist.

`POST /worlds/{world_id}/ledger/{method}` (or `/ledger/{method}` for methods without a world)
takes the method's keyword arguments as a JSON object and answers its plain JSON result. The one
table below names every callable method and the role it needs; arguments are validated against
the ledger method's own signature before the authority sees them.
"""

from __future__ import annotations

import inspect
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from archetype.api.errors import InvalidRequestError, validation_error
from archetype.canonical import NonCanonicalValueError, canonical_json, check_canonical, load_json
from archetype.commands.errors import InvalidCommandError
from archetype.commands.ledger import Ledger
from archetype.commands.options import Role

# The least role of every method (docs/http.md, "The runner protocol" has this table with the
# reasons; tests/api/test_role_matrix.py checks every method against the doc for every role).
LEDGER_ROUTE_ROLES: dict[str, Role] = {
    # what a viewer reads through the routes already: the worlds, their state and components, the projection's lag
    "world_info": Role.viewer,
    "list_worlds": Role.viewer,
    "load_state": Role.viewer,
    "read_state": Role.viewer,
    "components": Role.viewer,
    "watermark": Role.viewer,
    # every principal's commands and when they are due: an analyst's reads
    "command": Role.analyst,
    "commands_by_id": Role.analyst,
    "history": Role.analyst,
    "manifests": Role.analyst,
    "next_due_tick": Role.analyst,
    "pending_worlds": Role.analyst,
    # hosting worlds: a runner's
    "register_runner": Role.operator,
    "leave_runner": Role.operator,
    "live_runners": Role.operator,
    "hosted_worlds": Role.operator,
    "acquire_writer": Role.operator,
    "claim_world": Role.operator,
    "renew_world": Role.operator,
    "release_world": Role.operator,
    "reserve_entity_ids": Role.operator,
    "lease": Role.operator,
    "guard": Role.operator,
    "publish": Role.operator,
    "record_tick_failure": Role.operator,
    "retry_world": Role.operator,
    "release": Role.operator,
    "record_components": Role.operator,
    "migrate_components": Role.operator,
    "redrive": Role.operator,
    # the outbox: read and acknowledged by the audit projector alone (an acknowledgement deletes
    # the events, which only the writer of the audit table knows to be projected)
    "read_outbox": Role.projector,
    "read_outbox_columns": Role.projector,
    "acknowledge_outbox": Role.projector,
    # naming any principal, skipping quotas, removing history: an administrator's
    "create_world": Role.admin,
    "fork_world": Role.admin,
    "destroy": Role.admin,
    "reserve_spawn": Role.admin,
    "admit": Role.admin,
    "prune": Role.admin,
}
ADMISSION_METHODS = frozenset({"create_world", "reserve_spawn", "admit"})


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


def _arguments_model(method: str) -> type[BaseModel]:
    fn = getattr(Ledger, method)
    hints = typing.get_type_hints(fn, include_extras=True)  # with the bounds of Annotated[int, Field(...)]
    fields: dict[str, Any] = {}
    for name, parameter in inspect.signature(fn).parameters.items():
        if name in ("self", "world_id"):
            continue
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[name] = (hints[name], default)
    return create_model(f"{method}_arguments", __base__=_Wire, **fields)


ARGUMENTS: dict[str, type[BaseModel]] = {method: _arguments_model(method) for method in LEDGER_ROUTE_ROLES}
WORLD_SCOPED = frozenset(m for m in LEDGER_ROUTE_ROLES if "world_id" in inspect.signature(getattr(Ledger, m)).parameters)


def ledger_arguments(method: str, world_id: str | None, body: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments for `method`: the body, checked against the method's signature, plus world_id."""
    if (world_id is not None) != (method in WORLD_SCOPED):
        where = "/worlds/{world_id}/ledger/" if method in WORLD_SCOPED else "/ledger/"
        raise InvalidRequestError(f"{method} is called at {where}{method}")
    try:
        ARGUMENTS[method].model_validate(body)
        check_canonical(body)
    except ValidationError as exc:
        raise validation_error(exc.errors()) from exc
    except NonCanonicalValueError as exc:
        raise InvalidRequestError(str(exc)) from exc
    if method == "admit":
        for command in body["commands"]:
            _check_stored_payload(command["command_id"], command["payload"])
    return body if world_id is None else {**body, "world_id": world_id}


def _check_stored_payload(command_id: str, payload: str) -> None:
    """A row handed over raw stores its payload as given: it must be canonical JSON text already
    (the scheduler's rows are by construction; these come from outside it)."""
    try:
        canonical = canonical_json(load_json(payload))
    except ValueError as exc:  # not JSON, or JSON without a canonical form
        raise InvalidCommandError(f"command {command_id!r}: payload: {exc}") from None
    if canonical != payload:
        raise InvalidCommandError(f"command {command_id!r}: the payload is not in canonical JSON form")
