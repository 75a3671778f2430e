"""Every ledger method on every authority, answered as the local catalog answers it: the table that
keeps each transport honest while most conformance files run on the ledger's implementations only
(docs/testing.md, "Which authorities").

A row of tests/durable_object/arming.py's table (`ROWS`, one per method of `LEDGER_METHODS` and `CATALOG_METHODS`)
prepares a world and makes its call; here it runs on a fresh authority and on a fresh local
catalog, both on a ManualClock from zero, and the answers must be the same canonical JSON: every
method's arguments and answer cross each transport (HTTP, the Durable Object's RPC, the real
runtime's structured clone, the real DO SQL engine's numbers) and come back as the ledger made them.
Then the row's call on a world that does not exist (or, for a method without a world, a call the
ledger refuses) must raise the local catalog's error class with its code.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from archetype.canonical import canonical_json
from archetype.commands.authority import Authority
from archetype.commands.errors import CommandError
from archetype.commands.ledger import CATALOG_METHODS, LEDGER_METHODS
from archetype.commands.port import ManualClock
from archetype.runtime import Runtime
from tests.conformance.authorities import AUTHORITY_FACTORIES
from tests.durable_object.arming import LEASE_MS, ROWS, Case, Host, Row, rpc

REFERENCE = "local"
MISSING = "w-nowhere"
OTHERS = tuple(sorted(set(AUTHORITY_FACTORIES) - {REFERENCE}))
SAFE = 2**53 - 1  # the largest integer every transport carries exactly (a JS number's)
# Arguments the rows leave out: a tick (its files run on the ledgers only: docs/testing.md), and
# positions as large as a transport carries.
VARIANTS = {
    "read_state at a tick": Row("edge", rpc("read_state", tick=-1)),
    "history after the largest sequence": Row("edge", rpc("history", after_sequence=SAFE), lambda case: case.admitted()),
    "load_state after the largest entity id": Row("edge", rpc("load_state", after_entity_id=SAFE), lambda case: _stepped(case)),
}
TABLE = {**ROWS, **VARIANTS}


async def _stepped(case: Case) -> None:
    """A tick that published an entity."""
    await case.admitted()
    await Runtime(case.authority, owner="every-runner", lease_ms=LEASE_MS).worlds.step(case.world_id)


async def _no_alarm(*_: Any) -> Any:
    raise AssertionError("the every-method table sets and fires no alarms")


def _case(authority: Authority, clock: ManualClock, world_id: str) -> Case:
    return Case(Host(authority, clock, 0, _no_alarm, _no_alarm, _no_alarm), world_id)


Call = Callable[[Case], Awaitable[Any]]


def _after(prepare: Call, call: Call) -> Call:
    async def refused(case: Case) -> Any:
        await prepare(case)
        return await call(case)

    return refused


async def _world(case: Case) -> None:
    await case.authority.create_world(case.world_id, "first")


async def _held(case: Case) -> None:
    await case.authority.register_runner("held", "i-1", LEASE_MS)


# Methods that take no world, each with a call the ledger refuses (or None: a read of every world
# or runner, which nothing about them can refuse). Every other method is called as its row calls it,
# on a world that does not exist.
REFUSALS: dict[str, Call | None] = {
    "create_world": _after(_world, rpc("create_world", name="another name")),
    "register_runner": _after(_held, rpc("register_runner", world_id=None, runner_id="held", instance="i-2",
                                         lease_ms=LEASE_MS)),  # fmt: skip
    "leave_runner": _after(_held, rpc("leave_runner", world_id=None, runner_id="held", instance="i-2")),
    "read_state at a tick": _after(_world, rpc("read_state", tick=0)),
    "list_worlds": None, "live_runners": None, "pending_worlds": None, "hosted_worlds": None,
}  # fmt: skip


async def _outcomes(name: str, directory: Path, method: str) -> tuple[str, tuple[str, str] | None]:
    """On a fresh authority `name` (its clock at zero): the row's answer as canonical JSON, then the
    (error class, code) of its refused call."""
    row, clock = TABLE[method], ManualClock()
    async with AUTHORITY_FACTORIES[name](directory, clock) as authority:
        case = _case(authority, clock, f"every-{method.replace(' ', '-')}")
        if row.world in ("edge", "runner"):
            await authority.create_world(case.world_id, f"every {method}")
            case.state["world"] = row.world
        await row.prepare(case)
        answer = canonical_json(await row.call(case))
        if method in REFUSALS and REFUSALS[method] is None:
            return answer, None
        refusal = _case(authority, clock, f"refused-{method.replace(' ', '-')}" if method in REFUSALS else MISSING)
        refusal.state.update(epoch=1, sequence=1)  # what the rows' writer calls read
        with pytest.raises(CommandError) as refused:
            await (REFUSALS.get(method) or row.call)(refusal)
        return answer, (type(refused.value).__name__, refused.value.code)


_reference: dict[str, tuple[str, tuple[str, str] | None]] = {}


async def _reference_outcomes(directory: Path, method: str) -> tuple[str, tuple[str, str] | None]:
    """The reference's outcomes of a row: the same on every run (ManualClock), so made once a session."""
    if method not in _reference:
        _reference[method] = await _outcomes(REFERENCE, directory, method)
    return _reference[method]


def test_every_ledger_method_is_in_the_table():
    assert sorted(ROWS) == sorted(LEDGER_METHODS + CATALOG_METHODS)
    assert set(REFUSALS) <= set(TABLE)


@pytest.mark.parametrize("name", OTHERS)
@pytest.mark.parametrize("method", sorted(TABLE))
async def test_a_method_answers_and_refuses_as_the_reference_does(name, method, tmp_path):
    expected = await _reference_outcomes(tmp_path / REFERENCE, method)
    assert await _outcomes(name, tmp_path / name, method) == expected
