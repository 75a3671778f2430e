"""Runner process of the crash tests: steps one world in a loop until it is killed.

It runs under a stable owner (`--owner`, default `crash-runner`), as `archetype serve --runner-id`
does: a restarted runner takes its own leases back at once instead of waiting for them to expire,
and the crash guard tells its crashes apart. It holds the owner exclusively with an OS lock on
`<data>/runners/<owner>.lock`, the lock a `serve` of that runner id holds too; a second live process
with the same owner exits with code 2.

The simulated calibration outage (see model.Beacon) is switched on only while the world
materializes its due commands, so loading published state after a restart never trips it.
With --drain the runner exits once no command of the world is open any more. Whatever happens,
it stops by itself after --max-seconds, or as soon as the process that started it is gone.
Usage: python -m tests.crash.runner DATA_DIR LEASE_MS READY_FILE [--drain] [--owner ID] [--world ID]
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import os
import sys
import time
from pathlib import Path

from archetype.runtime import Runtime
from archetype.world import AsyncWorld, Step
from tests.crash.model import WORLD_ID, Outage

STEP_PAUSE_S = 0.01
OPEN_STATUSES = ("PENDING", "LEASED", "RETRYABLE")
DEFAULT_OWNER = "crash-runner"


def _with_outage(world: AsyncWorld) -> None:
    materialize = world.materializer

    async def materialize_during_outage(w: AsyncWorld, tick: int) -> None:
        Outage.active = True
        try:
            await materialize(w, tick)
        finally:
            Outage.active = False

    world.materializer = materialize_during_outage


async def _has_open_commands(rt: Runtime, world_id: str) -> bool:
    for status in OPEN_STATUSES:
        if await rt.authority.history(world_id=world_id, status=status, limit=1):
            return True
    return False


def _hold_owner(data: str, owner: str):
    """One live process per owner; the OS releases the lock at death."""
    folder = Path(data) / "runners"
    folder.mkdir(parents=True, exist_ok=True)
    handle = open(folder / f"{owner}.lock", "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"runner {owner!r} is already running on {data}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    return handle


async def run(args: argparse.Namespace) -> None:
    parent, deadline = os.getppid(), time.monotonic() + args.max_seconds
    lock = _hold_owner(args.data, args.owner)
    async with await Runtime.open_local(args.data, lease_ms=args.lease_ms, owner=args.owner) as rt:
        rt.worlds.on_load.append(_with_outage)
        await rt.worlds.get(args.world)
        args.ready.touch()
        while os.getppid() == parent and time.monotonic() < deadline:
            await rt.dispatcher.apply(Step(world_id=args.world))
            if args.drain and not await _has_open_commands(rt, args.world):
                break
            await asyncio.sleep(STEP_PAUSE_S)
        else:
            raise SystemExit(f"runner {args.owner!r} stopped: its parent is gone or {args.max_seconds}s passed")
    lock.close()


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tests.crash.runner")
    parser.add_argument("data")
    parser.add_argument("lease_ms", type=int)
    parser.add_argument("ready", type=Path)
    parser.add_argument("--drain", action="store_true")
    parser.add_argument("--owner", default=DEFAULT_OWNER)
    parser.add_argument("--world", default=WORLD_ID)
    parser.add_argument("--max-seconds", type=float, default=600.0)
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(run(_arguments(sys.argv[1:])))
