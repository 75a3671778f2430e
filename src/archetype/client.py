"""The public HTTP routes from the command line: `archetype submit`, `history`, `dead-letters`,
`worlds ...` and `command show` (CPython only: httpx, rich). Each prints what the server
answered, as a table or, with `--json`, as JSON (one object per line for lists); an error answer
exits 1 with its code."""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import click
import httpx
from rich.console import Console
from rich.table import Table

from archetype.commands.errors import AuditUnavailableError, CommandError
from archetype.remote import DEFAULT_TIMEOUT_S, raise_for_error
from archetype.settings import ClientSettings

PAGE = 500
RECORD_COLUMNS = ["sequence", "command_id", "principal", "operation", "scheduled_tick", "status", "attempts",
                  "max_attempts", "applied_tick", "last_error"]  # fmt: skip
WORLD_COLUMNS = ["world_id", "name", "status", "health", "tick_head", "outbox_pending", "created_at"]
EVENT_COLUMNS = ["event_seq", "occurred_at", "event_type", "status", "tick", "principal"]


class ApiClient:
    def __init__(self, url: str, token: str, *, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self._http = httpx.Client(base_url=url.rstrip("/"), headers={"Authorization": f"Bearer {token}"}, timeout=timeout)

    def _answer(self, response: httpx.Response) -> Any:
        raise_for_error(response)
        return response.json()

    def submit(self, world_id: str, request: dict[str, Any], idempotency_key: str | None = None) -> dict[str, Any]:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return self._answer(self._http.post(f"/worlds/{world_id}/commands", json=request, headers=headers))

    def _pages(self, path: str, key: str, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        after = 0
        while True:
            page = self._answer(self._http.get(path, params={**params, "after": after, "limit": PAGE}))
            yield from page[key]
            if page["next_after"] is None:
                return
            after = page["next_after"]

    def history(self, world_id: str, status: str | None = None) -> Iterator[dict[str, Any]]:
        return self._pages(f"/worlds/{world_id}/commands", "commands", {"status": status} if status else {})

    def worlds(self) -> list[dict[str, Any]]:
        return self._answer(self._http.get("/worlds"))["worlds"]

    def world(self, world_id: str) -> dict[str, Any]:
        return self._answer(self._http.get(f"/worlds/{world_id}"))

    def create_world(self, name: str, world_id: str | None) -> dict[str, Any]:
        return self._answer(self._http.post("/worlds", json={"name": name, "world_id": world_id}))

    def destroy_world(self, world_id: str) -> dict[str, Any]:
        return self._answer(self._http.delete(f"/worlds/{world_id}"))

    def command(self, world_id: str, command_id: str, principal: str | None) -> dict[str, Any]:
        params = {"principal": principal} if principal else {}
        return self._answer(self._http.get(f"/worlds/{world_id}/commands/{command_id}", params=params))

    def trail(self, world_id: str, command_id: str, principal: str | None) -> list[dict[str, Any]]:
        """The command's audit events (the projection: it may lag the ledger)."""
        params = {"command_id": command_id, **({"principal": principal} if principal else {})}
        return list(self._pages(f"/worlds/{world_id}/audit", "events", params))

    def redrive(self, world_id: str, command_id: str, principal: str | None, trusted: bool,
                idempotency_key: str | None) -> dict[str, Any]:  # fmt: skip
        params: dict[str, Any] = {"principal": principal} if principal else {}
        if trusted:
            params["trusted"] = "true"
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        path = f"/worlds/{world_id}/dead-letters/{command_id}/redrive"
        return self._answer(self._http.post(path, params=params, headers=headers))

    def close(self) -> None:
        self._http.close()


def run(settings: ClientSettings, action: Callable[[ApiClient], None]) -> None:
    client = ApiClient(settings.url, settings.require_token())
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
            return "ACTIVE"
        return f"STALLED since {_cell(value['since'], 'since_at')}: {value['failed_attempts']} failed attempts, {value['last_error']}"
    if column.endswith("_at") and isinstance(value, int):
        return datetime.datetime.fromtimestamp(value / 1000, datetime.UTC).isoformat(timespec="milliseconds")
    return str(value)


def print_rows(rows: Iterable[dict[str, Any]], columns: list[str], *, as_json: bool, title: str | None = None) -> None:
    """A table of `rows`; with `as_json`, one JSON object per row and line."""
    if as_json:
        for row in rows:
            click.echo(json.dumps(row))
        return
    table = Table(*columns, title=title, title_justify="left", header_style="bold")
    for row in rows:
        table.add_row(*(_cell(row.get(column), column) for column in columns))
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


def submit(settings: ClientSettings, world_id: str, body: str, idempotency_key: str | None) -> None:
    try:
        request = json.loads(body)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="COMMAND") from exc
    run(settings, lambda client: click.echo(json.dumps(client.submit(world_id, request, idempotency_key))))


def history(settings: ClientSettings, world_id: str, status: str | None, as_json: bool) -> None:
    run(settings, lambda client: print_rows(client.history(world_id, status), RECORD_COLUMNS, as_json=as_json))


def redrive(settings: ClientSettings, world_id: str, command_id: str, principal: str | None, trusted: bool,
            idempotency_key: str | None, as_json: bool) -> None:  # fmt: skip
    def send(client: ApiClient) -> None:
        answer = client.redrive(world_id, command_id, principal, trusted, idempotency_key)
        print_record(answer, as_json=as_json, title=f"redrive of {command_id}")

    run(settings, send)


def command_show(settings: ClientSettings, world_id: str, command_id: str, principal: str | None, as_json: bool) -> None:
    def show(client: ApiClient) -> None:
        record = client.command(world_id, command_id, principal)
        try:
            trail: list[dict[str, Any]] | None = client.trail(world_id, command_id, principal or record["principal"])
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
