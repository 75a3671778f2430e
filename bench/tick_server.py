"""A moving world in its own process, ticked on request: how world_bench.py times another version
of the code (`--baseline-src`, e.g. the tree before a change, exported with `git archive`) in the
same run, interleaved with this one. Uses only APIs every version has (AsyncWorld, Runtime,
add_processor), so it runs against either.

    PYTHONPATH=<src> python bench/tick_server.py <entities> <durable|memory|durable-vector> <directory>

`durable-vector` moves the entities with a vectorised processor (archetype.vector) instead.

Reads one line per tick ("tick"), answers the tick's seconds on a line; "quit" ends it.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import time
from pathlib import Path

from moving import Position, Velocity, move_columns, move_each

from archetype.runtime import Runtime
from archetype.world import AsyncWorld, CreateWorld


async def serve(n: int, kind: str, directory: Path) -> None:
    rt = None
    if kind.startswith("durable"):
        from local_catalog import open_local_authority

        rt = Runtime(open_local_authority(directory, synchronous="FULL"), owner="bench-baseline")
        world = await rt.worlds.get(await rt.dispatcher.apply(CreateWorld(name="baseline", world_id="baseline")))
    else:
        world = AsyncWorld("baseline")
    await world.ensure_entity_ids(n)
    async with world.lock:
        world.atomically(lambda: [world.spawn([Position(x=float(i), y=0.0), Velocity(dx=1.0, dy=0.5)]) for i in range(n)])
    await world.step()
    if kind == "durable-vector":
        from archetype.vector import add_vector_processor

        add_vector_processor(world, move_columns, Position, Velocity, writes=[Position])
    else:
        world.add_processor(move_each, Position, Velocity)
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() != "tick":
            break
        gc.collect()
        start = time.perf_counter()
        await world.step()
        print(time.perf_counter() - start, flush=True)
    if rt is not None:
        await rt.close()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])))
