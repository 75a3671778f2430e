"""SIGKILL between destroy's steps: `archetype serve` finishes the destroy by itself.

`Ledger.destroy` is a short series of transactions: close admission (ACTIVE -> CLOSING), then
cancel the open commands 1,000 per transaction, each with its `cancelled` event, the last one
marking the world DESTROYED. A process (tests/crash/destroyer.py) dies by SIGKILL from inside its
own SQL port: right after the closing transaction, right after two cancel batches (2,500 open
commands: 500 left), and inside the second batch (its UPDATE done, its events and COMMIT not: the
batch rolls back). Then the real `archetype serve` (127.0.0.1, port 0, a tokens file) starts on
that data directory and must finish the destroy by itself: the world DESTROYED, every command that
was open CANCELLED with exactly one `cancelled` event, none lost, none twice, the settled ones
untouched. SIGTERM then stops serve with exit code 0.

serve's audit projector moves events from the outbox into the audit table while it runs, so the
events are read from both: the table's rows and what is left in the outbox.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import httpx
import pytest

from archetype.audit import AuditLog
from archetype.audit.schema import arrow_to_events
from archetype.commands import DeferredItem, DurableOptions
from archetype.commands.ledger import CANCEL_BATCH
from archetype.runtime import Runtime
from archetype.world import Spawn, Step
from tests.api.conftest import TOKENS
from tests.crash.harness import CatalogView, LedgerDump, Proc, Serve, wait_for
from tests.crash.model import Tag

pytestmark = [pytest.mark.crash, pytest.mark.timeout(240)]

WORLD = "doomed"
FAR = 10**9  # a tick no runner reaches: these stay PENDING
PENDING, LEASED, SETTLED = 2_400, 100, 5
FINISH_S = 60


async def populate(data: Path) -> None:
    """Settled, PENDING, LEASED (by a runner that vanished) and RETRYABLE (charged by the crash guard) commands."""
    def spawns(prefix: str, count: int, tick: int) -> list[DeferredItem]:
        return [DeferredItem(op=Spawn(world_id=WORLD, components=[Tag(n=i)]), options=DurableOptions(tick=tick),
                             command_id=f"{prefix}{i}") for i in range(count)]  # fmt: skip

    async with await Runtime.open_local(data, audit=None) as rt:
        await rt.authority.create_world(world_id=WORLD, name="doomed")
        await rt.dispatcher.defer_batch(spawns("settled-", SETTLED, 0))
        assert await rt.dispatcher.apply(Step(world_id=WORLD)) is not None
        await rt.dispatcher.defer_batch(spawns("leased-", LEASED, 1))
        for first in range(0, PENDING, 800):
            await rt.dispatcher.defer_batch(spawns("pending-", PENDING, FAR)[first : first + 800])
        ledger = rt.authority.ledger
        epoch = ledger.world_info(WORLD)["writer_epoch"]
        held = ledger.lease(WORLD, "ghost", "s1", epoch, 1, LEASED, 600_000)
        ledger.guard(WORLD, "ghost", "s1", epoch, held[0]["sequence"])
        assert ledger.lease(WORLD, "ghost", "s2", epoch, 1, 0, 600_000) == []  # charges the guarded one: RETRYABLE


@pytest.mark.parametrize(
    ("mode", "cancelled_at_death"),
    [("after:1", 0), ("after:3", 2 * CANCEL_BATCH), ("inside:3", CANCEL_BATCH)],
    ids=["after-close", "after-two-batches", "inside-second-batch"],
)
def test_serve_finishes_a_destroy_killed_between_its_steps(tmp_path: Path, mode: str, cancelled_at_death: int) -> None:
    data = tmp_path / "data"
    asyncio.run(populate(data))
    before = LedgerDump(data, WORLD)
    open_before = {row["command_id"] for row in before.commands if row["status"] in ("PENDING", "LEASED", "RETRYABLE")}
    assert before.statuses() == {"APPLIED": SETTLED, "PENDING": PENDING, "LEASED": LEASED - 1, "RETRYABLE": 1}
    assert len(open_before) > 2 * CANCEL_BATCH

    destroyer = Proc(tmp_path, "destroyer", data, WORLD, mode)
    assert destroyer.wait_exit(60) == -9, f"the destroyer was to die mid-destroy:\n{destroyer.output()}"
    dead = LedgerDump(data, WORLD)
    assert dead.world["status"] == "CLOSING"
    assert dead.statuses()["CANCELLED"] == cancelled_at_death
    assert sum(kinds.count("cancelled") for kinds in dead.event_types().values()) == cancelled_at_death

    view = CatalogView(data)
    serve = Serve(tmp_path, data, TOKENS, "--runner-id", "destroy-finisher")
    try:
        url = serve.wait_serving()
        wait_for(lambda: view.world(WORLD)["status"] == "DESTROYED", "serve to finish the destroy", FINISH_S, every=0.05,
                 alive=lambda: None if serve.alive() else pytest.fail(f"serve exited:\n{serve.stderr()[-4000:]}"))  # fmt: skip
        with httpx.Client(base_url=url, timeout=10) as http:
            info = http.get(f"/worlds/{WORLD}", headers={"Authorization": "Bearer t-admin"})
            assert info.status_code == 200 and info.json()["status"] == "DESTROYED", info.text
        assert serve.stop() == 0, serve.stderr()[-4000:]
        assert serve.next_line(10) == '{"stopped": true}\n'
    finally:
        serve.kill()
        view.close()

    after = LedgerDump(data, WORLD)
    assert after.world["status"] == "DESTROYED"
    for row in after.commands:
        was = before.by_id[row["command_id"]]
        if row["command_id"] in open_before:
            assert (row["status"], row["last_error"]) == ("CANCELLED", "world destroyed"), row
        else:
            assert row == was, "a settled command is untouched by destroy"
    assert len(after.commands) == len(before.commands)

    events = _all_events(data, before, after)
    assert [e["event_seq"] for e in events] == list(range(1, len(events) + 1)), "no event lost, none twice"
    assert events[: len(before.events)] == before.events, "destroy only appends events"
    cancelled = Counter(e["command_id"] for e in events if e["event_type"] == "cancelled")
    assert cancelled == Counter(open_before), "exactly one cancelled event per command that was open"
    assert all(e["event_type"] == "cancelled" for e in events[len(before.events) :])
    print(f"{mode}: {cancelled_at_death} cancelled before the kill, {len(open_before) - cancelled_at_death} by serve")


def _all_events(data: Path, before: LedgerDump, ledger: LedgerDump) -> list[dict]:
    """The world's events: what serve's projector moved into the audit table, then what is still in the outbox."""
    async def read() -> list[dict]:
        from pyiceberg.expressions import EqualTo

        audit = AuditLog.open_local(data)
        try:
            rows = await asyncio.to_thread(lambda: arrow_to_events(audit.table.scan(EqualTo("world_id", WORLD))))
        finally:
            await audit.close()
        return rows

    projected = sorted(asyncio.run(read()), key=lambda e: e["event_seq"])
    assert len({e["event_id"] for e in projected}) == len(projected), "the audit table holds each event once"
    outbox = [e for e in ledger.events if not projected or e["event_seq"] > projected[-1]["event_seq"]]
    fields = list(before.events[0])  # the outbox's fields (the table keeps a few more)
    return [{name: e[name] for name in fields} for e in projected + outbox]
