"""The remote audit path on loopback: a queue speaking Cloudflare's pull/ack contract, and an
Iceberg REST catalog + S3 store (`weed mini`), consumed by QueueProjector."""

from __future__ import annotations

import asyncio

import pytest

from archetype.audit.catalog import local_catalog, rest_catalog
from archetype.audit.queue import QueueApiError, QueueClient, QueueProjector
from archetype.audit.table import AuditTable
from archetype.commands import GetAuditHistory
from tests.audit.queue_server import LoopbackQueue, consume_once
from tests.audit.seaweed import BUCKET

pytestmark = pytest.mark.timeout(180)
# Longer than a consume takes on a busy machine (an Iceberg commit under load: seconds): leases
# expire when the test moves the queue's clock on, never while it runs.
VISIBILITY_MS = 60_000


def event(world_id: str, seq: int, command_id: str = "c", tick: int = 0) -> dict:
    return {
        "event_id": f"{world_id}/{seq}", "world_id": world_id, "event_seq": seq, "command_id": command_id,
        "event_type": "admitted", "status": "PENDING", "operation": "spawn", "tick": tick, "principal": "alice",
        "origin": "gateway", "occurred_at": 1_700_000_000_000 + seq, "payload": '{"attempts":0}',
    }  # fmt: skip


@pytest.fixture
def rest_table(weed, request):
    # one table per test: the REST catalog is shared by the module
    return AuditTable(rest_catalog(weed.iceberg, BUCKET, **weed.catalog_properties()), ("archetype", request.node.name[:60]))


@pytest.fixture
def queue():
    with LoopbackQueue(max_retries=2) as q:
        yield q


def client(queue: LoopbackQueue, token: str | None = None) -> QueueClient:
    return QueueClient(queue.account_id, queue.queue_id, token or queue.token, api=queue.api)


def seqs(table: AuditTable, world_id: str) -> list[int]:
    return [e.event_seq for e in table.history(GetAuditHistory(world_id=world_id, limit=1000))]


async def test_a_round_appends_once_through_the_rest_catalog_then_acknowledges(queue, rest_table):
    for seq in range(1, 251):
        queue.send(event("w1" if seq % 2 else "w2", seq))
    projector = QueueProjector(client(queue), rest_table, max_events=1_000)
    snapshots = len(rest_table.table.snapshots())
    assert await projector.consume_once() == 250
    assert len(rest_table.table.snapshots()) == snapshots + 1  # three pulls, ONE commit
    assert queue.pending() == 0 and len(queue.acked) == 250
    assert seqs(rest_table, "w1") == list(range(1, 251, 2))
    assert rest_table.table.location().startswith(f"s3://{BUCKET}/")
    assert await projector.consume_once() == 0
    await projector.queue.close()


async def test_an_unacknowledged_batch_is_redelivered_after_the_visibility_timeout(queue, rest_table):
    for seq in range(1, 6):
        queue.send(event("w1", seq))

    crashing = QueueProjector(client(queue), rest_table, visibility_timeout_ms=VISIBILITY_MS)

    async def crash(*args, **kwargs):
        raise ConnectionError("consumer died after the commit, before acknowledging")

    crashing.queue.ack = crash
    with pytest.raises(ConnectionError):
        await crashing.consume_once()
    survivor = QueueProjector(client(queue), rest_table, visibility_timeout_ms=VISIBILITY_MS)
    assert await survivor.consume_once() == 0  # still leased: nothing visible
    queue.advance(VISIBILITY_MS / 1000)  # the crashed consumer's leases expire
    assert await survivor.consume_once() == 5  # redelivered with new leases, appended again, acknowledged
    assert {m.attempts for m in queue.messages.values()} == set() and queue.pending() == 0
    assert rest_table.scan().num_rows == 10  # the table holds the redelivered copies ...
    assert seqs(rest_table, "w1") == [1, 2, 3, 4, 5]  # ... history shows each event once
    await survivor.queue.close()
    await crashing.queue.close()


async def test_a_failed_commit_retries_every_lease_and_loses_nothing(queue, tmp_path, monkeypatch):
    table = AuditTable(local_catalog(tmp_path))
    for seq in range(1, 4):
        queue.send(event("w1", seq))
    projector = QueueProjector(client(queue), table, retry_delay_seconds=0)

    def broken(events):
        raise OSError("catalog unreachable")

    monkeypatch.setattr(table, "append", broken)
    with pytest.raises(OSError):
        await projector.consume_once()
    assert queue.pending() == 3 and queue.acked == []
    monkeypatch.undo()
    assert await projector.consume_once() == 3
    assert queue.pending() == 0 and list(queue.dead_letters) == []
    assert seqs(table, "w1") == [1, 2, 3]
    await projector.queue.close()


async def test_a_message_that_is_not_an_event_is_retried_then_dead_lettered(queue, tmp_path):
    table = AuditTable(local_catalog(tmp_path))
    queue.send(event("w1", 1))
    queue.send({"hello": "world"})
    projector = QueueProjector(client(queue), table, retry_delay_seconds=0)
    assert await projector.consume_once() == 1
    for _ in range(3):
        assert await projector.consume_once() == 0
    assert queue.pending() == 0 and [m.body for m in queue.dead_letters] == ['{"hello": "world"}']
    assert seqs(table, "w1") == [1]
    await projector.queue.close()


async def test_a_wrong_token_is_an_error_not_an_empty_queue(queue, tmp_path):
    queue.send(event("w1", 1))
    projector = QueueProjector(client(queue, token="wrong"), AuditTable(local_catalog(tmp_path)))
    with pytest.raises(QueueApiError, match="401"):
        await projector.consume_once()
    assert queue.pending() == 1
    await projector.queue.close()


async def test_run_forever_drains_the_queue_until_stopped(queue, tmp_path):
    table = AuditTable(local_catalog(tmp_path))
    projector = QueueProjector(client(queue), table)
    stop = asyncio.Event()
    task = asyncio.create_task(projector.run_forever(stop, interval=0.05))
    for seq in range(1, 4):
        queue.send(event("w1", seq))
    deadline = asyncio.get_running_loop().time() + 60  # generous: commits are slow on a busy machine
    while queue.pending() and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(task, timeout=60)
    assert seqs(table, "w1") == [1, 2, 3]
    await projector.queue.close()


def test_archetype_audit_consume_once_from_the_command_line(queue, weed):
    for seq in range(1, 4):
        queue.send(event("cli", seq))
    done = consume_once(queue, weed)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "appended 3 events" and queue.pending() == 0
    table = AuditTable(rest_catalog(weed.iceberg, BUCKET, **weed.catalog_properties()))
    assert seqs(table, "cli") == [1, 2, 3]
