"""`archetype audit`: project the local outbox into the audit table, query it, watch lag, maintain it."""

from __future__ import annotations

import asyncio
import collections
import datetime
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:  # the commands import the runtime only when they run
    from archetype.commands.audit_history import AuditEvent, GetAuditHistory
    from archetype.runtime import Runtime

STATUSES = ["PENDING", "LEASED", "RETRYABLE", "APPLIED", "REJECTED", "DEAD_LETTER", "CANCELLED"]
DATA = click.option("--data", type=click.Path(path_type=Path), default=Path("archetype-data"), show_default=True,
                    help="Storage directory of the local catalog (the audit table lives in <data>/audit).")  # fmt: skip


@click.group()
def audit() -> None:
    """The audit projection of the local catalog (Iceberg, under <data>/audit)."""


async def _with_runtime(data: Path, work: Callable[[Runtime], Awaitable[None]]) -> None:
    from archetype.runtime import Runtime

    if not data.is_dir():
        raise click.ClickException(f"no storage directory at {data}")
    async with await Runtime.open_local(data) as rt:
        return await work(rt)


@audit.command()
@DATA
@click.option("--batch-size", type=click.IntRange(1, 1_000_000), default=5_000, show_default=True,
              help="Events per Iceberg commit.")  # fmt: skip
def project(data: Path, batch_size: int) -> None:
    """Project every world's pending outbox events once, then exit."""

    async def work(rt: Runtime) -> None:
        rt.audit.batch_size = batch_size
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        pending = sum(lag["pending"] for lag in await rt.audit.lag())
        columns = (TextColumn("projecting"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
        with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
            task = progress.add_task("projecting", total=pending)
            appended = await rt.audit.project_once(progress=lambda n: progress.advance(task, n))
        click.echo(f"appended {sum(appended.values())} events from {len(appended)} world(s)")

    asyncio.run(_with_runtime(data, work))


@audit.command()
@DATA
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def lag(data: Path, as_json: bool) -> None:
    """Print, per world, the committed and projected outbox sequence and what is pending."""
    from archetype.client_cli import print_rows

    async def work(rt: Runtime) -> None:
        print_rows(await rt.audit.lag(), ["world_id", "committed_seq", "projected_seq", "pending"], as_json=as_json)

    asyncio.run(_with_runtime(data, work))


@audit.command()
@DATA
@click.argument("world_id")
@click.option("--tick-from", type=click.IntRange(0), default=None, help="Only events at or after this tick.")
@click.option("--tick-to", type=click.IntRange(0), default=None, help="Only events at or before this tick.")
@click.option("--principal", default=None, help="Only events of this actor.")
@click.option("--command-id", default=None, help="Only events of this command.")
@click.option("--status", type=click.Choice(STATUSES), default=None, help="Only events leaving the command in this status.")
@click.option("--after", "after_event_seq", type=click.IntRange(0), default=0, help="Only events after this sequence.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=100, show_default=True,
              help="At most this many events: the oldest, or with --newest-first the newest.")
@click.option("--newest-first", is_flag=True, help="The newest events first (--limit of them).")
@click.option("--tail", type=click.IntRange(1, 10_000), default=None,
              help="The newest N events, oldest first (as tail(1) shows a file's end).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def query(data: Path, as_json: bool, newest_first: bool, tail: int | None, **filters: Any) -> None:
    """Print a world's audit history (GetAuditHistory over the projection), oldest first."""
    from archetype.commands import GetAuditHistory

    try:
        op = GetAuditHistory(**filters)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc

    async def work(rt: Runtime) -> None:
        if tail is None and not newest_first:
            events = await rt.dispatcher.apply(op)
        else:
            events = await _newest(rt, op, tail or op.limit)
            if newest_first:
                events.reverse()
        for event in events:
            if as_json:
                click.echo(event.model_dump_json())
                continue
            at = datetime.datetime.fromtimestamp(event.occurred_at / 1000, datetime.UTC).isoformat(timespec="milliseconds")
            click.echo(
                f"{event.event_seq:>8} {at} {event.command_id:<24} {event.event_type:<15} {event.status.value:<11} "
                f"{event.operation:<17} tick={event.tick} by={event.principal or '-'} {json.loads(event.payload).get('error') or ''}"
            )

    asyncio.run(_with_runtime(data, work))


async def _newest(rt: Runtime, op: GetAuditHistory, count: int) -> list[AuditEvent]:
    """The last `count` events `op` selects, oldest first: the table is read in sequence order
    (pages of the largest size), keeping the newest, since its reader answers oldest first."""
    from archetype.commands.audit_history import MAX_HISTORY_LIMIT

    newest: collections.deque[AuditEvent] = collections.deque(maxlen=count)
    page = op.model_copy(update={"limit": MAX_HISTORY_LIMIT})
    while events := await rt.dispatcher.apply(page):
        newest.extend(events)
        if len(events) < MAX_HISTORY_LIMIT:
            break
        page = page.model_copy(update={"after_event_seq": events[-1].event_seq})
    return list(newest)


@audit.command()
@DATA
@click.option("--min-files", type=click.IntRange(2), default=2, show_default=True,
              help="Compact partitions holding at least this many data files.")
@click.option("--expire-after", type=click.FloatRange(0), default=3600.0, show_default=True,
              help="Expire snapshots older than this many seconds ...")
@click.option("--keep-last", type=click.IntRange(1), default=5, show_default=True, help="... except the newest ones.")
@click.option("--orphans-after", type=click.FloatRange(0), default=3600.0, show_default=True,
              help="Remove files no snapshot references once they are this many seconds old (younger ones may "
                   "belong to a projector's commit in flight: keep it above the longest commit while one runs).")
def compact(data: Path, min_files: int, expire_after: float, keep_last: int, orphans_after: float) -> None:
    """Compact small files (sorted by command id, duplicates removed), expire old snapshots, remove orphan files."""

    async def work(rt: Runtime) -> None:
        done = await rt.audit.maintain(min_files=min_files, older_than_ms=int(expire_after * 1000), keep_last=keep_last,
                                       orphans_older_than_ms=int(orphans_after * 1000))  # fmt: skip
        c = done.compaction
        click.echo(
            f"compacted {c.partitions} partition(s): {c.files_before} -> {c.files_after} files, "
            f"{c.duplicates_removed} duplicate(s) removed, {c.skipped} skipped (concurrent commit); "
            f"{done.snapshots_expired} snapshot(s) expired, {done.orphans_removed} orphan file(s) removed"
        )

    asyncio.run(_with_runtime(data, work))


@audit.command()
@click.option("--account-id", envvar="CLOUDFLARE_ACCOUNT_ID", required=True, help="Cloudflare account (env CLOUDFLARE_ACCOUNT_ID).")
@click.option("--queue-id", envvar="ARCHETYPE_AUDIT_QUEUE_ID", required=True, help="The audit queue (env ARCHETYPE_AUDIT_QUEUE_ID).")
@click.option("--queue-token", envvar="CLOUDFLARE_QUEUES_TOKEN", required=True,
              help="API token with Queues Write (env CLOUDFLARE_QUEUES_TOKEN).")
@click.option("--queue-api", default=None, help="Queues API base (default: Cloudflare's).")
@click.option("--catalog-uri", envvar="ARCHETYPE_AUDIT_CATALOG_URI", required=True,
              help="Iceberg REST catalog URI, e.g. R2 Data Catalog's (env ARCHETYPE_AUDIT_CATALOG_URI).")
@click.option("--warehouse", envvar="ARCHETYPE_AUDIT_WAREHOUSE", required=True, help="Warehouse (env ARCHETYPE_AUDIT_WAREHOUSE).")
@click.option("--catalog-token", envvar="ARCHETYPE_AUDIT_CATALOG_TOKEN", default=None,
              help="Bearer token of the catalog (env ARCHETYPE_AUDIT_CATALOG_TOKEN).")
@click.option("--catalog-property", "properties", multiple=True, metavar="KEY=VALUE",
              help="Extra pyiceberg catalog property (repeatable), e.g. s3.endpoint=http://127.0.0.1:8333.")
@click.option("--once", is_flag=True, help="Consume one round, print how many events were appended, exit.")
@click.option("--interval", type=click.FloatRange(0.05), default=1.0, show_default=True, help="Seconds between idle polls.")
def consume(account_id: str, queue_id: str, queue_token: str, queue_api: str | None, catalog_uri: str, warehouse: str,
            catalog_token: str | None, properties: tuple[str, ...], once: bool, interval: float) -> None:  # fmt: skip
    """Consume the Durable Objects' audit queue (HTTP pull) into the Iceberg REST catalog."""
    import signal

    from archetype.audit.catalog import rest_catalog
    from archetype.audit.queue import CLOUDFLARE_API, QueueClient, QueueProjector
    from archetype.audit.table import AuditTable

    extra = dict(p.split("=", 1) for p in properties if "=" in p)
    if len(extra) != len(properties):
        raise click.BadParameter("each --catalog-property is KEY=VALUE", param_hint="--catalog-property")

    async def run() -> None:
        table = AuditTable(rest_catalog(catalog_uri, warehouse, token=catalog_token, **extra))
        queue = QueueClient(account_id, queue_id, queue_token, api=queue_api or CLOUDFLARE_API)
        projector = QueueProjector(queue, table)
        try:
            if once:
                click.echo(f"appended {await projector.consume_once()} events")
                return
            stop = asyncio.Event()
            for sig in (signal.SIGTERM, signal.SIGINT):
                asyncio.get_running_loop().add_signal_handler(sig, stop.set)
            await projector.run_forever(stop, interval)
        finally:
            await queue.close()

    asyncio.run(run())
