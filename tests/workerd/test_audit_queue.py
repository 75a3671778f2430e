"""The audit path end to end on the real runtime: the objects' queue binding sends to the session's
LoopbackQueue (workerd posts each `sendBatch` to it, tests/audit/queue_server.py), and `archetype
audit consume` pulls from it into an Iceberg REST catalog (`weed mini`); what the objects do when
the queue fails, hangs or is slow; their Python logs in workerd's output, one JSON line each."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from pyiceberg.expressions import EqualTo

from archetype.audit.catalog import rest_catalog
from archetype.audit.queue import QueueClient, QueueProjector
from archetype.audit.table import AuditTable
from archetype.commands import GetAuditHistory
from archetype.remote import HttpAuthority
from tests.audit.queue_server import consume_once
from tests.audit.seaweed import BUCKET
from tests.support.workerd.python_worker import OPERATOR_TOKEN, VARS
from tests.workerd.test_real_runtime import SETTLE_S, mover, wait_for, world

pytestmark = pytest.mark.timeout(420)

RETRY_DELAY_S = int(VARS["AUDIT_RETRY_DELAY_MS"]) / 1000
FAR_TICK = 10**9  # commands that stay open: one `admitted` event each, and an empty tick


@pytest.fixture
def queue(workerd_python):
    """The session's audit queue, taking pushes again when the test is done."""
    yield workerd_python.queue
    workerd_python.queue.push_delay_s = 0.0
    workerd_python.queue.fail_pushes(None)


def committed_seq(url: str, world_id: str) -> int:
    async def read() -> int:
        authority = HttpAuthority(url, token=OPERATOR_TOKEN)
        try:
            return int((await authority.watermark(world_id))["committed_seq"])
        finally:
            await authority.close()

    return asyncio.run(read())


def appended(queue, weed) -> int:
    """One round of `archetype audit consume --once` against the session's queue; the events it appended."""
    done = consume_once(queue, weed)
    assert done.returncode == 0, done.stderr[-4000:]
    return int(done.stdout.split()[1])  # "appended N events"


def delivery_logs(workerd_python, world_id: str) -> list[tuple[str, str]]:
    return [(r["level"], r["message"]) for r in workerd_python.json_logs()
            if r.get("world_id") == world_id and r.get("logger") == "durable_world.world_object"
            and r["message"].startswith("audit delivery")]  # fmt: skip


def pushes_of(queue, world_id: str) -> list:
    return [push for push in queue.pushes if world_id in push.world_ids]


def test_every_event_lands_once_in_iceberg_across_a_consumer_crash_a_queue_outage_and_a_restart(
        workerd_python, admin, queue, weed):  # fmt: skip
    edge = world("edge")
    admin.create_world("audited", world_id=edge)

    def submit_and_send(*keys: str) -> None:
        for key in keys:
            admin.submit(edge, mover(), idempotency_key=key)
            admin.wait(edge, key, timeout=SETTLE_S)
        wait_for(lambda: admin.world(edge).outbox_pending == 0 or None, "the events to reach the queue")

    # 1. the objects push, `archetype audit consume` lands them in the table
    submit_and_send("k1", "k2")
    assert pushes_of(queue, edge) and {p.outcome for p in pushes_of(queue, edge)} == {"stored"}
    assert appended(queue, weed) >= 4  # admitted + applied, twice (and whatever other tests sent)

    # 2. the consumer dies after its commit, before acknowledging: the leases expire, the events
    #    come again and are appended a second time
    submit_and_send("k3")
    table = AuditTable(rest_catalog(weed.iceberg, BUCKET, **weed.catalog_properties()))
    crashing = QueueProjector(QueueClient(queue.account_id, queue.queue_id, queue.token, api=queue.api), table,
                              visibility_timeout_ms=500)  # fmt: skip

    async def crash(*args, **kwargs):
        raise ConnectionError("the consumer died after its commit")

    async def crash_once() -> None:
        crashing.queue.ack = crash  # type: ignore[method-assign]
        try:
            with pytest.raises(ConnectionError):
                await crashing.consume_once()
        finally:
            await crashing.queue.close()

    asyncio.run(crash_once())
    time.sleep(1.0)  # past the visibility timeout

    # 3. the queue is down: the world goes on ticking, the events wait in the outbox, the object
    #    retries with backoff (not at every tick's alarm) and logs one line for the whole outage
    queue.fail_pushes("refuse")
    admin.submit(edge, mover(), idempotency_key="k4")
    admin.wait(edge, "k4", timeout=SETTLE_S)
    head = admin.world(edge).tick_head

    def refused() -> list[float]:
        return [push.at for push in pushes_of(queue, edge) if push.outcome == "refused"]

    wait_for(lambda: len(refused()) >= 3 or None, "three refused sends")
    attempts = refused()
    gaps = [later - earlier for earlier, later in zip(attempts, attempts[1:], strict=False)]
    # the retry delay, then doubled: never sooner (at every tick's alarm it would be every 0.25 s)
    assert all(gap >= RETRY_DELAY_S * 2**n - 0.2 for n, gap in enumerate(gaps)), gaps
    assert admin.world(edge).tick_head > head + 2 and admin.world(edge).outbox_pending > 0
    queue.fail_pushes(None)
    wait_for(lambda: admin.world(edge).outbox_pending == 0 or None, "the retry to send the waiting events")
    streak = delivery_logs(workerd_python, edge)
    assert [level for level, _ in streak] == ["ERROR", "WARNING"], streak
    assert "failed" in streak[0][1] and f"after {len(refused())} failed attempts" in streak[1][1]

    # 4. workerd restarts while the queue is down and events wait: nothing is lost
    queue.fail_pushes("refuse")
    admin.submit(edge, mover(), idempotency_key="k5")
    admin.wait(edge, "k5", timeout=SETTLE_S)
    assert admin.world(edge).outbox_pending > 0
    workerd_python.restart()
    queue.fail_pushes(None)
    wait_for(lambda: admin.world(edge).outbox_pending == 0 or None, "the restarted object to send the waiting events")

    # every event of the world is in the table's history exactly once, however often it was appended
    while appended(queue, weed):
        pass
    assert queue.pending() == 0
    events = table.history(GetAuditHistory(world_id=edge, limit=1_000))
    assert [e.event_seq for e in events] == list(range(1, committed_seq(workerd_python.url, edge) + 1))
    assert sorted((e.command_id, e.event_type) for e in events) == sorted(
        (key, kind) for key in ("k1", "k2", "k3", "k4", "k5") for kind in ("admitted", "applied"))  # fmt: skip
    stored = table.scan(EqualTo("world_id", edge))
    assert stored.num_rows > len(events)  # the redelivered copies are in the table; the history shows each once


def test_a_queue_that_never_answers_does_not_stop_a_world_s_ticks(workerd_python, admin, queue):
    """The stall phase 1 saw (a world at tick 0 while the queue failed): a send the queue takes and
    never answers held the alarm, and with it every later tick. Sends are bounded now."""
    queue.fail_pushes("hang")
    edge = world("edge")
    admin.create_world("hanging queue", world_id=edge)
    admin.submit(edge, mover(), idempotency_key="h1")
    admin.wait(edge, "h1", timeout=SETTLE_S)
    wait_for(lambda: pushes_of(queue, edge) or None, "a send to the hanging queue")
    head = admin.world(edge).tick_head
    wait_for(lambda: admin.world(edge).tick_head >= head + 8 or None, "the world to tick while its send hangs")
    assert admin.world(edge).outbox_pending > 0
    queue.fail_pushes(None)
    wait_for(lambda: admin.world(edge).outbox_pending == 0 or None, "the events to be sent once the queue answers")
    assert {level for level, _ in delivery_logs(workerd_python, edge)} >= {"ERROR"}


def test_a_large_backlog_to_a_slow_queue_drains_between_ticks(workerd_python, admin, queue):
    """One alarm sends at most until the next tick is due (one batch at least), not 50 batches
    back to back: a backlog of 1,000 events to a queue taking 0.3 s per batch costs the world no
    tick (before: one alarm sent all ten batches, three seconds without a tick)."""
    edge = world("edge")
    admin.create_world("backlog", world_id=edge)
    queue.fail_pushes("refuse")
    commands = [{"type": "despawn", "tick": FAR_TICK, "entity_id": n + 1} for n in range(1_000)]
    admin.submit_batch(edge, commands, idempotency_key="backlog")
    wait_for(lambda: pushes_of(queue, edge) or None, "a refused send")
    queue.push_delay_s = 0.3
    queue.fail_pushes(None)
    samples: list[tuple[int, int]] = []

    def drained() -> bool | None:
        info = admin.world(edge)
        samples.append((info.tick_head, info.outbox_pending))
        return info.outbox_pending == 0 or None

    wait_for(drained, "the backlog to drain", timeout=SETTLE_S * 2)
    heads_while_draining = {head for head, pending in samples if 0 < pending < 1_000}
    assert len(heads_while_draining) >= 3, samples
    sent = [json.loads(m.body) for m in queue.messages.values() if json.loads(m.body)["world_id"] == edge]
    assert {e["event_seq"] for e in sent} == set(range(1, 1_001))  # every admission's event, none lost
