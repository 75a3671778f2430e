"""The local authority's client reads (local_catalog.reader): they run beside the writer, neither
waiting for the catalog's write lock nor holding it, and see everything committed before them."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from archetype.commands import DurableOptions
from archetype.commands.port import ManualClock
from archetype.runtime import Runtime
from archetype.world import CreateWorld, Despawn
from local_catalog import CATALOG_FILE, open_local_authority
from local_catalog.reader import READ_METHODS
from tests.component_modules.alpha import Health

# Well below the catalog's busy timeout (30 s): a read that waited for the write lock would not make it.
READ_DEADLINE_S = 10


@pytest.fixture
async def world(tmp_path):
    """(authority, world id, a command id) of a catalog with one published entity and one open command."""
    authority = open_local_authority(tmp_path, clock=ManualClock())
    rt = Runtime(authority, owner="runner", lease_ms=1_000)
    world_id = await rt.dispatcher.apply(CreateWorld(name="read", world_id="read"))
    world = await rt.worlds.get(world_id)
    await world.ensure_entity_ids(1)
    async with world.lock:
        world.atomically(lambda: world.spawn([Health(hp=1)]))
    await world.step()
    command = await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=1), DurableOptions(tick=10**6))
    yield authority, world_id, command.command_id
    await rt.close()


def reads(world_id: str, command_id: str) -> dict:
    return {
        "load_state": {"world_id": world_id},
        "read_state": {"world_id": world_id},
        "command": {"world_id": world_id, "command_id": command_id},
        "commands_by_id": {"world_id": world_id, "command_ids": [command_id]},
        "history": {"world_id": world_id},
    }


async def test_reads_run_while_another_writer_holds_the_write_lock(tmp_path, world):
    authority, world_id, command_id = world
    calls = reads(world_id, command_id)
    assert set(calls) == READ_METHODS
    holder = sqlite3.connect(tmp_path / CATALOG_FILE, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process in the middle of a write transaction
    try:
        answers = await asyncio.wait_for(
            asyncio.gather(*(authority.rpc(method, arguments) for method, arguments in calls.items())), READ_DEADLINE_S
        )
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    state, read, command, commands, history = answers
    assert [e["entity_id"] for e in state["entities"]] == [e for s in read["sections"] for e in s["ids"]] == [1]
    assert command["command_id"] == commands[0]["command_id"] == history[0]["command_id"] == command_id


async def test_a_read_sees_what_was_committed_before_it(world):
    authority, world_id, _ = world
    for n in range(20):
        admitted = await authority.admit(world_id, [{
            "command_id": f"c{n}", "schema_version": 1, "scheduled_tick": 10**6, "priority": 0, "operation": "despawn",
            "payload": f'{{"entity_id":1,"operation":"despawn","world_id":"{world_id}"}}', "principal": None,
            "origin": "local", "max_attempts": 3, "reserved_entity_id": None, "request_digest": None,
        }])  # fmt: skip
        row = await authority.command(world_id, f"c{n}")
        assert row is not None and row["sequence"] == admitted[0]["sequence"]


async def test_the_readers_connection_cannot_write(tmp_path, world):
    authority, world_id, _ = world
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        authority._reader._port.execute("DELETE FROM worlds")
    assert (await authority.world_info(world_id))["world_id"] == world_id
