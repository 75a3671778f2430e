"""Crash test with real processes: SIGKILL the runner (and sometimes the feeder) at random points.

A runner process (a stable owner, as `archetype serve --runner-id`: a restart takes its leases back
at once, never waiting for them to expire) steps the world in a loop while a feeder process streams
durable commands in (single defers, durable spawns, batches; outcomes applied, rejected, retried and
dead-lettered).
The test kills them at random points, at least MIN_KILLS times, restarting each. Then a last
runner drains the world and the ledger is checked: every admitted command is terminal exactly
once and applied at most once, the published world state equals a replay of the APPLIED commands
in ledger order on an empty in-memory world, and the outbox lost and duplicated nothing.

Reproduce a failure with the printed seed: CRASH_SEED=<seed> pytest tests/crash
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from archetype.commands import CommandScheduler, default_registry
from archetype.world import AsyncWorld, Spawn, SpawnReserved
from archetype.world.columnar import run_ids
from archetype.world.operations import operation_components
from local_catalog import open_local_authority
from tests.conformance.helpers import applied as applied_ids
from tests.crash.harness import READY, Proc
from tests.crash.model import WORLD_ID, feed_plan, plan_command_ids

pytestmark = pytest.mark.crash

MIN_KILLS = 30
ITEMS = 800
PACE_S = 0.015  # an admission itself takes milliseconds to tens of them: the runner steps between any two
LEASE_MS = 30_000  # longer than the whole kill phase: the runner's stable owner takes its leases back at once
KILL_PHASE_S = 600  # deadlines, not targets: a quiet machine is done in a fraction (restarts are slow under load)
DRAIN_S = 180
PAGE = 1000
TERMINAL_EVENTS = {"APPLIED": "applied", "REJECTED": "rejected", "DEAD_LETTER": "dead_lettered", "CANCELLED": "cancelled"}


@pytest.mark.timeout(KILL_PHASE_S + DRAIN_S + 60)
def test_sigkill_runner_and_feeder(tmp_path: Path) -> None:
    seed = int(os.environ.get("CRASH_SEED", random.randrange(2**32)))
    print(f"crash test seed: {seed} (rerun with CRASH_SEED={seed})")
    rng = random.Random(seed)
    data = tmp_path / "data"
    asyncio.run(_create_world(data))

    def runner(*extra: str) -> Proc:
        return Proc(tmp_path, "runner", str(data), str(LEASE_MS), READY, *extra)

    def feeder() -> Proc:
        return Proc(tmp_path, "feeder", str(data), str(seed), str(ITEMS), str(PACE_S))

    run, feed = runner(), feeder()
    kills = feeder_kills = 0
    deadline = time.monotonic() + KILL_PHASE_S
    feeding = True
    try:
        while feeding or kills < MIN_KILLS:
            assert time.monotonic() < deadline, f"{kills} kills, feeder done: {not feeding}, after {KILL_PHASE_S}s"
            if rng.random() < 0.8:  # most kills land while the runner steps; the rest anywhere, startup included
                run.wait_ready()
            time.sleep(rng.uniform(0.02, 1.0))
            run.expect_alive()
            run.kill()
            kills += 1
            if feeding and not feed.alive():
                feed.expect_clean_exit(0)
                feeding = False
            elif feeding and rng.random() < 0.35:
                feed.kill()
                feeder_kills += 1
                feed = feeder()
            run = runner()
        run.kill()
        drain = runner("--drain")
        drain.expect_clean_exit(DRAIN_S)
    finally:
        for proc in (run, feed):
            if proc.alive():
                proc.kill()
    print(f"runner kills: {kills}, feeder kills: {feeder_kills}")
    asyncio.run(_verify(data, feed_plan(seed, ITEMS)))


async def _create_world(data: Path) -> None:
    authority = open_local_authority(data)
    await authority.create_world(world_id=WORLD_ID, name="crash")
    await authority.close()


async def _pages(authority: Any, method: str, cursor: str, key: str, start: int, **args: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    while True:
        page = await authority.rpc(method, {"world_id": WORLD_ID, "limit": PAGE, cursor: start, **args})
        if not page:
            return rows
        rows.extend(page)
        start = page[-1][key]


async def _verify(data: Path, plan: list[dict[str, Any]]) -> None:
    authority = open_local_authority(data)
    try:
        commands = await _pages(authority, "history", "after_sequence", "sequence", 0)
        events = await _pages(authority, "read_outbox", "after_seq", "event_seq", 0)
        manifests = await _pages(authority, "manifests", "after_tick", "tick", -1)
        published = await _published_state(authority)
        tick_head = (await authority.world_info(world_id=WORLD_ID))["tick_head"]
    finally:
        await authority.close()

    by_id = {row["command_id"]: row for row in commands}
    assert len(by_id) == len(commands)
    assert set(by_id) == plan_command_ids(plan), "the ledger holds exactly the commands the feeder admitted"
    statuses = Counter(row["status"] for row in commands)
    print(f"commands by status: {dict(statuses)}; ticks published: {len(manifests)}")
    assert set(statuses) <= set(TERMINAL_EVENTS), f"open commands left after the drain: {statuses}"

    _check_outbox(events, by_id)
    _check_manifests(manifests, by_id, tick_head)
    assert {"APPLIED", "REJECTED", "DEAD_LETTER"} <= set(statuses), "the feed must exercise every outcome"
    assert any(e["event_type"] == "retry_scheduled" for e in events)
    assert published == _replay(manifests, by_id), "published state differs from a replay of the APPLIED commands"


def _check_outbox(events: list[dict[str, Any]], by_id: dict[str, dict[str, Any]]) -> None:
    assert [e["event_seq"] for e in events] == list(range(1, len(events) + 1)), "event_seq must run 1..n with no gap"
    assert len({e["event_id"] for e in events}) == len(events), "event ids must be unique"
    per_command: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        per_command.setdefault(event["command_id"], []).append(event)
    assert set(per_command) == set(by_id), "every admitted command, and nothing else, has outbox events"
    terminal = set(TERMINAL_EVENTS.values())
    for command_id, stream in per_command.items():
        row = by_id[command_id]
        kinds = [e["event_type"] for e in stream]
        assert kinds.count("admitted") == 1 and kinds[0] == "admitted", (command_id, kinds)
        assert sum(k in terminal for k in kinds) == 1, (command_id, kinds)
        assert kinds[-1] == TERMINAL_EVENTS[row["status"]] and stream[-1]["status"] == row["status"], (command_id, kinds)
        assert set(kinds[1:-1]) <= {"retry_scheduled"}, (command_id, kinds)
        assert kinds.count("retry_scheduled") <= row["attempts"], (command_id, kinds, row["attempts"])


def _check_manifests(manifests: list[dict[str, Any]], by_id: dict[str, dict[str, Any]], tick_head: int) -> None:
    assert [m["tick"] for m in manifests] == list(range(tick_head + 1)), "one manifest per published tick"
    applied_at: dict[str, int] = {}
    for manifest in manifests:
        for command_id in applied_ids(manifest):
            assert command_id not in applied_at, f"{command_id} applied in ticks {applied_at[command_id]} and {manifest['tick']}"
            applied_at[command_id] = manifest["tick"]
            row = by_id[command_id]
            assert (row["status"], row["applied_tick"]) == ("APPLIED", manifest["tick"]), row
    applied = {cid for cid, row in by_id.items() if row["status"] == "APPLIED"}
    assert set(applied_at) == applied, "every APPLIED command is in exactly the manifest of its applied tick"


def _replay(manifests: list[dict[str, Any]], by_id: dict[str, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Apply the APPLIED commands, tick by tick in manifest order, to an empty in-memory world.

    A plain Spawn's entity id comes from the runner's id block, which the ledger does not tie to
    the command; within a tick those ids are handed out in materialization order, so the tick's
    newly written ids that no reservation explains map, ascending, onto its plain spawns.
    """
    registry = default_registry()
    scheduler = CommandScheduler(registry, authority=None)  # only decodes rows through their registrations
    world = AsyncWorld(WORLD_ID)
    for manifest in manifests:
        before = {entity_id for entity_id, _ in world.state.items()}
        ops = []
        for command_id in applied_ids(manifest):
            record = scheduler.record(by_id[command_id])
            assert record.problem is None, record
            ops.append(record.operation_model)
        reserved = {op.entity_id for op in ops if isinstance(op, SpawnReserved)}
        fresh = iter(sorted(e for e in run_ids(manifest["written_runs"]) if e not in before and e not in reserved))
        for op in ops:
            if type(op) is Spawn:
                entity_id = next(fresh)
                world.atomically(lambda: world.spawn(operation_components(op), entity_id=entity_id))  # noqa: B023 - run at once
            else:
                spec = registry.resolve(op)
                world.atomically(lambda: spec.durable.materialize(world, op))  # noqa: B023 - run at once
        assert next(fresh, None) is None, f"tick {manifest['tick']} wrote entities no applied command explains"
    return {
        entity_id: {key: component.model_dump(mode="json") for key, component in components.items()}
        for entity_id, components in world.state.items()
    }


async def _published_state(authority: Any) -> dict[int, dict[str, Any]]:
    state: dict[int, dict[str, Any]] = {}
    after = 0
    while True:
        page = await authority.load_state(world_id=WORLD_ID, after_entity_id=after)
        if not page["entities"]:
            return state
        for entity in page["entities"]:
            state[entity["entity_id"]] = {f"{v['name']}:{v['fingerprint']}": v["data"] for v in json.loads(entity["components"])}
            after = entity["entity_id"]
