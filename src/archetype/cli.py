"""The `archetype` command line (CPython only). Each subcommand lives beside what it drives."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click


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


if __name__ == "__main__":
    main()
