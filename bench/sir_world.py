"""The world the client benches read and command (bench/state_read.py, bench/policy_round.py): the
agents of issue 22's SIR trial, each a Position and a Velocity (numeric columns) and an Infection
(a string field: data rows), moved every tick by a vectorised processor, so that the world ticks
and publishes a column delta each tick while the benches read it. `archetype serve --module
sir_world` loads it; `populate` builds a world of it in a data directory before the serve starts.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from moving import Position, Velocity

from archetype.runtime import Runtime
from archetype.vector import add_vector_processor
from archetype.world import Component, CreateWorld

ROOT = Path(__file__).resolve().parents[1]
WORLD = "sir"
TOKENS = {"admin": {"principal": "root", "roles": ["admin"]}, "player": {"principal": "policy", "roles": ["player"]},
          "player2": {"principal": "policy2", "roles": ["player"]}, "viewer": {"principal": "analyst", "roles": ["viewer"]}}  # fmt: skip


class Infection(Component):
    state: str  # S, I, R or V
    day: int


def move(world: Any, tick: int, table: Any) -> None:
    table[Position].x += table[Velocity].dx
    table[Position].y += table[Velocity].dy


def setup(runtime: Runtime) -> None:
    runtime.worlds.on_load.append(lambda world: add_vector_processor(world, move, Position, Velocity, writes=[Position]))


def agent(i: int) -> list[Component]:
    return [Position(x=float(i % 100), y=float(i // 100)), Velocity(dx=0.25, dy=-0.125),
            Infection(state="I" if i % 50 == 0 else "S", day=0)]  # fmt: skip


async def _populate(data: Path, agents: int) -> None:
    async with await Runtime.open_local(data) as rt:
        world_id = await rt.dispatcher.apply(CreateWorld(name=WORLD, world_id=WORLD))
        world = await rt.worlds.get(world_id)  # only built here: the serve's runner moves it
        await world.ensure_entity_ids(agents)
        async with world.lock:
            world.atomically(lambda: [world.spawn(agent(i)) for i in range(agents)])
        await world.step()  # published: one snapshot of every agent, and the component types recorded


def populate(data: Path, agents: int) -> None:
    """A catalog under `data` holding the world `sir` of `agents` agents, published."""
    asyncio.run(_populate(data, agents))


def start_serve(directory: Path, tick_rate: float, src: Path | None = None) -> tuple[subprocess.Popen[str], str]:
    """`archetype serve` (of this code, or of the `src/` tree `src`) on `directory/data`, stepping
    the world `tick_rate` times a second; its process and URL."""
    tokens = directory / "tokens.json"
    tokens.write_text(json.dumps(TOKENS))
    command = [sys.executable, "-m", "archetype.cli", "serve", "--data", str(directory / "data"), "--port", "0",
               "--tokens", str(tokens), "--tick-rate", str(tick_rate), "--module", "sir_world"]  # fmt: skip
    path = [str(Path(__file__).parent), str(ROOT)] if src is None else [str(src.resolve()), str(Path(__file__).parent), str(ROOT)]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               env={**os.environ, "PYTHONPATH": os.pathsep.join(path)})  # fmt: skip
    line = process.stdout.readline() if process.stdout else ""
    if not line:
        raise RuntimeError(f"serve exited ({process.wait()}) before it served")
    return process, json.loads(line)["serving"]
