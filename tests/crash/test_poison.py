"""A poison command that kills its runner dead-letters after its budget, with real processes.

The poison's component validator SIGKILLs its own process when materialized (uncatchable, like a
segfault; see model.Poison). The runner (stable owner, as `archetype serve --runner-id`) is
restarted after each death. Per poison, the first death is unattributed (the command was not
suspect, so not guarded); every later one happens under the crash guard and the next lease
charges it one attempt, so it dead-letters after 1 + budget deaths. The innocent commands around
it, suspect in every recovery, are never charged.

Two poisons: `poison-a` (budget 3) in the middle of tick 0, and `poison-b` (budget 1) in the
middle of tick 2, which the runner reaches in a normal tick after recovering from the first.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from archetype.commands import DeferredItem, DurableOptions
from archetype.runtime import Runtime
from archetype.world import Spawn
from tests.crash.harness import READY, READY_S, CatalogView, LedgerDump, Proc
from tests.crash.model import POISON_FLAG_ENV, Poison, Tag

pytestmark = [pytest.mark.crash, pytest.mark.timeout(300)]

WORLD = "poisoned"
OWNER = "poison-runner"
LEASE_MS = 30_000
POISONS = {"poison-a": (0, 3), "poison-b": (2, 1)}  # command id -> (tick, attempt budget)
INNOCENTS = {0: 20, 2: 10}  # tick -> innocent commands, half before and half after its poison in ledger order
DEATHS = sum(1 + budget for _, budget in POISONS.values())
RUN_S = READY_S + 60  # one runner's life, start-up included


async def admit(data: Path) -> list[str]:
    """Per tick: innocents, the poison, more innocents (one batch, so in this ledger order)."""
    innocents = []
    async with await Runtime.open_local(data, audit=None) as rt:
        await rt.authority.create_world(world_id=WORLD, name="poisoned")
        for poison, (tick, budget) in POISONS.items():
            ids = [f"t{tick}-{i}" for i in range(INNOCENTS[tick])]
            half = len(ids) // 2
            items = [DeferredItem(op=Spawn(world_id=WORLD, components=[Tag(n=n)]), options=DurableOptions(tick=tick),
                                  command_id=cid) for n, cid in enumerate(ids, start=len(innocents))]  # fmt: skip
            pill = DeferredItem(op=Spawn(world_id=WORLD, components=[Poison(label=poison)]),
                                options=DurableOptions(tick=tick, max_attempts=budget), command_id=poison)  # fmt: skip
            await rt.dispatcher.defer_batch([*items[:half], pill, *items[half:]])
            innocents += ids
    return innocents


def test_a_command_that_kills_its_runner_dead_letters_after_its_budget(tmp_path: Path) -> None:
    data = tmp_path / "data"
    innocents = asyncio.run(admit(data))
    flag = tmp_path / "poison.flag"
    flag.touch()
    view = CatalogView(data)
    after_each_death = []  # (status, attempts) of each poison, as each dead runner left them
    run = None
    try:
        for _ in range(DEATHS + 3):
            run = Proc(tmp_path, "runner", data, LEASE_MS, READY, "--world", WORLD, "--owner", OWNER, "--drain",
                       env={POISON_FLAG_ENV: str(flag)})  # fmt: skip
            code = run.wait_exit(RUN_S)
            if code == 0:
                break
            assert code == -signal.SIGKILL, f"the runner exited with {code}, not by the poison:\n{run.output()}"
            after_each_death.append({p: _state(view, p) for p in POISONS})
        else:
            raise AssertionError(f"the runner still dies after {len(after_each_death)} deaths: {after_each_death}")
    finally:
        if run is not None and run.alive():
            run.kill()
        view.close()
    print(f"runner deaths: {len(after_each_death)}; poisons after each: {after_each_death}")

    # poison-a: death 1 unattributed, deaths 2..4 guarded; each is charged by the next runner's lease
    a = [("LEASED", 0), ("LEASED", 0), ("LEASED", 1), ("LEASED", 2), ("DEAD_LETTER", 3), ("DEAD_LETTER", 3)]
    b = [("PENDING", 0)] * 4 + [("LEASED", 0), ("LEASED", 0)]
    assert after_each_death == [{"poison-a": x, "poison-b": y} for x, y in zip(a, b, strict=True)]
    assert len(after_each_death) == DEATHS

    ledger = LedgerDump(data, WORLD)
    events = ledger.event_types()
    for poison, (_, budget) in POISONS.items():
        row = ledger.by_id[poison]
        assert (row["status"], row["attempts"]) == ("DEAD_LETTER", budget), row
        assert "crash guard" in row["last_error"], row
        assert events[poison] == ["admitted", *["retry_scheduled"] * (budget - 1), "dead_lettered"], events[poison]
    applied_in = ledger.applied_in()
    settled = {cid: (ledger.by_id[cid]["status"], ledger.by_id[cid]["attempts"]) for cid in innocents}
    assert settled == dict.fromkeys(innocents, ("APPLIED", 1))
    assert all(events[cid] == ["admitted", "applied"] and applied_in[cid] == 1 for cid in innocents)
    assert not set(applied_in) - set(innocents), "nothing but the innocents was ever applied"
    assert sorted(c["Tag"]["n"] for c in ledger.entities.values()) == list(range(len(innocents)))


def _state(view: CatalogView, command_id: str) -> tuple[str, int]:
    row = view.command(WORLD, command_id=command_id)
    return row["status"], row["attempts"]
