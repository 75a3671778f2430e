"""Runner process of the crash test: steps the world in a loop until it is killed.

The simulated calibration outage (see model.Beacon) is switched on only while the world
materializes its due commands, so loading published state after a restart never trips it.
With --drain the runner exits once no command of the world is open any more.
Usage: python -m tests.crash.runner DATA_DIR LEASE_MS READY_FILE [--drain]
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from archetype.runtime import Runtime
from archetype.world import AsyncWorld, Step
from tests.crash.model import WORLD_ID, Outage

STEP_PAUSE_S = 0.01
OPEN_STATUSES = ("PENDING", "LEASED", "RETRYABLE")


def _with_outage(world: AsyncWorld) -> None:
    materialize = world.materializer

    async def materialize_during_outage(w: AsyncWorld, tick: int) -> None:
        Outage.active = True
        try:
            await materialize(w, tick)
        finally:
            Outage.active = False

    world.materializer = materialize_during_outage


async def _has_open_commands(rt: Runtime) -> bool:
    for status in OPEN_STATUSES:
        if await rt.authority.history(world_id=WORLD_ID, status=status, limit=1):
            return True
    return False


async def run(data: str, lease_ms: int, ready: Path, drain: bool) -> None:
    async with await Runtime.open_local(data, lease_ms=lease_ms) as rt:
        rt.worlds.on_load.append(_with_outage)
        await rt.worlds.get(WORLD_ID)
        ready.touch()
        while True:
            await rt.dispatcher.apply(Step(world_id=WORLD_ID))
            if drain and not await _has_open_commands(rt):
                return
            await asyncio.sleep(STEP_PAUSE_S)


if __name__ == "__main__":
    asyncio.run(run(sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), "--drain" in sys.argv[4:]))
