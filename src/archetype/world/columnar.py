"""The columnar state chunk (docs/storage.md): how a tick's state write is encoded in bulk, a
column at a time, and decoded back into each entity's components text by any host (stdlib
`array`, `base64` and `json` only: the ledger decodes on Pyodide too).

A chunk covers the entities of one ascending id range; it is canonical JSON (compact, keys
sorted, ASCII):

    {"first":<id>,"last":<id>,"removed":[<id>,...],"sections":[<section>,...]}

`removed` are the entities a delta despawned (always empty in a snapshot); each section is the
entities of one signature (sections by their sorted component keys, each section's rows in id
order):

    {"components":[<component>,...],"ids":"<base64 of little-endian int64 ids>"}

and each component, in component-key order (`<name>:<fingerprint>`), is either numeric columns,
for a type whose fields are all plain `float` / `int` (`numeric_fields`), or its rows' data:

    {"columns":{"<field>":{"f8"|"i8":"<base64 of little-endian float64/int64 values>"},...},
     "fingerprint":"<64 hex>","name":"<class>"}
    {"fingerprint":"<64 hex>","name":"<class>","rows":[<canonical data JSON>,...]}

with the fields in sorted order. Decoding writes each entity's components text exactly as
`component_text` would (`{"data":{"x":<repr>,...},...}`: a float64 read back is the float that
was written, and `repr` is how `json` writes it), so the text `load_state` answers is the text
the per-entity encoding defines, whoever encoded it.
"""

from __future__ import annotations

import base64
import json
import math
import operator
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Sequence, Set
from dataclasses import dataclass
from typing import Any

from archetype.canonical import MAX_SAFE_INTEGER, NonCanonicalValueError, canonical_text
from archetype.world.components import Component

CHUNK_HEAD = '{"first":'
RUNS_PER_ID = 4
"""A section lists its ids as runs when they form at most one run per RUNS_PER_ID ids (a run's
text is then shorter than the base64 of the ids it stands for)."""
CHUNK_BYTES = 1_000_000
"""About the most characters a state chunk holds (unless one entity alone is larger): its values
take at most 90% of it, its headers the rest; half the Durable Object's 2 MB row limit, so a chunk
is always one row on every authority."""
# costs are in thirds of a character: a numeric value is 8 bytes, 32/3 characters of base64
_NUMERIC_COST = 32
_HEAD_COST = 100  # '{"first":<id>,"last":<id>,"removed":[],"sections":[]}' and the sections' commas
_KINDS = {float: "f8", int: "i8"}
_ARRAY_CODES = {"f8": "d", "i8": "q"}
_FIELDS: dict[type[Component], tuple[tuple[str, str], ...] | None] = {}


def numeric_fields(cls: type[Component]) -> tuple[tuple[str, str], ...] | None:
    """`(field, "f8" | "i8")` in field-name order when `cls` is encoded as numeric columns (every
    field a plain `float` or `int`: no aliases, serializers, computed fields, private attributes
    or post-init hook, so a component is exactly its field values); None otherwise."""
    if cls in _FIELDS:
        return _FIELDS[cls]
    decorators = cls.__pydantic_decorators__
    plain = bool(cls.model_fields) and not (
        cls.__private_attributes__
        or cls.model_computed_fields
        or decorators.field_serializers
        or decorators.model_serializers
        or cls.__pydantic_post_init__
    )
    for name, info in cls.model_fields.items():
        if info.annotation not in _KINDS or info.alias not in (None, name) or info.serialization_alias not in (None, name):
            plain = False
        if not name.isascii():
            plain = False
    found = tuple((name, _KINDS[cls.model_fields[name].annotation]) for name in sorted(cls.model_fields)) if plain else None  # type: ignore[index]
    _FIELDS[cls] = found
    return found


@dataclass
class Part:
    """One component type's values in a section: `fields` (field name -> its values, a sequence
    or a numpy array, for a numeric type) or `texts` (each row's `component_text`)."""

    cls: type[Component]
    fields: dict[str, Any] | None = None
    texts: Sequence[str] | None = None


@dataclass
class Section:
    """The entities of one signature: ascending `ids` (a sequence or a numpy array), a `Part` per
    component type in component-key order, each with a value per id."""

    ids: Any
    parts: list[Part]
    # a delta's section carrying only the components that changed: each replaces the component of
    # the same key of its entity as published, whose other components stay
    partial: bool = False


def encode(sections: Sequence[Section], removed: Sequence[int]) -> list[str]:
    """The chunks of a state write: `sections` (each a different signature) and the `removed`
    ids, packed greedily in id order into chunks of at most CHUNK_BYTES characters, headers
    counted (an entity alone larger than that gets a chunk of its own). NonCanonicalValueError
    for a value that has no canonical form."""
    bounds = _bounds(sections, removed, 3 * (CHUNK_BYTES - _HEAD_COST))
    return [_chunk(sections, removed, low, high) for low, high in bounds]


def _row_costs(section: Section) -> int | list[int]:
    """A row's cost: the same for every row of a numeric section, else one per row."""
    fixed = _NUMERIC_COST  # the id
    texts: list[Sequence[str]] = []
    for part in section.parts:
        if part.fields is not None:
            fixed += _NUMERIC_COST * len(part.fields)
        else:
            assert part.texts is not None
            texts.append(part.texts)
    if not texts:
        return fixed
    return [fixed + 3 * sum(len(t) for t in row) for row in zip(*texts, strict=True)]


def _header_cost(section: Section) -> int:
    """At least what a section's text adds besides its values (identities, keys, base64 padding)."""
    cost = 40
    for part in section.parts:
        cost += 80 + len(part.cls.__name__) + (0 if part.fields is None else 20 * len(part.fields) + sum(map(len, part.fields)))
    return 3 * cost


def _bounds(sections: Sequence[Section], removed: Sequence[int], budget: int) -> list[tuple[int, int]]:
    """The id range [low, high] of each chunk."""
    costs = [_row_costs(section) for section in sections]
    headers = [_header_cost(section) for section in sections]
    if len(sections) == 1 and not removed and isinstance(costs[0], int):
        ids, per = sections[0].ids, max(1, (budget - headers[0]) // costs[0])
        return [(int(ids[start]), int(ids[min(start + per, len(ids)) - 1])) for start in range(0, len(ids), per)]
    rows: list[tuple[int, int, int]] = [(entity_id, 3 * 17, -1) for entity_id in removed]
    for index, (section, cost) in enumerate(zip(sections, costs, strict=True)):
        ids = as_list(section.ids)
        rows += zip(ids, [cost] * len(ids) if isinstance(cost, int) else cost, [index] * len(ids), strict=True)
    rows.sort()
    bounds: list[tuple[int, int]] = []
    used, low, high = 0, 0, 0
    present: set[int] = set()
    for entity_id, cost, index in rows:
        header = headers[index] if index >= 0 and index not in present else 0
        if used and used + header + cost > budget:
            bounds.append((low, high))
            used, present = 0, set()
            header = headers[index] if index >= 0 else 0
        if not used:
            low = entity_id
        used += header + cost
        present.add(index)
        high = entity_id
    if used:
        bounds.append((low, high))
    return bounds


def _chunk(sections: Sequence[Section], removed: Sequence[int], low: int, high: int) -> str:
    gone = ",".join(str(e) for e in removed if low <= e <= high)
    texts = []
    for section in sections:
        start, stop = _span(section.ids, low, high)
        if start == stop:
            continue
        components = [_component(part, start, stop) for part in section.parts]
        ids = section.ids[start:stop]
        runs = id_runs(ids, limit=len(ids) // RUNS_PER_ID)
        listed = '"ids":"' + _b64(ids, "i8") + '"' if runs is None else '"id_runs":' + json.dumps(runs, separators=(",", ":"))
        flag = ',"partial":true' if section.partial else ""
        texts.append('{"components":[' + ",".join(components) + "]," + listed + flag + "}")
    return f'{{"first":{low},"last":{high},"removed":[{gone}],"sections":[{",".join(texts)}]}}'


def _component(part: Part, start: int, stop: int) -> str:
    cls = part.cls
    identity = f'"fingerprint":"{cls.__component_fingerprint__}","name":"{cls.__name__}"'
    if part.fields is None:
        assert part.texts is not None
        cut = len(cls.__component_wire_suffix__)
        rows = ",".join(text[8:-cut] for text in part.texts[start:stop])  # each text's data: after '{"data":'
        return "{" + identity + ',"rows":[' + rows + "]}"
    fields = numeric_fields(cls)
    assert fields is not None
    columns = []
    for field, kind in fields:
        values = part.fields[field][start:stop]
        _check(values, kind, cls, field)
        columns.append(f'"{field}":{{"{kind}":"{_b64(values, kind)}"}}')
    return '{"columns":{' + ",".join(columns) + "}," + identity + "}"


def _span(ids: Any, low: int, high: int) -> tuple[int, int]:
    """The rows of ascending `ids` within [low, high]."""
    if hasattr(ids, "searchsorted"):
        return int(ids.searchsorted(low, "left")), int(ids.searchsorted(high, "right"))
    return bisect_left(ids, low), bisect_right(ids, high)


def id_runs(ids: Sequence[int], limit: int | None = None) -> list[list[int]] | Any:
    """Ascending distinct `ids` as their maximal runs `[first, last]` of consecutive ids: one run
    for a table of consecutive ids however long, found in O(runs x log(ids)) (a slice whose ends
    are as far apart as it is long is one run; a short one is scanned); None once there are more
    than `limit`."""
    runs: list[list[int]] = []
    pending = [(0, len(ids))] if len(ids) else []
    while pending:  # depth first, lowest slice first: the runs come out in id order
        start, stop = pending.pop()
        first, last = int(ids[start]), int(ids[stop - 1])
        if last - first == stop - 1 - start:
            found = [(first, last)]
        elif stop - start <= _SCANNED:
            part = as_list(ids[start:stop])
            # where the next id is not the one after, a run ends (the steps are taken in C)
            ends = [row for row, step in enumerate(map(operator.sub, part[1:], part)) if step != 1]
            found = list(zip([first, *[part[row + 1] for row in ends]], [*[part[row] for row in ends], last], strict=True))
        else:
            middle = (start + stop) // 2
            pending += [(middle, stop), (start, middle)]
            continue
        for low, high in found:
            if runs and runs[-1][1] == low - 1:
                runs[-1][1] = high
            elif limit is not None and len(runs) == limit:
                return None
            else:
                runs.append([low, high])
    return runs


_SCANNED = 128  # a slice this short with a gap is scanned, not halved again


def run_ids(runs: Sequence[Sequence[int]]) -> list[int]:
    """The ids of `id_runs` runs, ascending."""
    return [entity_id for first, last in runs for entity_id in range(first, last + 1)]


def valid_runs(runs: Any) -> bool:
    """Whether `runs` is what `id_runs` writes: ascending, maximal (neither overlapping nor
    adjacent) `[first, last]` runs of entity ids within 1..2**53-1."""
    if not isinstance(runs, list | tuple):
        return False
    previous = -1
    for run in runs:
        if not isinstance(run, list | tuple) or len(run) != 2 or not all(type(e) is int for e in run):
            return False
        first, last = run
        if not previous + 1 < first <= last <= MAX_SAFE_INTEGER:
            return False
        previous = last
    return True


def as_list(values: Any) -> list[Any]:
    """A sequence or a numpy array as a list of Python numbers."""
    return values.tolist() if hasattr(values, "tolist") else list(values)


def _check(values: Any, kind: str, cls: type[Component], field: str) -> None:
    """NonCanonicalValueError unless every value is a finite float / an integer within +/-(2**53-1)."""
    if not len(values):
        return
    if kind == "f8":
        finite = bool((abs(values) <= sys.float_info.max).all()) if hasattr(values, "all") else all(map(math.isfinite, values))
        if not finite:
            raise NonCanonicalValueError(
                f"$.{field}: {cls.__name__}.{field} has a value that is not a finite number",
                path=f"$.{field}", reason="not a finite number (JSON has no NaN or infinities)",
            )  # fmt: skip
        return
    # (an array's own min and max: the builtins would walk it a numpy scalar at a time)
    low, high = (values.min(), values.max()) if hasattr(values, "min") else (min(values), max(values))
    if high > MAX_SAFE_INTEGER or low < -MAX_SAFE_INTEGER:
        raise NonCanonicalValueError(
            f"$.{field}: {cls.__name__}.{field} has an integer outside +/-(2**53-1)",
            path=f"$.{field}", reason="integer outside +/-(2**53-1)",
        )  # fmt: skip


def _b64(values: Any, kind: str) -> str:
    """Base64 of the values as little-endian float64 / int64."""
    if hasattr(values, "astype"):
        raw = values.astype("<f8" if kind == "f8" else "<i8").tobytes()
    else:
        packed = array(_ARRAY_CODES[kind], values)
        if sys.byteorder == "big":
            packed.byteswap()
        raw = packed.tobytes()
    return base64.b64encode(raw).decode("ascii")


def column_values(column: dict[str, str]) -> list[Any]:
    """The values of a numeric column as a chunk (or a state read's section) holds it: `{"f8" | "i8": base64}`."""
    ((kind, text),) = column.items()
    return _unpack(text, kind)


def _unpack(text: str, kind: str, start: int = 0, stop: int | None = None) -> list[Any]:
    """The values of a base64 column, or of its rows `start:stop`."""
    packed = array(_ARRAY_CODES[kind])
    packed.frombytes(base64.b64decode(text))
    if sys.byteorder == "big":
        packed.byteswap()
    return (packed if start == 0 and stop is None else packed[start:stop]).tolist()


class Partial(dict[str, str]):
    """What a partial section holds of an entity (`decode`): component key
    (`<name>:<fingerprint>`) -> that component's text, to replace in the entity's components text."""


_SUFFIXES: dict[str, str] = {}


def component_text(key: str, data: str) -> str:
    """A component's text (`{"data":...,"fingerprint":...,"name":...}`) from its key and data text."""
    suffix = _SUFFIXES.get(key)
    if suffix is None:
        name, _, fingerprint = key.partition(":")
        suffix = _SUFFIXES.setdefault(key, f',"fingerprint":"{fingerprint}","name":"{name}"}}')
    return '{"data":' + data + suffix


class Values:
    """One component type's values for the rows of a `Piece`: numeric columns (each field's kind
    and a value per row, the float64 / int64 values written) or data rows (each row's parsed
    data). Each row's data text is written only when asked for, a whole column at once."""

    __slots__ = ("_texts", "fields", "key", "rows")

    def __init__(self, key: str, fields: list[tuple[str, str, list[Any]]] | None, rows: list[Any] | None,
                 texts: list[str] | None = None) -> None:  # fmt: skip
        self.key = key
        self.fields = fields  # (field, "f8" | "i8", values), in field-name order
        self.rows = rows  # parsed data (None: numeric, or given as `texts` only)
        self._texts = texts  # each row's data text, once written (or as given)


    def text(self, row: int) -> str:
        """The data text of `row`: exactly as `component_text` writes a component's data."""
        texts = self._texts
        if texts is None:
            if self.fields is None:
                texts = [canonical_text(data) for data in self.rows]  # type: ignore[union-attr]
            else:
                template = "{" + ",".join(f'"{field}":%r' for field, _, _ in self.fields) + "}"
                texts = [template % row for row in zip(*(values for _, _, values in self.fields), strict=True)]
            self._texts = texts
        return texts[row]


class Piece:
    """The rows of one section of a chunk within an id range: ascending `ids`, a `Values` per
    component type (of those asked for) in component-key order, and whether it is partial."""

    __slots__ = ("ids", "partial", "values")

    def __init__(self, ids: list[int], values: list[Values], partial: bool) -> None:
        self.ids, self.values, self.partial = ids, values, partial


def pieces(chunk: Any, low: int = 1, high: int = MAX_SAFE_INTEGER, keys: Set[str] | None = None) -> tuple[list[int], list[Piece]]:
    """A parsed chunk (`json.loads` of either layout: columnar, or the per-entity
    `[[id,components],...]`) within the id range [low, high], with only the component types of
    `keys` (None: all): the ids it removes, and its sections' rows in range. Only the columns'
    rows in range are taken, and no value is written out as text: a chunk read for a page of its
    entities costs its parse and that page."""
    if isinstance(chunk, list):  # the per-entity layout: a piece per entity
        removed, found = [], []
        for entity_id, components in chunk:
            if not low <= entity_id <= high:
                continue
            if components is None:
                removed.append(entity_id)
                continue
            values = []
            for component in components:
                key = f'{component.get("name")}:{component.get("fingerprint")}'
                if keys is None or key in keys:
                    values.append(Values(key, None, [component.get("data")]))
            found.append(Piece([entity_id], values, False))
        return removed, found
    removed = [entity_id for entity_id in chunk["removed"] if low <= entity_id <= high]
    found = []
    for section in chunk["sections"]:
        piece = section_piece(section, low, high, keys)
        if piece is not None:
            found.append(piece)
    return removed, found


def section_piece(section: Any, low: int, high: int, keys: Set[str] | None, row_texts: bool = False) -> Piece | None:
    """One parsed section's rows within [low, high] (its ids a list, base64 or runs), None when
    none is; also reads `read_state`'s sections (`row_texts`: their rows are data texts)."""
    listed = section.get("ids")
    ids: Sequence[int] = listed if isinstance(listed, list) else _unpack(listed, "i8") if listed else run_ids(section["id_runs"])
    start, stop = bisect_left(ids, low), bisect_right(ids, high)
    if start == stop:
        return None
    values = []
    for component in section["components"]:
        key = f'{component["name"]}:{component["fingerprint"]}'
        if keys is not None and key not in keys:
            continue
        if "rows" in component:
            rows = component["rows"][start:stop]
            values.append(Values(key, None, None, rows) if row_texts else Values(key, None, rows))
            continue
        fields = []
        for field, column in component["columns"].items():
            ((kind, text),) = column.items()
            fields.append((field, kind, _unpack(text, kind, start, stop)))
        values.append(Values(key, fields, None))
    return Piece(list(ids[start:stop]), values, bool(section.get("partial")))


def piece_section(ids: list[int], columns: list[list[tuple[Values, int]]]) -> dict[str, Any]:
    """A section of this layout (its ids listed) holding, for each entity of `ids`, the value at
    (Values, row) of each column: numeric columns as base64 when every value of the column is
    numeric (so with the same fields), else data rows as texts (a row's text keeps its floats as
    written where a parsed value might not: a Durable Object's RPC turns 1.0 into 1)."""
    components = []
    for column in columns:
        key = column[0][0].key
        name, _, fingerprint = key.partition(":")
        first = column[0][0].fields
        if first is not None and all(values.fields is not None for values, _ in column):
            encoded = {}
            for index, (field, kind, _) in enumerate(first):
                gathered = [values.fields[index][2][row] for values, row in column]  # type: ignore[index]
                encoded[field] = {kind: _b64(gathered, kind)}
            components.append({"name": name, "fingerprint": fingerprint, "columns": encoded})
        else:
            components.append({"name": name, "fingerprint": fingerprint, "rows": [values.text(row) for values, row in column]})
    return {"ids": ids, "components": components}


def decode(body: str) -> list[tuple[int, str | Partial | None]]:
    """Every entity of a chunk (either layout) by id: its components text, a Partial (the texts of
    the components a partial section replaces), or None when the chunk removes it."""
    removed, found = pieces(json.loads(body))
    entities: list[tuple[int, str | Partial | None]] = [(entity_id, None) for entity_id in removed]
    for piece in found:
        for row, entity_id in enumerate(piece.ids):
            texts = [(values.key, component_text(values.key, values.text(row))) for values in piece.values]
            entities.append((entity_id, Partial(texts) if piece.partial else "[" + ",".join(t for _, t in texts) + "]"))
    entities.sort(key=_first)
    return entities


def _first(entry: tuple[int, Any]) -> int:
    return entry[0]
