"""The `archetype` command line (CPython only). Each subcommand lives beside what it drives.

Settings come from flags, `ARCHETYPE_*` environment variables and a config file
(archetype.settings); a configuration mistake is one line on stderr and exit code 2.
"""

from __future__ import annotations

import asyncio
import functools
import sys
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from archetype.audit.cli import audit
from archetype.canonical import MAX_SAFE_INTEGER
from archetype.catalog_cli import catalog
from archetype.components_cli import components
from archetype.settings import CONFIG_ENV, ClientSettings, ConfigurationError, RunnerSettings, ServeSettings, use_config
from archetype.world.tick_mode import DEFAULT_TICK_INTERVAL_MS, MAX_TICK_INTERVAL_MS, TICK_MODES, TickMode

if TYPE_CHECKING:
    from archetype.client import Client

STATUSES = ["PENDING", "LEASED", "RETRYABLE", "APPLIED", "REJECTED", "DEAD_LETTER", "CANCELLED"]
JSON = click.option("--json", "as_json", is_flag=True, help="JSON instead of a table (lists: one object per line).")


class ConfigurationProblem(click.ClickException):
    exit_code = 2

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.message}", file=file or sys.stderr)


class ServeFailure(ConfigurationProblem):
    exit_code = 3


class Archetype(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ConfigurationError as exc:
            raise ConfigurationProblem(str(exc)) from None


@click.group(cls=Archetype, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version("archetype"), "--version", "-V", prog_name="archetype")
@click.option("--config", "config", type=click.Path(dir_okay=False, path_type=Path), envvar=CONFIG_ENV, default=None,
              help=f"Settings file ([client] and [serve] tables; default ./archetype.toml if present; env {CONFIG_ENV}).")  # fmt: skip
def main(config: Path | None) -> None:
    """Durable world commands: run, inspect and benchmark tick-based worlds."""
    use_config(config)


@main.command()
@click.option("--data", type=click.Path(path_type=Path), default=None,
              help="Storage directory (default: a fresh temporary directory).")  # fmt: skip
@click.option("--ticks", type=click.IntRange(1, 1000), default=6, show_default=True, help="Ticks to step.")
def demo(data: Path | None, ticks: int) -> None:
    """Step a small world through durable commands and print its ledger and outbox."""
    from archetype.demo import run_demo

    asyncio.run(run_demo(data, ticks))


def client_options(fn: Any) -> Any:
    """--url and --token; the command gets `settings: ClientSettings` in their place."""

    @functools.wraps(fn)
    def with_settings(url: str | None, token: str | None, **kwargs: Any) -> Any:
        return fn(settings=ClientSettings.load(url=url, token=token), **kwargs)

    with_settings = click.option("--token", default=None, help="Bearer token (env ARCHETYPE_TOKEN).")(with_settings)
    return click.option("--url", default=None, help="Server URL (env ARCHETYPE_URL; default http://127.0.0.1:8787).")(with_settings)


@main.command()
@click.option("--data", type=click.Path(path_type=Path), default=None,
              help="Storage directory of the local catalog (default archetype-data).")
@click.option("--host", default=None, help="Address to listen on (default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port (default 8787; 0: any free port).")
@click.option("--tokens", "tokens_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="JSON token table {token: {principal, roles}} (default: $ARCHETYPE_TOKENS, else one printed admin token).")
@click.option("--tick-rate", type=float, default=None,
              help="Runner passes per second (default 10; finer while a world with a shorter interval ticks), and the "
                   "ticks per second of worlds created before tick modes (docs/ledger.md, Tick modes).")
@click.option("--quota", type=int, default=None, help="Commands per actor, world and target tick (default 1000).")
@click.option("--module", "modules", multiple=True, help="Import this module (components; optional setup(runtime)).")
@click.option("--synchronous", default=None, help="SQLite durability of the catalog: FULL (default) or NORMAL.")
@click.option("--runner-id", default=None,
              help="This runner's stable identity in the catalog (default: serve@<hostname>). A restarted runner "
                   "with the same id recovers its own leases at once; two live runners never share one. Runners "
                   "with distinct ids on one --data split its worlds between them.")
@click.option("--world-lease", type=float, default=None,
              help="Seconds a world lease lasts unrenewed (default 10): how soon a dead runner's worlds are taken over.")
@click.option("--hang-timeout", type=float, default=None,
              help="Seconds the stepping process may stay silent before serve takes it for hung, kills and restarts it (default 10).")
@click.option("--log-level", default=None, help="Log level: critical, error, warning (default), info, debug.")
@click.option("--log-format", default=None, help="text (default) or json: one JSON object per log line, one per request.")
@click.option("--body-timeout", type=float, default=None, help="Seconds a request's head, then its body, may take to arrive (default 20).")
@click.option("--metrics-worlds", type=int, default=None,
              help="Worlds with their own series in /metrics (default 50; the rest are summed as world='_other').")  # fmt: skip
@click.option("--keep-ticks", type=int, default=None, help="Tick manifests kept per world (default 1000; docs/ledger.md, Retention).")
@click.option("--idempotency-window", type=float, default=None,
              help="Seconds a settled command id keeps replaying before it is pruned and may be reused (default 86400).")
@click.option("--prune-interval", type=float, default=None, help="Seconds between retention runs (default 60).")
@click.option("--telemetry/--no-telemetry", default=None,
              help="FastAPI's OpenTelemetry spans, metrics and logs for every request, where an OpenTelemetry SDK is "
                   "configured (default off: the hot routes are then answered ahead of the framework).")
def serve(**flags: Any) -> None:
    """Serve the HTTP API, the dashboard and /metrics over the local catalog, and step every active world."""
    import uvloop

    from archetype.server import serve as run
    from archetype.stepper import StepperFailedError

    flags["modules"] = tuple(flags["modules"]) or None
    try:
        # libuv's loop: asyncio's own (its selector, transports and handles, in Python) was a third
        # of the HTTP process's CPU per admission request (docs/performance.md, HTTP admission)
        uvloop.run(run(ServeSettings.load(**flags)))
    except StepperFailedError as exc:
        raise ServeFailure(str(exc)) from None


@main.command()
@click.option("--url", default=None, help="The server to step worlds of (default http://127.0.0.1:8787).")
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A file holding an operator token of that server (required).")
@click.option("--runner-id", default=None,
              help="This runner's stable identity in the server's runner registry (default: runner@<hostname>). A "
                   "restarted runner with the same id resumes its own world leases at once; two live runners never "
                   "share one.")
@click.option("--module", "modules", multiple=True, help="Import this module (components; optional setup(runtime)).")
@click.option("--tick-rate", type=float, default=None,
              help="Runner passes per second (default 10), and the ticks per second of worlds created before tick modes "
                   "(give it the server's, for one clock).")
@click.option("--world-lease", type=float, default=None,
              help="Seconds its world leases and registration last unrenewed (default 10).")
@click.option("--log-level", default=None, help="Log level: critical, error, warning (default), info, debug.")
@click.option("--log-format", default=None, help="text (default) or json: one JSON object per log line.")
def runner(**flags: Any) -> None:
    """Step a share of a server's worlds over HTTP, beside its own runners (they split the worlds)."""
    from archetype.remote_runner import run_remote

    flags["modules"] = tuple(flags["modules"]) or None
    asyncio.run(run_remote(RunnerSettings.load(**flags)))


@main.command()
@client_options
@click.argument("world_id")
@click.argument("command", default="-")
@click.option("--idempotency-key", default=None, help="Becomes the command id; resubmitting it is a replay.")
def submit(settings: ClientSettings, world_id: str, command: str, idempotency_key: str | None) -> None:
    """Submit one command (a SubmitCommandRequest as JSON, or - for stdin) to a world."""
    from archetype.client_cli import submit as run

    run(settings, world_id, sys.stdin.read() if command == "-" else command, idempotency_key)


@main.command()
@client_options
@click.argument("world_id")
@click.option("--status", type=click.Choice(STATUSES), default=None, help="Only commands in this status.")
@JSON
def history(settings: ClientSettings, world_id: str, status: str | None, as_json: bool) -> None:
    """Print a world's command ledger in admission order (your own commands; an analyst's: everyone's)."""
    from archetype.client_cli import history as run

    run(settings, world_id, status, as_json)


class ListByDefault(click.Group):
    """A group whose first subcommand is implied: `dead-letters W` is `dead-letters list W`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["list", *args]
        return super().parse_args(ctx, args)


@main.group("dead-letters", cls=ListByDefault)
def dead_letters() -> None:
    """A world's dead-lettered commands: list them (the default), redrive one."""


@dead_letters.command("list")
@client_options
@click.argument("world_id")
@JSON
def dead_letters_list(settings: ClientSettings, world_id: str, as_json: bool) -> None:
    """Print a world's dead-lettered commands with their last error."""
    from archetype.client_cli import history as run

    run(settings, world_id, "DEAD_LETTER", as_json)


@dead_letters.command("redrive")
@client_options
@click.argument("world_id")
@click.argument("command_id")
@click.option("--principal", default=None, help="Whose dead letter (default: your own).")
@click.option("--trusted", is_flag=True, help="A dead letter of the trusted (in-process) scope.")
@click.option("--idempotency-key", default=None, help="The new command's id (default <command_id>.redrive); a retry replays.")
@JSON
def dead_letters_redrive(settings: ClientSettings, world_id: str, command_id: str, principal: str | None, trusted: bool,
                         idempotency_key: str | None, as_json: bool) -> None:  # fmt: skip
    """Redrive a dead letter (operator): a new command, same operation, a fresh attempt budget, due next tick."""
    from archetype.client_cli import redrive as run

    run(settings, world_id, command_id, principal, trusted, idempotency_key, as_json)


@main.group()
def worlds() -> None:
    """List, create, show and destroy worlds of a running server."""


@worlds.command("list")
@client_options
@JSON
def worlds_list(settings: ClientSettings, as_json: bool) -> None:
    """Every world with its status, tick head, tick mode and interval, and audit lag (outbox_pending)."""
    from archetype.client_cli import WORLD_COLUMNS, print_rows, rows, run

    run(settings, lambda client: print_rows(rows(client.worlds()), WORLD_COLUMNS, as_json=as_json))


@worlds.command("create")
@client_options
@click.argument("name")
@click.option("--id", "world_id", default=None, help="The world id (default: generated).")
@click.option("--tick-mode", type=click.Choice(TICK_MODES), default=None,
              help="lockstep (default): every tick runs, none skipped; realtime: wall-clock ticks, empty ones coalesced.")
@click.option("--tick-interval-ms", type=click.IntRange(0, MAX_TICK_INTERVAL_MS), default=None,
              help=f"The length of a tick (default {DEFAULT_TICK_INTERVAL_MS}); lockstep 0: back to back, as fast as it runs.")
@JSON
def worlds_create(settings: ClientSettings, name: str, world_id: str | None, tick_mode: TickMode | None,
                  tick_interval_ms: int | None, as_json: bool) -> None:  # fmt: skip
    """Create a world (admin); an identical retry answers the same world. Its tick mode and interval
    are for good (docs/ledger.md, "Tick modes")."""
    from archetype.client_cli import print_record, run

    def create(client: Client) -> None:
        made = client.create_world(name, world_id=world_id, tick_mode=tick_mode, tick_interval_ms=tick_interval_ms)
        print_record(made.model_dump(mode="json"), as_json=as_json, title="created")

    run(settings, create)


@worlds.command("show")
@client_options
@click.argument("world_id")
@click.option("--tick", type=click.IntRange(-1, MAX_SAFE_INTEGER), default=None,
              help="Show the world's entities as it published them at this tick (a tick of its retention window).")
@JSON
def worlds_show(settings: ClientSettings, world_id: str, tick: int | None, as_json: bool) -> None:
    """One world: status, tick head and mode, health (a lockstep world's lag), timestamps, audit lag;
    with --tick, its entities at that tick instead (docs/storage.md, "State at a tick")."""
    from archetype.client_cli import print_record, print_state, run

    if tick is not None:
        run(settings, lambda client: print_state(client.state(world_id, tick=tick), as_json=as_json,
                                                 title=f"world {world_id} at tick {tick}"))  # fmt: skip
        return
    run(settings, lambda client: print_record(client.world(world_id).model_dump(mode="json"), as_json=as_json, title=f"world {world_id}"))


@worlds.command("retry")
@client_options
@click.argument("world_id")
@JSON
def worlds_retry(settings: ClientSettings, world_id: str, as_json: bool) -> None:
    """Retry a STALLED world now, once its cause is fixed (operator): the runner ends its backoff
    within a second. A world that is not stalled is left as it is."""
    from archetype.client_cli import print_record, run

    def retry(client: Client) -> None:
        print_record(client.retry_world(world_id).model_dump(mode="json"), as_json=as_json, title=f"world {world_id}")

    run(settings, retry)


@worlds.command("fork")
@client_options
@click.argument("world_id")
@click.option("--tick", type=click.IntRange(-1, MAX_SAFE_INTEGER), required=True,
              help="Fork the world as it was at this tick (a tick of its retention window).")
@click.option("--name", required=True, help="The fork's name.")
@click.option("--id", "fork_world_id", default=None, help="The fork's world id (default: generated).")
@click.option("--with-open-commands", is_flag=True, help="Copy the commands scheduled after the tick that were open at it.")
@JSON
def worlds_fork(settings: ClientSettings, world_id: str, tick: int, name: str, fork_world_id: str | None,
                with_open_commands: bool, as_json: bool) -> None:  # fmt: skip
    """Fork a world at a tick (admin): a new world of its state then, run on by its own ledger
    (docs/ledger.md, "Forks")."""
    from archetype.client_cli import print_record, run

    def fork(client: Client) -> None:
        made = client.fork_world(world_id, tick, name, fork_world_id=fork_world_id, with_open_commands=with_open_commands)
        print_record(made.model_dump(mode="json"), as_json=as_json, title="forked")

    run(settings, fork)


@worlds.command("destroy")
@client_options
@click.argument("world_id")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@JSON
def worlds_destroy(settings: ClientSettings, world_id: str, yes: bool, as_json: bool) -> None:
    """Destroy a world (admin): admission closes and its open commands become CANCELLED."""
    from archetype.client_cli import print_record, run

    if not yes:
        click.confirm(f"destroy world {world_id!r} and cancel its open commands?", abort=True)
    run(settings, lambda client: print_record(client.destroy_world(world_id).model_dump(mode="json"), as_json=as_json, title="destroyed"))


@main.group()
def command() -> None:
    """Inspect one command of a running server."""


@command.command("show")
@client_options
@click.argument("world_id")
@click.argument("command_id")
@click.option("--principal", default=None,
              help="Another principal's command (analysts, operators, admins; without it: yours, else the one principal's that has it).")
@JSON
def command_show(settings: ClientSettings, world_id: str, command_id: str, principal: str | None, as_json: bool) -> None:
    """A command's record and its outbox trail (the audit projection's events for it)."""
    from archetype.client_cli import command_show as run

    run(settings, world_id, command_id, principal, as_json)


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
main.add_command(catalog)
main.add_command(components)

if __name__ == "__main__":
    main()
