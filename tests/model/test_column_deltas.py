"""The model's rule for column deltas (docs/storage.md, "partial" sections: `PartialWrite` in
ledger_model.py) against every authority: a vectorised processor moves Position and leaves the
other components alone, a per-entity update, a despawn and a spawn land between; the state the
model folds from the ticks' writes is, as text, what `load_state` answers after each tick."""

from __future__ import annotations

import pytest

from archetype.runtime import Runtime
from archetype.vector import add_vector_processor
from archetype.world import CreateWorld
from archetype.world.columnar import run_ids
from tests.component_modules.alpha import Health, Position, Velocity
from tests.conformance.authorities import AUTHORITY_FACTORIES
from tests.model.ledger_model import PartialWrite, apply_writes
from tests.model.test_stateful import entity_text


def _data(component) -> dict:
    return component.model_dump(mode="json")


def _push(world, tick, table):
    table[Position].x += 0.5


@pytest.mark.parametrize("name", sorted(AUTHORITY_FACTORIES))
async def test_column_deltas_fold_as_the_model_says(name, tmp_path, clock):
    async with AUTHORITY_FACTORIES[name](tmp_path / "authority", clock) as authority:
        rt = Runtime(authority, owner="runner-a", lease_ms=1_000)
        world_id = await rt.dispatcher.apply(CreateWorld(name="deltas", world_id="w-deltas"))
        world = await rt.worlds.get(world_id)
        await world.ensure_entity_ids(40)
        async with world.lock:
            ids = world.atomically(lambda: [world.spawn(
                [Position(x=i / 4, y=-0.0), Velocity(dx=1.0, dy=float(i))] + ([Health(hp=i)] if i % 3 == 0 else [])
            ) for i in range(24)])  # fmt: skip
        await world.step()
        model = {e: {type(c).__name__: _data(c) for c in comps.values()} for e, comps in world.state.items()}
        add_vector_processor(world, _push, Position, Velocity, writes=[Position])
        for tick in range(5):
            writes: dict = {}
            async with world.lock:
                if tick == 2:
                    world.atomically(lambda: (world.update(ids[1], [Velocity(dx=-2.0, dy=0.0)]), world.despawn(ids[5]),
                                              world.spawn([Position(x=9.0, y=9.0), Velocity(dx=0.0, dy=0.0)])))  # fmt: skip
            before = set(model)
            receipt = await world.step()
            manifest = (await authority.manifests(world_id=world_id, after_tick=receipt.tick - 1))[0]
            for entity_id in run_ids(manifest["written_runs"]):
                components = world.state.get(entity_id)
                if components is None:
                    writes[entity_id] = None
                elif entity_id in before and tick != 2:  # the vectorised processor moved it: Position only
                    writes[entity_id] = PartialWrite(
                        Position=_data(components[next(k for k in components if k.startswith("Position:"))])
                    )
                else:
                    writes[entity_id] = {type(c).__name__: _data(c) for c in components.values()}
            apply_writes(model, writes)
            page = (await authority.load_state(world_id=world_id, after_entity_id=0, limit=1_000))["entities"]
            assert page == [{"entity_id": e, "components": entity_text(model[e])} for e in sorted(model)]
        await rt.close()
