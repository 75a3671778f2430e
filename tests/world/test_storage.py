"""The write-set encoding (docs/storage.md): each entity's text is exactly the canonical JSON of
its component values, encoded once per change, chunked within bounds, and digested as sent."""

import hashlib
import json
import random

import numpy as np
import pytest

from archetype.canonical import NonCanonicalValueError, canonical_json
from archetype.world import AsyncWorld, ComponentValue
from archetype.world.columnar import id_runs, run_ids, valid_runs
from archetype.world.commit import CommitCoordinator, EntityEncoder, chunk_entries, commit_token
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


def test_the_commit_token_head_lists_the_written_ids_as_runs_canonically():
    head = {"chunks": 1, "replaces_deltas": False, "settlements": [], "snapshot": False, "tick": 3, "world_id": "w", "writer_epoch": 0,
            "written_runs": [[1, 3], [5, 5], [2**53 - 1, 2**53 - 1]]}  # fmt: skip
    expected = hashlib.sha256(canonical_json(head).encode() + b"\n[[1,null]]").hexdigest()
    assert commit_token(head, ["[[1,null]]"]) == expected
    coordinator = CommitCoordinator("w")
    manifest = coordinator.prepare(3, 0, [1, 2, 3, 5, 2**53 - 1], ["[[1,null]]"], snapshot=False).manifest
    assert manifest.written_runs == ((1, 3), (5, 5), (2**53 - 1, 2**53 - 1))
    assert manifest.commit_token == expected
    assert manifest.written_entity_ids == [1, 2, 3, 5, 2**53 - 1] and manifest.written_count == 5


@pytest.mark.parametrize("ids", [[], [7], list(range(1, 100_001)), [1, 2, 4, 5, 9], [3, *range(10, 20), 40, 41]])
def test_written_ids_are_their_maximal_runs(ids):
    runs = id_runs(ids)
    assert run_ids(runs) == ids and valid_runs(runs)
    assert all(b[0] > a[1] + 1 for a, b in zip(runs, runs[1:], strict=False))  # maximal: never adjacent


def test_id_runs_give_up_past_their_limit_and_read_numpy_ids_alike():
    rng = random.Random(7)
    for _ in range(200):
        ids = sorted(rng.sample(range(1, 400), rng.randint(1, 300)))
        runs = id_runs(ids)
        assert run_ids(runs) == ids and id_runs(np.array(ids, dtype=np.int64)) == runs
        limit = rng.randint(0, 60)
        assert id_runs(ids, limit=limit) == (None if len(runs) > limit else runs)


@pytest.mark.parametrize("runs", [[[0, 1]], [[2, 1]], [[1, 2], [3, 4]], [[1, 4], [3, 6]], [[1]], [[1, 2**53]], [[1.0, 2]],
                                  "1-2", [[5, 6], [1, 2]]])  # fmt: skip
def test_runs_that_are_not_canonical_are_told(runs):
    assert not valid_runs(runs)


async def test_a_tick_sends_a_delta_until_the_deltas_outgrow_the_state():
    sent = []

    class Recorder:
        async def publish(self, prepared):
            sent.append((prepared.snapshot, prepared.manifest.written_entity_ids, sum(map(len, prepared.chunks))))

    world = AsyncWorld("w", publisher=Recorder())
    await world.ensure_entity_ids(70)
    async with world.lock:
        ids = world.atomically(lambda: [world.spawn([Health(hp=i)]) for i in range(64)])
    for hp in range(12):
        await world.step()
        async with world.lock:
            world.atomically(lambda hp=hp: world.update(ids[0], [Health(hp=100 + hp)]))
    await world.step()
    # the first publication snapshots; one change a tick is a delta until the deltas' characters
    # since the last snapshot would exceed the snapshot's
    assert [written for _, written, _ in sent] == [ids, *[[ids[0]]] * 12]
    assert [snapshot for snapshot, _, _ in sent] == [True, *[False] * 4, True, *[False] * 4, True, False, False]
    snapshot_size, deltas = sent[0][2], 0
    for snapshot, _, size in sent[1:]:
        assert snapshot == (deltas + size > snapshot_size)
        snapshot_size, deltas = (size, 0) if snapshot else (snapshot_size, deltas + size)


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


async def test_a_tick_changing_every_entity_whole_is_a_snapshot_without_encoding_a_delta(monkeypatch):
    sent = []

    class Recorder:
        async def publish(self, prepared):
            sent.append(prepared.snapshot)

    world = AsyncWorld("w", publisher=Recorder())
    await world.ensure_entity_ids(10)
    async with world.lock:
        ids = world.atomically(lambda: [world.spawn([Health(hp=i)]) for i in range(8)])
    await world.step()
    encoded = []
    encode = world._encode
    monkeypatch.setattr(world, "_encode", lambda write_set, snapshot: encoded.append(snapshot) or encode(write_set, snapshot))
    for hp in range(3):
        async with world.lock:
            world.atomically(lambda hp=hp: [world.update(e, [Health(hp=hp)]) for e in ids])
        await world.step()
    assert sent == [True] * 4 and encoded == [True] * 3
