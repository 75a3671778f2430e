"""The write-set encoding (docs/storage.md): each entity's text is exactly the canonical JSON of
its component values, encoded once per change, chunked within bounds, and digested as sent."""

import hashlib
import json

import pytest

from archetype.canonical import NonCanonicalValueError, canonical_json
from archetype.world import AsyncWorld, ComponentValue
from archetype.world.commit import EntityEncoder, chunk_entries, commit_token, listing_text
from archetype.world.components import component_text
from archetype.world.state import WorldState
from tests.component_modules.alpha import Health, Position


def wire(components) -> str:
    """The reference: the canonical JSON of the wire values, in component-key order."""
    values = [ComponentValue.from_component(c).model_dump(mode="json") for c in components]
    return canonical_json(sorted(values, key=lambda v: f"{v['name']}:{v['fingerprint']}"))


@pytest.mark.parametrize("component", [Position(x=-0.0, y=2.0), Position(x=1e-300, y=-2.5e300), Health(hp=2**53 - 1)])
def test_a_component_text_is_its_canonical_wire_value(component):
    assert component_text(component) == canonical_json(ComponentValue.from_component(component).model_dump(mode="json"))


async def test_an_entity_is_encoded_once_per_change_and_unchanged_components_keep_their_text(monkeypatch):
    world = AsyncWorld("w")
    await world.ensure_entity_ids(1)
    position, health = Position(x=1.0, y=2.0), Health(hp=3)
    async with world.lock:
        entity = world.atomically(lambda: world.spawn([position, health]))
    await world.step()
    encoded = []
    monkeypatch.setattr("archetype.world.commit.component_text", lambda c: encoded.append(c) or component_text(c))
    assert world.encoder.text(entity, world.state.get(entity)) == wire([position, health])
    assert encoded == []  # the committed table's texts, made when the spawn was encoded
    moved = Position(x=5.0, y=2.0)
    async with world.lock:
        world.atomically(lambda: world.update(entity, [moved]))
    await world.step()
    assert encoded == [moved]  # Health kept its text
    assert world.encoder.text(entity, world.state.get(entity)) == wire([moved, health]) and encoded == [moved]


def test_a_value_without_a_canonical_form_is_refused():
    bad = Position.model_construct(x=float("nan"), y=0.0)
    with pytest.raises(NonCanonicalValueError):
        EntityEncoder(WorldState()).text(1, {"Position:" + Position.component_fingerprint(): bad})


def test_chunks_are_bounded_ordered_and_parse_back():
    entries = [(i, None if i % 5 == 0 else f'[{{"data":{{"n":{i}}}}}]') for i in range(1, 200)]
    chunks = chunk_entries(entries, limit=300)
    assert len(chunks) > 1 and all(len(c) <= 300 for c in chunks)
    assert [tuple(e) for c in chunks for e in json.loads(c)] == [
        (i, None if text is None else json.loads(text)) for i, text in entries
    ]
    assert chunk_entries([(1, "x" * 500)], limit=300) == ["[[1,x" + "x" * 499 + "]]"]  # alone when larger
    assert chunk_entries([]) == []


def test_the_commit_token_digests_the_bytes_sent():
    head = {"tick": 1, "world_id": "w"}
    expected = hashlib.sha256(b'{"tick":1,"world_id":"w"}\n[[1,null]]\n[[2,null]]').hexdigest()
    assert commit_token(head, ["[[1,null]]", "[[2,null]]"]) == expected


def test_the_commit_token_head_lists_the_written_ids_canonically():
    head = {"chunks": 1, "settlements": [], "snapshot": False, "tick": 3, "world_id": "w", "writer_epoch": 0,
            "written_entity_ids": [1, 5, 2**53 - 1]}  # fmt: skip
    expected = hashlib.sha256(canonical_json(head).encode() + b"\n[[1,null]]").hexdigest()
    assert commit_token(head, ["[[1,null]]"]) == expected
    assert listing_text({"written_entity_ids": [1]}) == canonical_json({"written_entity_ids": [1]})


async def test_a_tick_sends_a_delta_until_the_deltas_outgrow_the_state():
    sent = []

    class Recorder:
        async def publish(self, prepared):
            sent.append((prepared.snapshot, prepared.manifest.written_entity_ids, len(prepared.chunks)))

    world = AsyncWorld("w", publisher=Recorder())
    await world.ensure_entity_ids(10)
    async with world.lock:
        ids = world.atomically(lambda: [world.spawn([Health(hp=i)]) for i in range(4)])
    for hp in range(5):
        await world.step()
        async with world.lock:
            world.atomically(lambda hp=hp: world.update(ids[0], [Health(hp=100 + hp)]))
    await world.step()
    # the first publication snapshots; one change a tick is a delta until the deltas reach the state's size
    assert sent == [(True, tuple(ids), 1), (False, (ids[0],), 1), (False, (ids[0],), 1), (False, (ids[0],), 1),
                    (True, (ids[0],), 1), (False, (ids[0],), 1)]  # fmt: skip


async def test_an_idle_tick_sends_nothing_and_visits_no_entity():
    world = AsyncWorld("w")
    await world.ensure_entity_ids(100)
    async with world.lock:
        world.atomically(lambda: [world.spawn([Health(hp=i)]) for i in range(100)])
    await world.step()
    world.state._table_of = _Untouchable(world.state._table_of)
    world.state._tables = {s: _UntouchableTable(t) for s, t in world.state._tables.items()}
    await world.step()
    assert world.coordinator.prepared is None


class _Untouchable(dict):
    def items(self):
        raise AssertionError("an idle tick iterated the committed entities")

    def __iter__(self):
        raise AssertionError("an idle tick iterated the committed entities")


class _UntouchableTable:
    def __init__(self, table):
        self.signature, self.keys, self.columns, self.index = table.signature, table.keys, table.columns, table.index

    @property
    def ids(self):
        raise AssertionError("an idle tick iterated a table's entities")
