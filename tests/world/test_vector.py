"""Vectorised processors (archetype.vector, CPython only): the same entities, the same order and
the same results as the per-entity API, through the world's layered state and its encoding."""

import json
import math

import pytest

from archetype.canonical import NonCanonicalValueError, canonical_text
from archetype.vector import add_vector_processor, layout
from archetype.world import AsyncWorld, Component, PreTick, columnar
from archetype.world.commit import chunk_entries
from archetype.world.components import component_text, type_key
from tests.component_modules.alpha import Health, Position, Velocity


def overlay(below, above):
    """The reference fold of chunks (docs/storage.md): an entity's text once a later delta's entry
    `above` (a components text, a columnar.Partial, or None when despawned) is laid over `below`."""
    if not isinstance(above, columnar.Partial):
        return above
    if isinstance(below, columnar.Partial):
        return columnar.Partial({**below, **above})
    if below is None:
        return above  # kept partial: the snapshot under the deltas holds the rest of the entity
    components = {f'{c["name"]}:{c["fingerprint"]}': canonical_text(c) for c in json.loads(below)}
    components.update(above)
    return "[" + ",".join(components[key] for key in sorted(components)) + "]"


def move(world, tick, table):
    table[Position].x += table[Velocity].dx
    table[Position].y = table[Position].y * 2


def move_each(world, tick, entity_id, components):
    position, velocity = components
    world.update(entity_id, [Position(x=position.x + velocity.dx, y=position.y * 2)])


async def _world(register):
    world = AsyncWorld("w")
    await world.ensure_entity_ids(20)
    async with world.lock:
        world.atomically(lambda: [
            world.spawn([Position(x=i * 0.1, y=-0.0 if i % 3 else 1e-300), Velocity(dx=i, dy=0.5)] + ([Health(hp=i)] if i % 2 else []))
            for i in range(12)
        ] + [world.spawn([Position(x=1.0, y=2.0)])])  # fmt: skip
    await world.step()
    register(world)
    return world


class Folding:
    """A publisher that folds each state write into the state it stands for, as the ledger does."""

    def __init__(self, world):
        self.state, self.sent = {e: _text(c) for e, c in world.state.items()}, []

    async def publish(self, prepared):
        if prepared.snapshot:
            self.state = {}
        for chunk in prepared.chunks:
            for entity_id, text in columnar.decode(chunk):
                self.state[entity_id] = overlay(self.state.get(entity_id), text)
        self.sent.append(prepared)


async def test_a_vector_processor_does_what_the_per_entity_one_does():
    vector = await _world(lambda w: add_vector_processor(w, move, Position, Velocity, writes=[Position]))
    each = await _world(lambda w: w.add_processor(move_each, Position, Velocity))
    vector.publisher, each.publisher = Folding(vector), Folding(each)
    for _ in range(3):
        await vector.step()
        await each.step()
        assert sorted(vector.state.items()) == sorted(each.state.items())
        # the same published state; the vectorised delta carries only the column it changed
        assert vector.publisher.state == each.publisher.state
        assert {e: _text(c) for e, c in vector.state.items()} == {e: t for e, t in vector.publisher.state.items() if t}
    sections = [s for chunk in vector.publisher.sent[0].chunks for s in json.loads(chunk)["sections"]]
    assert [s.get("partial", False) for s in sections] == [True, True]  # (Position, Velocity) and (.., Health)
    assert all(c["name"] == "Position" for s in sections if s.get("partial") for c in s["components"])


def _text(components):
    return "[" + ",".join(component_text(components[key]) for key in sorted(components)) + "]"


async def test_only_changed_rows_are_written():
    def nudge_third(world, tick, table):
        table[Position].x[table.ids == 3] += 1.0

    world = await _world(lambda w: add_vector_processor(w, nudge_third, Position, Velocity))
    await world.step()
    assert world.publisher.manifests[-1].written_entity_ids == [3]


@pytest.mark.parametrize("bad", [math.nan, math.inf])
async def test_a_non_finite_column_fails_the_tick_whole(bad):
    def poison(world, tick, table):
        table[Position].x[-1] = bad

    world = await _world(lambda w: add_vector_processor(w, poison, Position, Velocity))
    before = sorted(world.state.items())
    with pytest.raises(NonCanonicalValueError):
        await world.step()
    assert sorted(world.state.items()) == before and world.tick == 0


def test_a_component_built_from_columns_is_the_validated_one():
    # (the texts written from columns are compared with component_text by the commit tokens above)
    for value in (Position(x=-0.0, y=2.0), Position(x=1e-300, y=-2.5e300), Health(hp=-(2**53 - 1))):
        item = layout(type(value))
        data = {field: getattr(value, field) for field in item.fields}
        rebuilt = item.build(data)
        assert rebuilt == value and component_text(rebuilt) == component_text(value)


def test_only_plain_numeric_components_have_columns():
    class Named(Component):
        label: str

    with pytest.raises(TypeError):
        layout(Named)


async def test_it_runs_once_per_table_in_id_order_on_columns_kept_across_ticks():
    calls = []

    def record(world, tick, table):
        calls.append(
            (table.ids.tolist(), table[Velocity].dx.base if table[Velocity].dx.base is not None else table[Velocity].dx)
        )
        table[Position].x += 1.0

    world = await _world(lambda w: add_vector_processor(w, record, Position, Velocity, writes=[Position]))
    await world.step()
    with_health = [i + 1 for i in range(12) if i % 2]
    without = [i + 1 for i in range(12) if not i % 2]
    assert [ids for ids, _ in calls] == [with_health, without]  # the tables, by their sorted component keys
    first = [column for _, column in calls]
    calls.clear()
    await world.step()
    assert all(a is b for a, b in zip(first, [column for _, column in calls], strict=True))  # not rebuilt


CHEATS = {
    "in place": lambda columns: columns["dx"].__iadd__(1.0),
    "a row": lambda columns: columns["dx"].__setitem__(0, 1.0),
    "assigned": lambda columns: setattr(columns, "dx", columns["dx"] + 1.0),
}


@pytest.mark.parametrize("cheat", sorted(CHEATS))
@pytest.mark.parametrize("changed_earlier", [False, True])
async def test_a_read_only_column_cannot_be_written(cheat, changed_earlier):
    # whether its table's columns or the entities changed earlier in the tick are handed over
    def cheating(world, tick, table):
        if changed_earlier == (len(table) == 1):
            CHEATS[cheat](table[Velocity])

    def boost(world, tick, entity_id, components):
        if changed_earlier and entity_id == 2:
            world.update(entity_id, [Velocity(dx=9.0, dy=0.0)])

    world = await _world(lambda w: [w.add_processor(boost, Velocity),
                                    add_vector_processor(w, cheating, Position, Velocity, writes=[Position])])  # fmt: skip
    before = sorted(world.state.items())
    with pytest.raises(ValueError, match="read-only"):
        await world.step()
    assert sorted(world.state.items()) == before


async def test_a_field_a_component_does_not_have_cannot_be_assigned():
    def typo(world, tick, table):
        table[Position].z = table[Position].x

    world = await _world(lambda w: add_vector_processor(w, typo, Position, Velocity, writes=[Position]))
    with pytest.raises(AttributeError, match="Position has no field 'z'"):
        await world.step()


async def test_entities_changed_earlier_in_the_tick_are_processed_as_they_are_then():
    def boost(world, tick, entity_id, components):
        if entity_id % 4 == 1:
            world.update(entity_id, [Velocity(dx=100.0, dy=0.0)])

    def spawner(world, event):
        world.spawn([Position(x=0.5, y=0.5), Velocity(dx=1.0, dy=1.0)])

    seen = []

    def counted(world, tick, table):
        seen.extend(table.ids.tolist())
        move(world, tick, table)

    def setup(vectorised):
        def register(world):
            world.add_hook(PreTick, spawner)
            world.add_processor(boost, Velocity)
            if vectorised:
                add_vector_processor(world, counted, Position, Velocity, writes=[Position])
            else:
                world.add_processor(move_each, Position, Velocity)

        return register

    vector, each = await _world(setup(True)), await _world(setup(False))
    vector.publisher, each.publisher = Folding(vector), Folding(each)
    for _ in range(3):
        seen.clear()
        await vector.step()
        await each.step()
        assert vector.publisher.state == each.publisher.state  # the same published state
        assert sorted(seen) == [e for e, _ in vector.query(Position, Velocity)]  # each entity once
    assert sorted(vector.state.items()) == sorted(each.state.items())


async def test_a_failing_processor_leaves_no_column_behind():
    fail = [True]

    def move_then_fail(world, tick, table):
        table[Position].x += 1.0
        if fail[0] and len(table) < 10:  # after the first table's columns were overridden
            raise RuntimeError("boom")

    world = await _world(lambda w: add_vector_processor(w, move_then_fail, Position, Velocity, writes=[Position]))
    before = sorted(world.state.items())
    with pytest.raises(RuntimeError):
        await world.step()
    assert sorted(world.state.items()) == before and world.tick == 0
    fail[0] = False
    await world.step()
    assert [c[type_key(Position)].x for _, c in sorted(world.state.items())][:2] == [x + 1.0 for x in (0.0, 0.1)]


async def test_a_per_entity_processor_reads_the_columns_a_vector_processor_wrote_before_it_in_the_tick():
    def record(w, tick, entity_id, components):
        seen.append((entity_id, components[0].x))

    seen: list[tuple[int, float]] = []
    both = await _world(lambda w: [add_vector_processor(w, move, Position, Velocity, writes=[Position]),
                                   w.add_processor(record, Position, Velocity)])  # fmt: skip
    before = both.query(Position, Velocity)  # reads the committed columns, before `move` replaces them
    await both.step()
    assert seen == [(entity_id, position.x + velocity.dx) for entity_id, (position, velocity) in before]


async def test_whole_column_deltas_replace_the_deltas_they_cover():
    published = {"snapshot": [], "deltas": []}
    flags = []

    class Ledgerish:  # keeps what the ledger keeps: the snapshot's chunks and the deltas since
        async def publish(self, prepared):
            flags.append("S" if prepared.snapshot else "R" if prepared.replaces_deltas else "d")
            if prepared.snapshot:
                published["snapshot"], published["deltas"] = list(prepared.chunks), []
            elif prepared.chunks:
                published["deltas"] = ([] if prepared.replaces_deltas else published["deltas"]) + list(prepared.chunks)

    def loaded():
        state = {}
        for chunk in published["snapshot"] + published["deltas"]:
            for entity_id, text in columnar.decode(chunk):
                state[entity_id] = overlay(state.get(entity_id), text)
        return {e: t for e, t in state.items() if t is not None}

    world = await _world(lambda w: add_vector_processor(w, move, Position, Velocity, writes=[Position]))
    world.publisher = Ledgerish()
    published["snapshot"] = chunk_entries([(e, _text(c)) for e, c in sorted(world.state.items())])  # the world's first
    await world.step()
    for tick in range(8):
        if tick == 3:  # one entity changed through the per-entity API: not whole columns
            async with world.lock:
                world.atomically(lambda: world.update(1, [Velocity(dx=0.0, dy=0.0)]))
        await world.step()
        assert loaded() == {e: _text(c) for e, c in world.state.items()}
    # a delta, then deltas of the same whole column replacing it; the per-entity update is not
    # whole columns (here its delta would outgrow the small snapshot: a snapshot); then again
    assert flags == ["d", "R", "R", "R", "S", "d", "R", "R", "R"]
    assert len(published["deltas"]) == 1
