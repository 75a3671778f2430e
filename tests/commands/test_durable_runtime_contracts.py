"""Durable runtime contracts: what materialization verifies and how it runs (spec: "Materialization and settlement")."""

import sqlite3

import pytest

from archetype.commands import CommandStatus, DurableOptions
from archetype.commands.identity import command_digest
from archetype.commands.ledger_core import COMMAND_FIELDS
from archetype.world import CreateWorld, Spawn, Step, Update
from local_catalog import CATALOG_FILE
from tests.component_modules.alpha import Health


@pytest.fixture
async def wid(runtime):
    return await runtime.dispatcher.apply(CreateWorld(name="w", world_id="w1"))


def tamper(tmp_path, command_id, sql, *, rehash):
    """Change a stored row behind the ledger's back; optionally recompute its digest so only the
    deeper checks can catch it."""
    with sqlite3.connect(tmp_path / "data" / CATALOG_FILE) as db:
        db.execute(sql, (command_id,))
        if rehash:
            row = db.execute(f"SELECT {', '.join(COMMAND_FIELDS)} FROM commands WHERE command_id = ?", (command_id,)).fetchone()
            db.execute("UPDATE commands SET digest = ? WHERE command_id = ?",
                       (command_digest(dict(zip(COMMAND_FIELDS, row, strict=True))), command_id))  # fmt: skip


@pytest.fixture
def spy(runtime):
    calls = []
    durable = runtime.registry.named("update").durable
    original = durable.materialize

    def materialize(world, op):
        calls.append(op)
        return original(world, op)

    object.__setattr__(durable, "materialize", materialize)
    yield calls
    object.__setattr__(durable, "materialize", original)


TAMPERINGS = {
    "digest": ("UPDATE commands SET priority = 7 WHERE command_id = ?", False, "digest"),
    "payload": ("UPDATE commands SET payload = replace(payload, '\"hp\":4', '\"hp\":40') WHERE command_id = ?", False, "digest"),
    "operation": ("UPDATE commands SET operation = 'despawn' WHERE command_id = ?", True, "decode"),
    "unregistered": ("UPDATE commands SET operation = 'teleport' WHERE command_id = ?", True, "teleport"),
    "version": ("UPDATE commands SET schema_version = 2 WHERE command_id = ?", True, "schema version"),
    "world": ("UPDATE commands SET payload = replace(payload, '\"w1\"', '\"w2\"') WHERE command_id = ?", True, "another world"),
    "non-canonical": ("UPDATE commands SET payload = replace(payload, ',', ', ') WHERE command_id = ?", True, "round-trip"),
}


@pytest.mark.parametrize("kind", sorted(TAMPERINGS))
async def test_a_row_that_fails_verification_is_rejected_without_running(runtime, wid, tmp_path, spy, kind):
    entity = await runtime.dispatcher.apply(Spawn(world_id=wid, components=[Health(hp=1)]))
    await runtime.dispatcher.apply(Step(world_id=wid))
    await runtime.dispatcher.defer(Update(world_id=wid, entity_id=entity, components=[Health(hp=4)]),
                                   DurableOptions(tick=0), command_id="u")  # fmt: skip
    sql, rehash, message = TAMPERINGS[kind]
    tamper(tmp_path, "u", sql, rehash=rehash)
    await runtime.dispatcher.apply(Step(world_id=wid))
    record = await runtime.scheduler.command(wid, "u")
    assert record.status == CommandStatus.REJECTED and message in record.last_error
    assert spy == []
    world = await runtime.worlds.get(wid)
    assert world.get(entity)[Health].hp == 1


async def test_a_spawn_whose_reserved_identity_was_changed_is_rejected(runtime, wid, tmp_path):
    admission = await runtime.dispatcher.defer_spawn(Spawn(world_id=wid, components=[Health(hp=1)]), DurableOptions(tick=0),
                                                     command_id="s")  # fmt: skip
    tamper(tmp_path, "s", "UPDATE commands SET reserved_entity_id = reserved_entity_id + 1 WHERE command_id = ?", rehash=False)
    await runtime.dispatcher.apply(Step(world_id=wid))
    record = await runtime.scheduler.command(wid, "s")
    assert record.status == CommandStatus.REJECTED and "reserved identity" in record.last_error
    assert not (await runtime.worlds.get(wid)).exists(admission.entity_id)


async def test_materialization_never_looks_the_world_up_again(runtime, wid):
    await runtime.dispatcher.defer(Spawn(world_id=wid, components=[Health(hp=1)]), DurableOptions(tick=0))
    world = await runtime.worlds.get(wid)

    async def no_lookup(world_id):
        raise AssertionError("the scheduler looked the world up again")

    runtime.worlds.get = no_lookup
    receipt = await world.step()
    assert receipt.commands_applied == 1


async def test_decoding_is_portable_across_module_moves(runtime, wid):
    # A durable payload names components only by name + fingerprint: a schema-identical class in
    # another module (beta.Position vs alpha.Position) materializes the same command.
    from tests.component_modules import alpha, beta

    await runtime.dispatcher.defer(Spawn(world_id=wid, components=[beta.Position(x=1, y=1)]), DurableOptions(tick=0), command_id="p")
    await runtime.dispatcher.apply(Step(world_id=wid))
    world = await runtime.worlds.get(wid)
    assert len(world.query(alpha.Position)) == 1
    (record,) = await runtime.scheduler.history(wid)
    assert record.operation_model.components[0].affinity is None  # decoded from the wire: no affinity
