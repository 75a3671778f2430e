"""Feeder process of the crash test: streams the seeded plan into the ledger through the dispatcher.

After a restart it replays the plan from the start: fixed command ids make every already admitted
command an identical replay (same identity, same reservation), so nothing is admitted twice.
Usage: python -m tests.crash.feeder DATA_DIR SEED ITEMS PACE_S
"""

from __future__ import annotations

import asyncio
import random
import sys
from typing import Any

from archetype.commands import DeferredItem, DurableOptions
from archetype.runtime import Runtime
from archetype.world import AddComponents, ComponentTypeRef, Despawn, RemoveComponents, Spawn, Update
from tests.crash.model import COMPONENT_TYPES, WORLD_ID, build_component, feed_plan


def _entity(target: dict[str, Any], reserved: dict[str, int]) -> int:
    return target["missing"] if "missing" in target else reserved[target["spawn"]]


def _operation(spec: dict[str, Any], reserved: dict[str, int]) -> Any:
    components = [build_component(c) for c in spec.get("components", ())]
    if spec["op"] == "spawn":
        return Spawn(world_id=WORLD_ID, components=components)
    entity_id = _entity(spec["target"], reserved)
    if spec["op"] == "update":
        return Update(world_id=WORLD_ID, entity_id=entity_id, components=components)
    if spec["op"] == "despawn":
        return Despawn(world_id=WORLD_ID, entity_id=entity_id)
    if spec["op"] == "add":
        return AddComponents(world_id=WORLD_ID, entity_id=entity_id, components=components)
    types = [ComponentTypeRef.from_type(COMPONENT_TYPES[name]) for name in spec["types"]]
    return RemoveComponents(world_id=WORLD_ID, entity_id=entity_id, component_types=types)


async def feed(data: str, seed: int, items: int, pace_s: float) -> None:
    rng = random.Random(seed ^ 0x5EED)
    reserved: dict[str, int] = {}
    async with await Runtime.open_local(data) as rt:
        for item in feed_plan(seed, items):
            if item["kind"] == "spawn":
                spawn = Spawn(world_id=WORLD_ID, components=[build_component(c) for c in item["components"]])
                admission = await rt.dispatcher.defer_spawn(
                    spawn, DurableOptions(**item["options"]), command_id=item["command_id"]
                )
                reserved[item["command_id"]] = admission.entity_id
                replayed = admission.command.replayed
            elif item["kind"] == "single":
                identity = await rt.dispatcher.defer(
                    _operation(item, reserved), DurableOptions(**item["options"]), command_id=item["command_id"]
                )
                replayed = identity.replayed
            else:
                batch = [
                    DeferredItem(op=_operation(m, reserved), options=DurableOptions(**m["options"]), command_id=m["command_id"])
                    for m in item["members"]
                ]
                identities = await rt.dispatcher.defer_batch(batch)
                if len({i.replayed for i in identities}) != 1:
                    raise AssertionError(f"batch {item['command_id']} was admitted in part: {identities}")
                replayed = identities[0].replayed
            if not replayed:  # only new admissions are paced; a replay after a restart catches up at once
                await asyncio.sleep(rng.uniform(0, 2 * pace_s))


if __name__ == "__main__":
    asyncio.run(feed(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])))
