"""The columnar state chunk (archetype.world.columnar, docs/storage.md): canonical JSON of
base64 little-endian columns, bounded, decoded by the stdlib alone into exactly the per-entity
components text, and the same bytes whether the columns are lists or numpy arrays."""

import json
import math

import numpy as np
import pytest

from archetype.canonical import NonCanonicalValueError, canonical_json
from archetype.world import columnar
from archetype.world.columnar import Part, Section
from archetype.world.commit import chunk_entries
from archetype.world.components import component_text
from tests.component_modules.alpha import Health, Position
from tests.component_modules.mixed import Tag
from tests.world.test_storage import wire

POSITIONS = [Position(x=-0.0, y=2.0), Position(x=1e-300, y=-2.5e300), Position(x=0.1, y=3.0), Position(x=7.0, y=1e16)]
HEALTHS = [Health(hp=2**53 - 1), Health(hp=-(2**53 - 1)), Health(hp=0), Health(hp=5)]
TAGS = [
    Tag(label='é"\\', weight=0.5),
    Tag(label="", weight=-0.0),
    Tag(label="x" * 50, weight=1e300),
    Tag(label="a", weight=2.0),
]
IDS = [3, 9, 10, 2**53 - 1]


def sections(as_arrays=False):
    wrap = np.asarray if as_arrays else list
    numeric = Section(wrap(IDS[:3]), [
        Part(Health, fields={"hp": wrap([h.hp for h in HEALTHS[:3]])}),
        Part(Position, fields={f: wrap([getattr(p, f) for p in POSITIONS[:3]]) for f in ("x", "y")}),
    ])  # fmt: skip
    mixed = Section(wrap(IDS[3:]), [
        Part(Position, fields={f: wrap([getattr(p, f) for p in POSITIONS[3:]]) for f in ("x", "y")}),
        Part(Tag, texts=[component_text(t) for t in TAGS[3:]]),
    ])  # fmt: skip
    return [numeric, mixed]


def test_a_chunk_decodes_to_each_entitys_canonical_components_text():
    (chunk,) = columnar.encode(sections(), removed=[4, 5])
    assert chunk.startswith('{"first":3,"last":9007199254740991,"removed":[4,5],"sections":[')
    assert canonical_json(json.loads(chunk)) == chunk  # the chunk is canonical JSON itself
    expected = [(i, wire([h, p])) for i, h, p in zip(IDS[:3], HEALTHS, POSITIONS, strict=False)]
    expected += [(4, None), (5, None), (IDS[3], wire([POSITIONS[3], TAGS[3]]))]
    assert columnar.decode(chunk) == sorted(expected, key=lambda e: e[0])


def test_data_rows_keep_their_canonical_text():
    section = Section([1, 2, 3], [Part(Tag, texts=[component_text(t) for t in TAGS[:3]])])
    (chunk,) = columnar.encode([section], [])
    assert columnar.decode(chunk) == [(i + 1, wire([t])) for i, t in enumerate(TAGS[:3])]


def test_lists_and_numpy_arrays_encode_to_the_same_bytes():
    assert columnar.encode(sections(), [4]) == columnar.encode(sections(as_arrays=True), [4])


def test_chunks_are_bounded_disjoint_ranges(monkeypatch):
    monkeypatch.setattr("archetype.world.columnar.CHUNK_BYTES", 1_000)
    ids = list(range(1, 501))
    section = Section(ids, [Part(Position, fields={"x": [float(i) for i in ids], "y": [0.5] * 500})])
    tagged = Section([1_000, 1_001], [Part(Tag, texts=[component_text(Tag(label="y" * 3_000, weight=1.0))] * 2)])
    chunks = columnar.encode([section, tagged], removed=[600])
    ranges = [(json.loads(c)["first"], json.loads(c)["last"]) for c in chunks]
    assert all(low <= high < next_low for (low, high), (next_low, _) in zip(ranges, ranges[1:], strict=False))
    assert all(len(c) <= 1_000 for c in chunks[:-2])  # the two large entities get a chunk each
    assert [len(json.loads(c)["sections"][0]["components"][0]["rows"]) for c in chunks[-2:]] == [1, 1]
    decoded = [e for c in chunks for e in columnar.decode(c)]
    assert [e for e, _ in decoded] == [*ids, 600, 1_000, 1_001]
    assert decoded[0] == (1, wire([Position(x=1.0, y=0.5)]))


@pytest.mark.parametrize("as_arrays", [False, True])
@pytest.mark.parametrize(
    ("cls", "field", "bad"),
    [(Position, "x", math.nan), (Position, "y", -math.inf), (Health, "hp", 2**53), (Health, "hp", -(2**53))],
)
def test_a_value_without_a_canonical_form_is_refused(as_arrays, cls, field, bad):
    values = {f: [1, bad] if f == field else [1, 2] for f in cls.model_fields}
    if as_arrays:
        values = {f: np.asarray(v, dtype=np.float64 if cls is Position else np.int64) for f, v in values.items()}
    with pytest.raises(NonCanonicalValueError):
        columnar.encode([Section([1, 2], [Part(cls, fields=values)])], [])


def test_the_per_entity_layout_still_decodes():
    (chunk,) = chunk_entries([(1, wire([POSITIONS[0]])), (2, None)])
    assert columnar.decode(chunk) == [(1, wire([POSITIONS[0]])), (2, None)]


def test_only_plain_numeric_types_are_columns():
    assert columnar.numeric_fields(Position) == (("x", "f8"), ("y", "f8"))
    assert columnar.numeric_fields(Health) == (("hp", "i8"),)
    assert columnar.numeric_fields(Tag) is None
