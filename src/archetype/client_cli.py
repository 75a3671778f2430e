"""The public HTTP routes from the command line: `archetype submit`, `history`, `dead-letters`,
`worlds ...` and `command show`, each one call of `archetype.Client` (CPython only: click, rich).
Each prints what the server answered, as a table or, with `--json`, as JSON (one object per line
for lists); an error answer exits 1 with its code."""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import Callable, Iterable
from typing import Any

import click
import httpx
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from archetype.client import Client, WorldState
from archetype.commands.errors import AuditUnavailableError, CommandError
from archetype.settings import ClientSettings

RECORD_COLUMNS = ["sequence", "command_id", "principal", "operation", "scheduled_tick", "status", "attempts",
                  "max_attempts", "applied_tick", "last_error"]  # fmt: skip
WORLD_COLUMNS = ["world_id", "name", "status", "health", "tick_head", "tick_mode", "tick_interval_ms", "outbox_pending",
                 "created_at"]  # fmt: skip
EVENT_COLUMNS = ["event_seq", "occurred_at", "event_type", "status", "tick", "principal"]


def rows(models: Iterable[BaseModel]) -> list[dict[str, Any]]:
    return [model.model_dump(mode="json") for model in models]


def run(settings: ClientSettings, action: Callable[[Client], None]) -> None:
    client = Client(settings.url, token=settings.require_token())
    try:
        action(client)
    except CommandError as exc:
        raise click.ClickException(f"{exc.code}: {exc.message}") from exc
    except httpx.HTTPError as exc:
        raise click.ClickException(f"cannot reach {settings.url}: {exc}") from exc
    finally:
        client.close()


def console() -> Console:
    # Piped output keeps whole lines (no folding at 80 columns): ids are 32 characters and more.
    return Console(width=None if sys.stdout.isatty() else 250, highlight=False)


def _cell(value: Any, column: str) -> str:
    if value is None:
        return "-"
    if column == "health" and isinstance(value, dict):
        if value["status"] == "ACTIVE":
            return "ACTIVE" if value.get("lag_ms") is None else f"ACTIVE, lag {value['lag_ms']} ms"
        return f"STALLED since {_cell(value['since'], 'since_at')}: {value['failed_attempts']} failed attempts, {value['last_error']}"
    if column.endswith("_at") and isinstance(value, int):
        return datetime.datetime.fromtimestamp(value / 1000, datetime.UTC).isoformat(timespec="milliseconds")
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


def print_rows(records: Iterable[dict[str, Any]], columns: list[str], *, as_json: bool, title: str | None = None) -> None:
    """A table of `records`; with `as_json`, one JSON object per record and line."""
    if as_json:
        for record in records:
            click.echo(json.dumps(record))
        return
    table = Table(*columns, title=title, title_justify="left", header_style="bold")
    for record in records:
        table.add_row(*(_cell(record.get(column), column) for column in columns))
    console().print(table)


def print_record(record: dict[str, Any], *, as_json: bool, title: str) -> None:
    """One object as a two-column table; with `as_json`, as one JSON document."""
    if as_json:
        click.echo(json.dumps(record))
        return
    table = Table("field", "value", title=title, title_justify="left", header_style="bold", show_header=False)
    for key, value in record.items():
        table.add_row(key, json.dumps(value) if isinstance(value, (dict, list)) and key != "health" else _cell(value, key))
    console().print(table)


def print_state(state: WorldState, *, as_json: bool, title: str) -> None:
    """A state read's entities, each with its components by name (`{name: data}`); with `as_json`,
    one JSON object per entity and line."""
    records = [{"entity_id": e.entity_id, "components": {c.name: c.data for c in e.components}} for e in state.entities]
    print_rows(records, ["entity_id", "components"], as_json=as_json, title=title)


def submit(settings: ClientSettings, world_id: str, body: str, idempotency_key: str | None) -> None:
    try:
        request = json.loads(body)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="COMMAND") from exc
    if not isinstance(request, dict):
        raise click.BadParameter("a command is a JSON object", param_hint="COMMAND")

    def send(client: Client) -> None:
        click.echo(client.submit(world_id, request, idempotency_key=idempotency_key).model_dump_json())

    run(settings, send)


def history(settings: ClientSettings, world_id: str, status: str | None, as_json: bool) -> None:
    run(settings, lambda client: print_rows(rows(client.history(world_id, status=status)), RECORD_COLUMNS, as_json=as_json))


def redrive(settings: ClientSettings, world_id: str, command_id: str, principal: str | None, trusted: bool,
            idempotency_key: str | None, as_json: bool) -> None:  # fmt: skip
    def send(client: Client) -> None:
        answer = client.redrive(world_id, command_id, principal=principal, trusted=trusted,
                                idempotency_key=idempotency_key).model_dump(mode="json")  # fmt: skip
        print_record(answer, as_json=as_json, title=f"redrive of {command_id}")

    run(settings, send)


def command_show(settings: ClientSettings, world_id: str, command_id: str, principal: str | None, as_json: bool) -> None:
    def show(client: Client) -> None:
        record = client.command(world_id, command_id, principal=principal).model_dump(mode="json")
        try:
            trail: list[dict[str, Any]] | None = rows(
                client.audit(world_id, command_id=command_id, principal=principal or record["principal"])
            )
        except AuditUnavailableError:
            trail = None  # a server without an audit projection (the Worker): the record alone
        if as_json:
            click.echo(json.dumps({**record, "trail": trail}))
            return
        print_record(record, as_json=False, title=f"command {command_id} of world {world_id}")
        if trail is None:
            click.echo("trail: this server has no audit projection")
        else:
            print_rows(trail, EVENT_COLUMNS, as_json=False, title="outbox trail (audit projection; may lag the ledger)")

    run(settings, show)
