"""`archetype submit`, `history` and `dead-letters` against the app on real loopback HTTP."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from archetype.cli import main
from archetype.runtime import Runtime
from archetype.world import ComponentValue, CreateWorld, Step
from tests.component_modules import flaky
from tests.component_modules.flaky import Probe

pytestmark = pytest.mark.timeout(60)


def run(served, *args: str, token: str = "t-player"):
    return CliRunner().invoke(main, [args[0], "--url", served.url, "--token", token, *args[1:]])


async def test_submit_history_and_dead_letters(served):
    async with await Runtime.open_remote(served.url, token="t-admin", owner="cli-runner") as rt:
        world_id = await rt.dispatcher.apply(CreateWorld(name="cli", world_id="cli"))
        probe = ComponentValue.from_component(Probe(label="down")).model_dump()
        flaky.FAILURES["down"] = [ConnectionError("calibration offline")] * 5

        spawned = run(served, "submit", world_id, json.dumps({"type": "spawn", "tick": 0, "components": [probe]}),
                      "--idempotency-key", "probe")  # fmt: skip
        assert spawned.exit_code == 0, spawned.output
        assert json.loads(spawned.output)["command_id"] == "probe"
        replay = run(served, "submit", world_id, json.dumps({"type": "spawn", "tick": 0, "components": [probe]}),
                     "--idempotency-key", "probe")  # fmt: skip
        assert json.loads(replay.output)["replayed"] is True

        legacy = run(served, "submit", world_id, '{"type": "message", "tick": 0}')
        assert legacy.exit_code == 1 and "unsupported_command_type" in legacy.output
        denied = run(served, "submit", world_id, '{"type": "despawn", "tick": 0, "entity_id": 1}', token="t-viewer")
        assert denied.exit_code == 1 and "permission_denied" in denied.output
        assert run(served, "submit", world_id, "{nope").exit_code == 2

        for _ in range(3):  # three attempts, each failing with a retryable error: dead-lettered
            await rt.dispatcher.apply(Step(world_id=world_id))

    history = run(served, "history", world_id)  # the player's own commands
    assert history.exit_code == 0 and "probe" in history.output and "DEAD_LETTER" in history.output
    assert "probe" not in run(served, "history", world_id, token="t-viewer").output  # not the viewer's
    letters = run(served, "dead-letters", world_id, token="t-operator")
    assert letters.exit_code == 0 and "calibration offline" in letters.output
    applied = run(served, "history", world_id, "--status", "APPLIED", token="t-operator")
    assert applied.exit_code == 0 and applied.output == ""
    missing = run(served, "history", "nowhere", token="t-viewer")
    assert missing.exit_code == 1 and "world_not_found" in missing.output
