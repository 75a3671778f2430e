"""Schema evolution end to end: a real catalog written by a process that has only the old class,
reopened by one that has only the new class (docs/guide/schema-evolution.md)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest

from archetype.runtime import Runtime
from archetype.world import Component, ComponentMigrationError, ComponentMigrationRequiredError, Step
from local_catalog import CATALOG_FILE

OLD_WRITER = textwrap.dedent(
    """
    import asyncio, json, sys
    from archetype.runtime import Runtime
    from archetype.commands import DurableOptions
    from archetype.world import Component, CreateWorld, Spawn, Step, Update

    class Critter(Component):
        name: str
        speed: int

    async def main(path):
        rt = Runtime(__import__("local_catalog").open_local_authority(path))
        w = await rt.dispatcher.apply(CreateWorld(name="zoo", world_id="zoo"))
        await rt.dispatcher.apply(Spawn(world_id=w, components=[Critter(name="ant", speed=3)]))
        await rt.dispatcher.apply(Spawn(world_id=w, components=[Critter(name="bee", speed=7)]))
        await rt.dispatcher.apply(Step(world_id=w))  # tick 0 publishes both
        await rt.dispatcher.defer_spawn(Spawn(world_id=w, components=[Critter(name="cat", speed=1)]),
                                        DurableOptions(tick=3), command_id="later-spawn")
        await rt.dispatcher.defer(Update(world_id=w, entity_id=1, components=[Critter(name="ant", speed=4)]),
                                  DurableOptions(tick=3), command_id="later-update")
        await rt.close()
        print(json.dumps({"fingerprint": Critter.component_fingerprint()}))

    asyncio.run(main(sys.argv[1]))
    """
)


class Critter(Component):
    """The new schema: speed became a float and energy was added."""

    name: str
    speed: float
    energy: int = 100


def critter_v1_to_v2(data: dict) -> dict:
    return {"name": data["name"], "speed": float(data["speed"]), "energy": 100}


@pytest.fixture
def old_catalog(tmp_path) -> tuple:
    data = tmp_path / "data"
    written = subprocess.run([sys.executable, "-c", OLD_WRITER, str(data)], capture_output=True, text=True, check=True)
    return data, json.loads(written.stdout)["fingerprint"]


async def test_without_a_declared_migration_the_load_error_says_what_to_declare(old_catalog):
    data, old = old_catalog
    async with Runtime(__import__("local_catalog").open_local_authority(data)) as rt:
        with pytest.raises(ComponentMigrationRequiredError) as refused:
            await rt.worlds.get("zoo")
    message = str(refused.value)
    assert f"component 'Critter' with fingerprint {old} (2 entities)" in message
    assert f"the loaded Critter has fingerprint {Critter.component_fingerprint()}" in message
    assert f'runtime.worlds.migrations.declare("Critter", "{old}", Critter, critter_from_{old[:8]})' in message
    assert f"def critter_from_{old[:8]}(data: dict) -> dict:" in message


async def open_migrated(data, old: str) -> tuple:
    """Open the catalog with the migration declared; answer (entities text, open payloads, components, outbox)."""
    authority = __import__("local_catalog").open_local_authority(data)
    async with Runtime(authority) as rt:
        rt.worlds.migrations.declare("Critter", old, Critter, critter_v1_to_v2)
        world = await rt.worlds.get("zoo")
        state = await authority.load_state("zoo")
        payloads = {r["command_id"]: r["payload"] for r in await authority.history("zoo")}
        listing = await authority.components("zoo")
        events = await authority.read_outbox("zoo", limit=1000)
        critters = sorted((c.name, c.speed, c.energy) for _, (c,) in world.query(Critter))
        return [e["components"] for e in state["entities"]], payloads, listing, events, critters


async def test_a_declared_migration_moves_state_and_pending_commands_durably_and_deterministically(
    old_catalog, tmp_path
):
    data, old = old_catalog
    twin = tmp_path / "twin"
    shutil.copytree(data, twin)
    entities, payloads, listing, events, critters = await open_migrated(data, old)
    assert critters == [("ant", 3.0, 100), ("bee", 7.0, 100)]
    assert all(old not in text and Critter.component_fingerprint() in text for text in entities)
    assert all(old not in payload for payload in payloads.values())
    (migration,) = listing["migrations"]
    assert (migration["name"], migration["from_fingerprint"], migration["to_fingerprint"]) == (
        "Critter",
        old,
        Critter.component_fingerprint(),
    )
    assert (migration["entities"], migration["commands"], migration["tick"]) == (2, 2, 0)
    assert {c["fingerprint"]: c["superseded_by"] for c in listing["components"]} == {
        old: Critter.component_fingerprint(), Critter.component_fingerprint(): None,
    }  # fmt: skip
    assert events[-1]["event_type"] == "schema_migrated"
    # the same catalog migrated by another process: byte for byte the same result
    assert (await open_migrated(twin, old))[:2] == (entities, payloads)

    # the catalog file is durable: a plain reopen (no declaration needed any more) runs the old commands
    assert (data / CATALOG_FILE).exists()
    async with Runtime(__import__("local_catalog").open_local_authority(data)) as rt:
        for _ in range(4):
            await rt.dispatcher.apply(Step(world_id="zoo"))
        history = {r.command_id: r.status for r in await rt.scheduler.history("zoo")}
        assert history == {"later-spawn": "APPLIED", "later-update": "APPLIED"}
        world = await rt.worlds.get("zoo")
        assert sorted((c.name, c.speed) for _, (c,) in world.query(Critter)) == [
            ("ant", 4.0),
            ("bee", 7.0),
            ("cat", 1.0),
        ]


async def test_a_migration_that_fails_rewrites_nothing(old_catalog):
    data, old = old_catalog
    authority = __import__("local_catalog").open_local_authority(data)
    async with Runtime(authority) as rt:
        rt.worlds.migrations.declare("Critter", old, Critter, lambda d: {"name": d["name"], "speed": "fast"})
        with pytest.raises(ComponentMigrationError, match=r"entity 1: migrating Critter .* to Critter failed"):
            await rt.worlds.get("zoo")
        assert (await authority.components("zoo"))["migrations"] == []
        assert all(old in e["components"] for e in (await authority.load_state("zoo"))["entities"])
