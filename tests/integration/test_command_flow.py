"""The whole command flow across real processes sharing one storage directory."""

import subprocess
import sys
from pathlib import Path

from archetype import Runtime
from archetype.commands import CommandStatus
from archetype.world import CreateWorld
from tests.component_modules.alpha import Health

SCRIPT = [sys.executable, "-m", "tests.integration.runner_script"]
ROOT = Path(__file__).resolve().parents[2]


def start(*args):
    return subprocess.Popen([*SCRIPT, *map(str, args)], cwd=ROOT)


async def test_feeders_and_runners_in_separate_processes_settle_every_command_once(tmp_path):
    rt = await Runtime.open_local(tmp_path)
    world_id = await rt.dispatcher.apply(CreateWorld(name="flow", world_id="flow"))
    await rt.close()

    feeders = [start("feed", tmp_path, world_id, 0, 30), start("feed", tmp_path, world_id, 20, 30)]  # overlap: replays
    runner = start("step", tmp_path, world_id, 12)
    for proc in [*feeders, runner]:
        assert proc.wait(timeout=120) == 0
    # a second runner process resumes the world where the first left it and drains the rest
    assert start("step", tmp_path, world_id, 8).wait(timeout=120) == 0

    rt = await Runtime.open_local(tmp_path)
    records = {r.command_id: r for r in await rt.scheduler.history(world_id, limit=1000)}
    assert len(records) == 150  # 50 distinct i, three commands each, replays not duplicated
    assert all(r.status.terminal for r in records.values())
    for i in range(50):
        assert records[f"spawn-{i}"].status == CommandStatus.APPLIED
        assert records[f"update-{i}"].status == CommandStatus.APPLIED
        assert records[f"ghost-{i}"].status == CommandStatus.REJECTED
    world = await rt.worlds.get(world_id)
    assert sorted(c[0].hp for _, c in world.query(Health)) == [i + 1000 for i in range(50)]
    events = await rt.authority.read_outbox(world_id=world_id, limit=10_000)
    assert [e["event_seq"] for e in events] == list(range(1, 301))  # one admitted + one terminal event each
    await rt.close()
