"""The `archetype` command line (CPython only). Each subcommand lives beside what it drives."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from archetype.audit.cli import audit


@click.group()
def main() -> None:
    """Durable world commands: run, inspect and benchmark tick-based worlds."""


@main.command()
@click.option("--data", type=click.Path(path_type=Path), default=None,
              help="Storage directory (default: a fresh temporary directory).")  # fmt: skip
@click.option("--ticks", type=click.IntRange(1, 1000), default=6, show_default=True, help="Ticks to step.")
def demo(data: Path | None, ticks: int) -> None:
    """Step a small world through durable commands and print its ledger and outbox."""
    from archetype.demo import run_demo

    asyncio.run(run_demo(data, ticks))


SERVER = [
    click.option("--url", envvar="ARCHETYPE_URL", default="http://127.0.0.1:8787", show_default=True,
                 help="Server URL (env ARCHETYPE_URL)."),
    click.option("--token", envvar="ARCHETYPE_TOKEN", required=True, help="Bearer token (env ARCHETYPE_TOKEN)."),
]  # fmt: skip


F = TypeVar("F", bound=Callable[..., Any])


def _server_options(fn: F) -> F:
    for option in reversed(SERVER):
        fn = option(fn)
    return fn


@main.command()
@click.option("--data", type=click.Path(path_type=Path), default=Path("archetype-data"), show_default=True,
              help="Storage directory of the local catalog.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8787, show_default=True, help="Port (0: any free port).")
@click.option("--tokens", "tokens_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="JSON token table {token: {principal, roles}} (default: $ARCHETYPE_TOKENS, else one printed admin token).")
@click.option("--tick-rate", type=click.FloatRange(0.1, 1000), default=10.0, show_default=True, help="Ticks per second.")
@click.option("--quota", type=click.IntRange(1), default=None,
              help="Commands per actor, world and target tick (default: the API default, 1000).")
@click.option("--module", "modules", multiple=True, help="Import this module (components; optional setup(runtime)).")
@click.option("--synchronous", type=click.Choice(["FULL", "NORMAL"]), default="FULL", show_default=True,
              help="SQLite durability of the catalog.")
@click.option("--runner-id", default=None,
              help="This runner's stable identity in the catalog (default: serve@<hostname>). A restarted runner "
                   "with the same id recovers its own leases at once; two live runners never share one.")
@click.option("--log-level", default="warning", show_default=True, help="uvicorn log level.")  # fmt: skip
def serve(**options: Any) -> None:
    """Serve the HTTP API over the local catalog and step every active world."""
    from archetype.server import RunnerBusyError, ServeConfig, serve

    options["modules"] = tuple(options["modules"])
    try:
        asyncio.run(serve(ServeConfig(**{name: value for name, value in options.items() if value is not None})))
    except RunnerBusyError as exc:
        raise click.UsageError(str(exc)) from None


@main.command()
@_server_options
@click.argument("world_id")
@click.argument("command", default="-")
@click.option("--idempotency-key", default=None, help="Becomes the command id; resubmitting it is a replay.")
def submit(url: str, token: str, world_id: str, command: str, idempotency_key: str | None) -> None:
    """Submit one command (a SubmitCommandRequest as JSON, or - for stdin) to a world."""
    from archetype.client import submit as run

    # click 8.5 deprecated get_text_stream (now a module __getattr__, typed `object`; removed in click 9)
    body = click.get_text_stream("stdin").read() if command == "-" else command  # type: ignore[operator]
    run(url, token, world_id, body, idempotency_key)


@main.command()
@_server_options
@click.argument("world_id")
@click.option("--status", type=click.Choice(["PENDING", "LEASED", "RETRYABLE", "APPLIED", "REJECTED", "DEAD_LETTER",
              "CANCELLED"]), default=None, help="Only commands in this status.")  # fmt: skip
def history(url: str, token: str, world_id: str, status: str | None) -> None:
    """Print a world's command ledger in admission order."""
    from archetype.client import history as run

    run(url, token, world_id, status)


@main.command("dead-letters")
@_server_options
@click.argument("world_id")
def dead_letters(url: str, token: str, world_id: str) -> None:
    """Print a world's dead-lettered commands with their last error."""
    from archetype.client import dead_letters as run

    run(url, token, world_id)


@main.command()
@click.option("--small", type=click.IntRange(1_000), default=10_000, show_default=True, help="Rows in the small ledger.")
@click.option("--large", type=click.IntRange(1_000), default=1_000_000, show_default=True, help="Rows in the large ledger.")
@click.option("--single", type=click.IntRange(10), default=1_000, show_default=True, help="Single admissions per run.")
@click.option("--batches", type=click.IntRange(1), default=5, show_default=True, help="Batches of 1,000 per run.")
@click.option("--repeat", type=click.IntRange(1), default=3, show_default=True, help="Runs per figure; the best counts.")
@click.option("--data", type=click.Path(path_type=Path), default=None,
              help="Directory for the ledgers (default: a fresh temporary directory).")  # fmt: skip
def bench(small: int, large: int, single: int, batches: int, repeat: int, data: Path | None) -> None:
    """Benchmark the ledger against raw sqlite3 and check the performance targets (exit 1 on a miss)."""
    from archetype.bench import run_bench

    if not asyncio.run(run_bench(small, large, single, batches, repeat, data)):
        raise SystemExit(1)


main.add_command(audit)

if __name__ == "__main__":
    main()
