"""`archetype catalog`: maintenance of the local catalog itself (retention on demand)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click

from archetype.settings import ServeSettings


@click.group()
def catalog() -> None:
    """Maintain the local catalog of a storage directory (safe while `archetype serve` runs on it)."""


@catalog.command()
@click.option("--data", type=click.Path(path_type=Path), default=None,
              help="Storage directory of the local catalog (default archetype-data).")  # fmt: skip
@click.option("--keep-ticks", type=int, default=None, help="Tick manifests kept per world (default: serve's, 1000).")
@click.option("--idempotency-window", type=float, default=None,
              help="Seconds a settled command id keeps replaying before it is pruned (default: serve's, 86400).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per world, then the totals.")
def prune(data: Path | None, keep_ticks: int | None, idempotency_window: float | None, as_json: bool) -> None:
    """Prune every world now, by the retention policy `archetype serve` applies (docs/ledger.md, Retention)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from archetype.retention import RetentionPolicy, prune_all
    from local_catalog import CATALOG_FILE, open_local_authority

    config = ServeSettings.load(data=data, keep_ticks=keep_ticks, idempotency_window=idempotency_window)
    if not (config.data / CATALOG_FILE).is_file():
        raise click.ClickException(f"no catalog at {config.data / CATALOG_FILE}")

    async def run() -> dict[str, int]:
        authority = open_local_authority(config.data)
        try:
            worlds = len(await authority.list_worlds())
            columns = (TextColumn("pruning worlds"), BarColumn(), MofNCompleteColumn())
            with Progress(*columns, console=Console(stderr=True), transient=True, disable=as_json) as progress:
                task = progress.add_task("pruning", total=worlds)

                def done(world_id: str, removed: dict[str, int]) -> None:
                    progress.advance(task)
                    if as_json:
                        click.echo(json.dumps({"world_id": world_id, **removed}))

                return await prune_all(authority, RetentionPolicy.of(config), done)
        finally:
            await authority.close()

    totals = asyncio.run(run())
    if as_json:
        click.echo(json.dumps({"total": totals}))
    else:
        click.echo("pruned " + ", ".join(f"{count} {kind.replace('_', ' ')}" for kind, count in totals.items()))
