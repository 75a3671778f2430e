"""The public HTTP routes from the command line: `archetype submit`, `history` and `dead-letters`
(CPython only: httpx). Each prints what the server answered; an error answer exits 1 with its code."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import click
import httpx

from archetype.commands.errors import CommandError
from archetype.remote import DEFAULT_TIMEOUT_S, raise_for_error

PAGE = 500


class ApiClient:
    def __init__(self, url: str, token: str, *, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self._http = httpx.Client(base_url=url.rstrip("/"), headers={"Authorization": f"Bearer {token}"}, timeout=timeout)

    def _answer(self, response: httpx.Response) -> Any:
        raise_for_error(response)
        return response.json()

    def submit(self, world_id: str, request: dict[str, Any], idempotency_key: str | None = None) -> dict[str, Any]:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return self._answer(self._http.post(f"/worlds/{world_id}/commands", json=request, headers=headers))

    def history(self, world_id: str, status: str | None = None) -> Iterator[dict[str, Any]]:
        after = 0
        while True:
            params: dict[str, Any] = {"after": after, "limit": PAGE, **({"status": status} if status else {})}
            page = self._answer(self._http.get(f"/worlds/{world_id}/commands", params=params))
            yield from page["commands"]
            if page["next_after"] is None:
                return
            after = page["next_after"]

    def close(self) -> None:
        self._http.close()


def _run(url: str, token: str, action: Any) -> None:
    client = ApiClient(url, token)
    try:
        action(client)
    except CommandError as exc:
        raise click.ClickException(f"{exc.code}: {exc.message}") from exc
    except httpx.HTTPError as exc:
        raise click.ClickException(f"cannot reach {url}: {exc}") from exc
    finally:
        client.close()


def submit(url: str, token: str, world_id: str, body: str, idempotency_key: str | None) -> None:
    try:
        request = json.loads(body)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="COMMAND") from exc
    _run(url, token, lambda client: click.echo(json.dumps(client.submit(world_id, request, idempotency_key))))


def _print_records(records: Iterator[dict[str, Any]], *, errors: bool) -> None:
    for r in records:
        line = (
            f"#{r['sequence']:<5} {r['command_id']:<24} {r['operation']:<17} tick {r['scheduled_tick']:<6} "
            f"{r['status']:<11} attempts {r['attempts']}/{r['max_attempts']} applied_tick={r['applied_tick']}"
        )
        click.echo(line + (f"  {r['last_error']}" if errors and r["last_error"] else ""))


def history(url: str, token: str, world_id: str, status: str | None) -> None:
    _run(url, token, lambda client: _print_records(client.history(world_id, status), errors=True))


def dead_letters(url: str, token: str, world_id: str) -> None:
    _run(url, token, lambda client: _print_records(client.history(world_id, "DEAD_LETTER"), errors=True))
