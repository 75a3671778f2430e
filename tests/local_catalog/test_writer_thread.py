"""The local authority off the event loop: one writer thread, group commit (local_catalog.writer)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time

import pytest

from archetype.canonical import canonical_json
from archetype.commands import DurableOptions
from archetype.commands.errors import (
    CommandConflictError,
    InvalidCommandError,
    InvalidComponentDataError,
    UnknownComponentError,
    WorldNotFoundError,
)
from archetype.commands.port import ManualClock
from archetype.commands.scheduler import schema_row
from archetype.runtime import Runtime
from archetype.world import CreateWorld, Spawn
from local_catalog import CATALOG_FILE, SqliteSqlPort, open_local_authority
from local_catalog.writer import WriterThreadAuthority, _Doorbell
from tests.component_modules.alpha import Health

ADMISSIONS = 64


def _row(command_id: str, principal: str | None, *, hp: object = 1, tick: int = 0, fingerprint: str | None = None) -> dict:
    """The admission row of a spawn of one Health into world `w`."""
    component = {"name": "Health", "fingerprint": fingerprint or Health.component_fingerprint(), "data": {"hp": hp}}
    payload = canonical_json({"operation": "spawn", "world_id": "w", "components": [component]})
    return {"command_id": command_id, "schema_version": 1, "scheduled_tick": tick, "priority": 0, "operation": "spawn",
            "payload": payload, "principal": principal, "origin": "gateway", "max_attempts": 3,
            "reserved_entity_id": None, "request_digest": None}  # fmt: skip


async def _loop_lag_while(work: asyncio.Future) -> float:
    """The longest the event loop stayed away from a 1 ms timer while `work` ran."""
    worst = 0.0
    while not work.done():
        before = time.perf_counter()
        await asyncio.sleep(0.001)
        worst = max(worst, time.perf_counter() - before - 0.001)
    await work
    return worst


async def test_the_event_loop_never_waits_on_a_heavy_tick(tmp_path):
    authority = open_local_authority(tmp_path, clock=ManualClock())
    await authority.create_world("heavy", "heavy")
    epoch = (await authority.acquire_writer("heavy"))["writer_epoch"]
    manifest = {"world_id": "heavy", "tick": 0, "writer_epoch": epoch, "settlements": [], "written_runs": [],
                "commit_token": "t0"}
    # a snapshot of 40 chunks of ~500 KB (20 MB of state): heavy SQL, little Python
    padding = "x" * 500
    writes = {"snapshot": True, "chunks": [json.dumps([[i, f'[{{"name": "{padding}"}}]'] for i in range(start, start + 1_000)])
                                         for start in range(1, 40_001, 1_000)]}
    started = time.perf_counter()
    publish = asyncio.ensure_future(authority.publish("heavy", "runner", "session", manifest, writes))  # type: ignore[arg-type]
    lag = await _loop_lag_while(publish)
    took = time.perf_counter() - started
    await authority.close()
    # The loop kept running while the tick's SQL ran: its longest wait is a fraction of the call
    # (the ledger's own Python holds the GIL at times); on the loop it would be all of it.
    assert lag < took / 3, (lag, took)


async def _admit(rt: Runtime, world_id: str, command_id: str, hp: int):
    op = Spawn(world_id=world_id, components=[Health(hp=hp)])
    return await rt.dispatcher.defer(op, DurableOptions(tick=0), command_id=command_id)


async def test_concurrent_admissions_share_commits_and_each_is_answered_after_its_own(tmp_path):
    authority = open_local_authority(tmp_path, clock=ManualClock())
    async with Runtime(authority, audit=None) as rt:
        world_id = await rt.dispatcher.apply(CreateWorld(name="group", world_id="g"))
        await _admit(rt, world_id, "taken", 1)
        reader = sqlite3.connect(tmp_path / CATALOG_FILE)
        seen_committed: list[bool] = []

        async def admit_and_look(i: int):
            try:
                identity = await _admit(rt, world_id, "taken" if i == 7 else f"c{i}", 2)  # #7 conflicts
            except CommandConflictError:
                return None
            # answered: its row must already be visible to another connection (committed)
            rows = reader.execute("SELECT count(*) FROM commands WHERE command_id = ?", (identity.command_id,))
            seen_committed.append(rows.fetchone()[0] == 1)
            return identity

        calls, groups = authority.calls, authority.groups
        answers = await asyncio.gather(*(admit_and_look(i) for i in range(ADMISSIONS)))
        grouped = (authority.calls - calls) / (authority.groups - groups)
        reader.close()
        assert answers[7] is None and all(a is not None for i, a in enumerate(answers) if i != 7)
        assert seen_committed == [True] * (ADMISSIONS - 1)
        assert grouped > 4, f"{grouped:.1f} calls per transaction: admissions were not grouped"
        history = await rt.scheduler.history(world_id, limit=1000)
        assert sorted(r.command_id for r in history) == sorted(["taken", *(f"c{i}" for i in range(ADMISSIONS) if i != 7)])
        assert [r.sequence for r in history] == list(range(1, ADMISSIONS + 1))  # no sequence lost to the rollback


async def test_one_bad_call_in_a_group_rolls_back_alone(tmp_path):
    authority = open_local_authority(tmp_path, clock=ManualClock())
    await authority.create_world("w", "w")
    good = {"world_id": "w", "name": "w"}
    results = await asyncio.gather(
        authority.rpc("create_world", {"world_id": "a", "name": "a"}),
        authority.rpc("reserve_entity_ids", {"world_id": "w", "count": 0}),  # invalid: refused alone
        authority.rpc("create_world", {"world_id": "w", "name": "other"}),  # exists: refused alone
        authority.rpc("create_world", good),
        return_exceptions=True,
    )
    assert isinstance(results[1], InvalidCommandError) and type(results[2]).__name__ == "WorldExistsError"
    assert [w["world_id"] for w in await authority.list_worlds()] == ["a", "w"]
    await authority.close()


def test_a_call_that_wrote_before_it_raised_leaves_nothing_of_its_own(tmp_path):
    port = SqliteSqlPort(tmp_path / "g.db")
    port.execute("CREATE TABLE t (v INTEGER)")

    def writes(v: int, fail: bool = False):
        def call() -> int:
            port.execute("INSERT INTO t VALUES (?)", (v,))
            if fail:
                raise ValueError(v)
            return v

        return call

    results = port.group([writes(1), writes(2, fail=True), writes(3)])
    assert results[0] == 1 and isinstance(results[1], ValueError) and results[2] == 3
    assert port.execute("SELECT v FROM t ORDER BY v") == [(1,), (3,)]


async def test_component_admission_checks_run_per_call_inside_a_group(tmp_path):
    """Admission validation runs in the ledger, so under group commit a schema recorded earlier in
    the queue is seen by the admissions after it, and a refused admission rolls back alone."""
    authority = open_local_authority(tmp_path, clock=ManualClock())
    await authority.create_world("w", "w")

    def admission(command_id: str, fingerprint: str, hp: object) -> dict:
        return _row(command_id, None, hp=hp, fingerprint=fingerprint)

    health = Health.component_fingerprint()
    calls, groups = authority.calls, authority.groups
    results = await asyncio.gather(
        authority.rpc("record_components", {"world_id": "w", "components": [schema_row(Health)]}),
        *(authority.rpc("admit", {"world_id": "w", "commands": [admission(f"ok{i}", health, i)]}) for i in range(8)),
        authority.rpc("admit", {"world_id": "w", "commands": [admission("bad", health, "x")]}),
        authority.rpc("admit", {"world_id": "w", "commands": [admission("unknown", "0" * 64, 1)]}),
        authority.rpc("admit", {"world_id": "w", "commands": [admission("ok8", health, 8)]}),
        return_exceptions=True,
    )
    assert authority.groups - groups < authority.calls - calls  # some of them shared a transaction
    assert results[0] == 1
    assert isinstance(results[9], InvalidComponentDataError) and results[9].message.startswith("$.components[0].data.hp")
    assert isinstance(results[10], UnknownComponentError)
    assert not any(isinstance(r, BaseException) for i, r in enumerate(results) if i not in (9, 10)), results
    history = await authority.history("w", limit=100)
    assert [r["command_id"] for r in history] == [f"ok{i}" for i in range(9)]
    assert [r["sequence"] for r in history] == list(range(1, 10))  # nothing of the refused ones persisted
    await authority.close()


async def _authority_and_doorbell(tmp_path) -> tuple[WriterThreadAuthority, _Doorbell]:
    """A local authority with world `w`, and the doorbell of this test's loop."""
    authority = open_local_authority(tmp_path, clock=ManualClock())
    assert isinstance(authority, WriterThreadAuthority)
    await authority.create_world("w", "w")
    return authority, authority._doorbells[asyncio.get_running_loop()]


async def test_a_group_rings_its_callers_loop_once(tmp_path):
    """The answers of one group reach the event loop in one ring of its doorbell, however many
    calls the group held; each caller still gets its own answer."""
    authority, doorbell = await _authority_and_doorbell(tmp_path)
    rings: list[int] = []
    ring = doorbell.ring

    def counted(settled):
        rings.append(len(settled))
        return ring(settled)

    doorbell.ring = counted  # type: ignore[method-assign]
    gate = threading.Event()
    blocked = asyncio.ensure_future(authority._call(gate.wait, solo=False))  # holds the writer
    await asyncio.sleep(0.05)
    calls = [asyncio.ensure_future(authority.world_info("w")) for _ in range(20)]
    calls.append(asyncio.ensure_future(authority.world_info("missing")))
    await asyncio.sleep(0.05)  # all queued behind the held call: they run as one group
    groups = authority.groups
    gate.set()
    await blocked
    answers = await asyncio.gather(*calls, return_exceptions=True)
    assert authority.groups - groups == 2  # the held call's, then the 21 queued behind it
    assert rings == [1, 21], rings
    assert all(a["world_id"] == "w" for a in answers[:-1])  # type: ignore[index]
    assert isinstance(answers[-1], WorldNotFoundError)
    await authority.close()


async def test_answers_rung_while_the_loop_is_busy_wake_it_once_and_all_arrive(tmp_path):
    """Groups answered while the loop has not yet read its doorbell ring it without writing to it
    again; the next read answers them all, and the doorbell is written again after it."""
    authority, doorbell = await _authority_and_doorbell(tmp_path)
    sent: list[bytes] = []
    bell = doorbell._bell
    doorbell._bell = type("Counted", (), {"send": lambda self, data: sent.append(data) or bell.send(data)})()
    authority._max_group = 1  # a group a call: five rings
    groups = authority.groups
    calls = [asyncio.ensure_future(authority.world_info("w")) for _ in range(5)]
    await asyncio.sleep(0)  # queued: the writer answers them while the loop sleeps below
    time.sleep(0.2)  # the loop busy (blocked on purpose): nothing rung is read meanwhile
    assert authority.groups - groups == 5
    assert len(sent) == 1, sent
    assert all(a["world_id"] == "w" for a in await asyncio.gather(*calls))
    assert (await authority.world_info("w"))["world_id"] == "w"
    assert len(sent) == 2, sent
    doorbell._bell = bell
    await authority.close()


class _Halt(BaseException):
    """Not an Exception: no savepoint answers it, so it fails the transaction it ran in."""


@pytest.mark.parametrize("queued", [0, 3])
async def test_a_call_raising_a_base_exception_fails_its_group_and_the_writer_goes_on(tmp_path, queued):
    """Alone in its group (the single-call path) or among others: the caller gets what it raised,
    so does every call of its transaction, nothing of that transaction persists, and the writer
    thread answers the next call."""
    authority = open_local_authority(tmp_path, clock=ManualClock())
    assert isinstance(authority, WriterThreadAuthority)
    await authority.create_world("w", "w")
    await authority.record_components("w", [schema_row(Health)])
    gate = threading.Event()

    def halt():
        raise _Halt

    held = asyncio.ensure_future(authority._call(gate.wait, solo=False))  # holds the writer
    await asyncio.sleep(0.05)
    others = [asyncio.ensure_future(authority.admit("w", [_row(f"c{i}", None)])) for i in range(queued)]
    halting = asyncio.ensure_future(authority._call(halt, solo=False))
    await asyncio.sleep(0.05)  # all queued behind the held call: one group
    gate.set()
    await held
    answers = await asyncio.wait_for(asyncio.gather(*others, halting, return_exceptions=True), 60)  # never answered: fails
    assert all(isinstance(answer, _Halt) for answer in answers), answers
    assert await authority.history("w", limit=10) == []
    assert (await authority.admit("w", [_row("after", None)]))[0]["sequence"] == 1
    await authority.close()


QUOTA = 9  # per principal and target tick: tick 0 stays under it
# Admissions as concurrent HTTP submissions queue them: mostly one principal's singles into one
# world, with a replay, a conflict, a key sent twice at once, a refused value, a quota overflow
# and another principal's in between; an empty one, which no batch may be.
QUEUED = [
    ("p", [_row("a1", "p")]), ("p", [_row("a2", "p")]), ("p", []),  # an empty batch: refused
    ("p", [_row("seen", "p")]),  # a replay
    ("p", [_row("a3", "p"), _row("a4", "p")]), ("p", [_row("twice", "p")]), ("p", [_row("twice", "p")]),
    ("p", [_row("clash", "p", hp=2)]),  # admitted before with other content: a conflict
    ("q", [_row("b1", "q")]), ("q", [_row("b2", "q")]),
    ("p", [_row("bad", "p", hp="x")]), ("p", [_row("a5", "p")]),
    *(("p", [_row(f"t{i}", "p", tick=7)]) for i in range(QUOTA + 1)),  # the last over the quota of tick 7
    (None, [_row("trusted", None)]),
    *(("p", [_row(f"c{i}", "p", tick=3)]) for i in range(6)),  # nothing to refuse: one batch
]


async def _counting_authority(tmp_path, name: str) -> tuple[WriterThreadAuthority, list[int]]:
    """A catalog with world `w` and commands `seen` and `clash` admitted, and the size of each
    `Ledger.admit` call from now on."""
    authority = open_local_authority(tmp_path / name, clock=ManualClock())
    assert isinstance(authority, WriterThreadAuthority)
    batches: list[int] = []
    admit = authority.ledger.admit

    def counted(world_id, commands, quota=None):
        batches.append(len(commands))
        return admit(world_id, commands, quota)

    authority.ledger.admit = counted  # type: ignore[method-assign]
    await authority.create_world("w", "w")
    await authority.record_components("w", [schema_row(Health)])
    await authority.admit("w", [_row("seen", "p"), _row("clash", "p")], QUOTA)
    batches.clear()
    return authority, batches


async def _queued_admissions(tmp_path, name: str, *, at_once: bool) -> tuple[list, list, list[int]]:
    authority, batches = await _counting_authority(tmp_path, name)

    def call(principal: str | None, rows: list) -> asyncio.Future:
        return asyncio.ensure_future(authority.rpc("admit", {"world_id": "w", "commands": rows, "quota": QUOTA if principal else None}))

    if at_once:  # queued behind a held call: they run as one group
        gate = threading.Event()
        held = asyncio.ensure_future(authority._call(gate.wait, solo=False))
        await asyncio.sleep(0.05)
        futures = [call(principal, rows) for principal, rows in QUEUED]
        await asyncio.sleep(0.05)
        gate.set()
        await held
        answers = await asyncio.gather(*futures, return_exceptions=True)
    else:
        answers = [(await asyncio.gather(call(principal, rows), return_exceptions=True))[0] for principal, rows in QUEUED]
    ledger = [await authority.history("w", limit=100, scope=None), await authority.read_outbox("w", 0, 1000)]
    await authority.close()
    return [a if isinstance(a, list) else (type(a).__name__, str(a)) for a in answers], ledger, batches


async def test_queued_admissions_run_as_one_batch_and_answer_as_each_alone(tmp_path):
    """Neighbouring admissions of one world and principal run as one `admit` (the writer merges
    them); each caller's answer, and every row and event the ledger keeps, is what running them one
    at a time gives, refusals included (the merged batch refused, each runs alone)."""
    merged, merged_ledger, merged_batches = await _queued_admissions(tmp_path, "merged", at_once=True)
    alone, alone_ledger, alone_batches = await _queued_admissions(tmp_path, "alone", at_once=False)
    assert merged == alone
    assert merged_ledger == alone_ledger
    assert alone_batches == [len(rows) for _, rows in QUEUED]
    assert merged_batches[-1] == 6 and len(merged_batches) < len(alone_batches) + 4, merged_batches  # merged; refused, alone
    refused = {answer[0] for answer in alone if isinstance(answer, tuple)}
    assert refused == {"CommandConflictError", "InvalidComponentDataError", "QuotaExceededError", "InvalidCommandError"}
    replays = [a[0]["replayed"] for a in alone if isinstance(a, list) and a[0]["command_id"] in ("seen", "twice")]
    assert replays == [True, False, True]



# One principal's single admissions as one turn of an HTTP server's loop gathers them: new ones, a
# replay, a key sent twice, a conflict, a refused value, a quota overflow at tick 7.
EACH = [_row("e1", "p"), _row("seen", "p"), _row("e2", "p"), _row("again", "p"), _row("again", "p"),
        _row("clash", "p", hp=2), _row("bad", "p", hp="x"), *(_row(f"u{i}", "p", tick=7) for i in range(QUOTA + 1)),
        _row("e3", "p")]  # fmt: skip


async def _admitted_each(tmp_path, name: str, rows: list, *, together: bool) -> tuple[list, list, list[int]]:
    """(each row's answer, the ledger's history and outbox, the size of each `Ledger.admit` call)."""
    authority, batches = await _counting_authority(tmp_path, name)
    calls = authority.calls
    if together:
        answers = await authority.admit_each("w", rows, QUOTA)
        assert authority.calls == calls + 1  # one call to the writer thread
    else:
        answers = []
        for row in rows:
            try:
                answers += await authority.admit("w", [row], QUOTA)
            except Exception as exc:
                answers.append(exc)
    ledger = [await authority.history("w", limit=100, scope=None), await authority.read_outbox("w", 0, 1000)]
    await authority.close()
    return [a if isinstance(a, dict) else (type(a).__name__, str(a)) for a in answers], ledger, batches


async def test_admit_each_answers_each_command_as_its_admission_alone_in_one_call(tmp_path):
    """`admit_each` (what coalesced HTTP admissions send: archetype.commands.coalesced) is one call to
    the writer thread, one batch when nothing refuses it, else each command alone: each answer, and
    every row and event the ledger keeps, is what admitting them one at a time gives."""
    each, each_ledger, each_batches = await _admitted_each(tmp_path, "each", EACH, together=True)
    alone, alone_ledger, alone_batches = await _admitted_each(tmp_path, "alone", EACH, together=False)
    assert each == alone
    assert each_ledger == alone_ledger
    assert alone_batches == [1] * len(EACH)
    assert each_batches == [len(EACH), *alone_batches]  # the batch refused, then each alone
    refused = [answer[0] for answer in alone if isinstance(answer, tuple)]
    assert refused == ["CommandConflictError", "InvalidComponentDataError", "QuotaExceededError"]
    assert [a["replayed"] for a in alone if isinstance(a, dict) and a["command_id"] in ("seen", "again")] == [True, False, True]

    fresh = [_row(f"n{i}", "p") for i in range(5)] + [_row("seen", "p")]  # nothing to refuse: one batch
    each, each_ledger, each_batches = await _admitted_each(tmp_path, "each-clean", fresh, together=True)
    alone, alone_ledger, _ = await _admitted_each(tmp_path, "alone-clean", fresh, together=False)
    assert (each, each_ledger, each_batches) == (alone, alone_ledger, [len(fresh)])


async def test_a_loop_without_add_reader_is_answered_through_call_soon_threadsafe(tmp_path, monkeypatch):
    """asyncio's proactor loop watches no sockets: its doorbell rings by `call_soon_threadsafe`."""
    loop = asyncio.get_running_loop()

    def unsupported(*args):
        raise NotImplementedError

    monkeypatch.setattr(loop, "add_reader", unsupported)
    authority = open_local_authority(tmp_path, clock=ManualClock())
    assert isinstance(authority, WriterThreadAuthority)
    await authority.create_world("w", "w")
    assert not authority._doorbells[loop]._watched
    answers = await asyncio.gather(*(authority.world_info("w") for _ in range(10)))
    assert all(a["world_id"] == "w" for a in answers)
    await authority.close()


async def test_a_ring_while_the_loop_reads_its_doorbell_is_never_lost():
    """The writer may ring while the loop is reading the bell: what it queued then is answered,
    and so is everything rung after."""
    loop = asyncio.get_running_loop()
    doorbell = _Doorbell(loop)
    futures = [loop.create_future() for _ in range(3)]
    watch = doorbell._watch

    class Racing:  # the writer's ring lands just before the loop reads the bell, once
        def recv(self, size: int) -> bytes:
            doorbell._watch = watch
            doorbell.ring([(futures[1], 1)])
            return watch.recv(size)

    doorbell.ring([(futures[0], 0)])
    doorbell._watch = Racing()  # type: ignore[assignment]
    assert await asyncio.wait_for(asyncio.gather(futures[0], futures[1]), 5) == [0, 1]
    doorbell.ring([(futures[2], 2)])
    assert await asyncio.wait_for(futures[2], 5) == 2
    doorbell.close()
