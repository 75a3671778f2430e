"""Integration contracts through the public API: Runtime.open_local and the dispatcher."""

import subprocess
import sys
from pathlib import Path

import pytest

import archetype
from archetype.commands import CommandStatus, DurableOptions, UnregisteredOperationError, default_registry
from archetype.world import CreateWorld, Despawn, DestroyWorld, QueryComponents, Spawn, Step, Update
from tests.component_modules.alpha import Health, Position

STABLE_NAMES = {
    "archetype.world": ["Component", "ComponentTypeRef", "ComponentValue", "AsyncWorld", "CommittedTickReceipt", "Spawn",
                        "SpawnReserved", "Despawn", "Update", "AddComponents", "RemoveComponents", "CreateWorld",
                        "DestroyWorld", "Step", "QueryComponents", "ReserveEntityIds"],
    "archetype.commands": ["OperationRegistry", "OperationSpec", "DurableOperation", "DurableOptions", "DeferredItem",
                           "ActorCtx", "CommandDispatcher", "CommandScheduler", "CommandStatus", "CommandRecord",
                           "CommandConflictError", "WorldClosingError", "WorldNotFoundError", "StaleWriterError"],
    "archetype": ["Runtime"],
}  # fmt: skip


@pytest.mark.parametrize("module", sorted(STABLE_NAMES))
def test_stable_public_names_are_importable(module):
    imported = __import__(module, fromlist=["_"])
    missing = [name for name in STABLE_NAMES[module] if not hasattr(imported, name)]
    assert missing == []


@pytest.mark.parametrize("legacy", ["message", "custom", "query_world", "MESSAGE", "CUSTOM", "QUERY_WORLD"])
def test_legacy_envelopes_are_not_operations(legacy):
    with pytest.raises(UnregisteredOperationError):
        default_registry().named(legacy)


async def test_world_lifecycle_and_stepping_go_through_the_dispatcher(tmp_path):
    rt = await archetype.Runtime.open_local(tmp_path)
    world_id = await rt.dispatcher.apply(CreateWorld(name="arena"))
    spawned = await rt.dispatcher.defer_spawn(
        Spawn.from_components(world_id=world_id, components=[Position(x=0, y=0), Health(hp=5)]), DurableOptions(tick=0)
    )
    await rt.dispatcher.defer(Update(world_id=world_id, entity_id=spawned.entity_id, components=[Health(hp=4)]),
                              DurableOptions(tick=1))  # fmt: skip
    await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=spawned.entity_id), DurableOptions(tick=9))
    assert await rt.dispatcher.apply(Step(world_id=world_id)) == 1
    assert await rt.dispatcher.apply(Step(world_id=world_id)) == 1
    found = await rt.dispatcher.apply(QueryComponents(world_id=world_id, component_types=[Health]))
    assert found == [(spawned.entity_id, (Health(hp=4),))]
    assert await rt.dispatcher.apply(DestroyWorld(world_id=world_id)) == 1
    statuses = [r.status for r in await rt.scheduler.history(world_id)]
    assert statuses == [CommandStatus.APPLIED, CommandStatus.APPLIED, CommandStatus.CANCELLED]
    assert [r.applied_tick for r in await rt.scheduler.history(world_id)] == [0, 1, None]
    await rt.close()


def test_the_main_job_runs_and_shows_every_outcome(tmp_path):
    exe = Path(sys.executable).with_name("archetype")
    result = subprocess.run([str(exe), "demo", "--data", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for expected in ("APPLIED", "REJECTED", "DEAD_LETTER", "retry_scheduled", "dead_lettered", "replay returns the same identity: True"):
        assert expected in out
    assert (tmp_path / "catalog.sqlite3").exists()
