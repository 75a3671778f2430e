"""Parity: every authority produces byte-identical records, manifests and outbox streams for the
same scripted inputs and clock (DESIGN: the two authorities run one state machine)."""

import pytest

from archetype.commands.port import ManualClock
from tests.conformance.authorities import AUTHORITY_FACTORIES
from tests.conformance.scenario import run_scenario, snapshot

REFERENCE = "local"


async def scenario_snapshot(name, directory) -> str:
    clock = ManualClock()
    async with AUTHORITY_FACTORIES[name](directory, clock) as authority:
        await run_scenario(authority, clock)
        return await snapshot(authority)


async def test_the_scenario_exercises_every_terminal_status(tmp_path):
    text = await scenario_snapshot(REFERENCE, tmp_path)
    for status in ("APPLIED", "REJECTED", "DEAD_LETTER", "CANCELLED", "retry_scheduled"):
        assert f'"{status}"' in text
    for error in ("StateTooLargeError: entity", "Unreadable: (its text could not be read)", "caf\\\\udce9"):
        assert error in text, error


async def test_the_reference_is_deterministic(tmp_path):
    assert await scenario_snapshot(REFERENCE, tmp_path / "one") == await scenario_snapshot(REFERENCE, tmp_path / "two")


@pytest.mark.parametrize("name", sorted(set(AUTHORITY_FACTORIES) - {REFERENCE}))
async def test_authority_matches_the_reference_byte_for_byte(name, tmp_path):
    reference = await scenario_snapshot(REFERENCE, tmp_path / "reference")
    assert await scenario_snapshot(name, tmp_path / name) == reference
