"""Pages of a world's published state, read from its stored chunks (docs/storage.md).

The state at a tick is the last snapshot published at or before it (its chunks: disjoint ascending
id ranges) with the deltas published since, up to that tick, laid over them, later ticks winning
(`StateAt`: which rows those are). A page is read span by span: the span of snapshot chunk
i runs from its first id to the next chunk's first id less one (the first span from id 1, the last
to the highest id), so each entity belongs to exactly one span, that of the one chunk that may hold
it. For a span, only its chunk and the deltas whose id range overlaps it are parsed (each delta at
most once per page), into `columnar.Piece`s of the rows within the span (and of the component
types asked for). The overlay is kept by reference, not by copying values: each entity points at
the row of the piece that holds it whole (the snapshot's, or a later whole entry's), and each
component type at the row of the latest partial piece that replaced it, if later than that. So a
page costs what its spans hold, never the whole world, however large (paging through 100,000
entities holds one span's chunks at a time), and no value is written out as text unless the
answer is texts (`load_state`, the `entities` layout): `read_state` answers the values in
sections, numeric columns still as the bytes they were stored as.

Every authority runs this Python over its own SQL port, so every one answers the same bytes.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_left, bisect_right
from collections.abc import Sequence, Set
from dataclasses import dataclass
from itertools import repeat
from typing import Any, cast

from archetype.canonical import MAX_SAFE_INTEGER
from archetype.commands import ledger_sql as q
from archetype.commands.ledger_rows import StateSection
from archetype.commands.port import SqlPort
from archetype.world import columnar

# A delta's opening: a columnar chunk names its first and last id, a per-entity one its first only.
_DELTA_HEAD = re.compile(r'\{"first":([0-9]+),"last":([0-9]+),|\[\[([0-9]+),')
# A filtered state read (`read_state`): the most entities of a page, entity ids and component
# types it may name (all of them fit in a URL's query), and the snapshot chunks (about a megabyte
# each) one page reads at most.
STATE_READ_LIMIT = 10_000
STATE_READ_IDS = 1_000
STATE_READ_TYPES = 32
STATE_READ_CHUNKS = 8


@dataclass(frozen=True)
class StateAt:
    """The stored rows that make a world's state at `tick` (docs/storage.md, "State at a tick"): the
    chunks of the snapshot published at `snapshot_tick` (None: no snapshot yet) and the deltas of
    ticks `deltas_from`..`tick`. The deltas start at the later of the snapshot's tick (a component
    migration's delta may follow a snapshot in its tick: a tick publishes a snapshot or a delta,
    never both) and the last delta up to `tick` that replaced the deltas before it."""

    tick: int
    snapshot_tick: int | None
    deltas_from: int


def state_at(port: SqlPort, world_id: str, tick: int) -> StateAt:
    """Which rows make the state at `tick` (the caller checks that it is retained). Inside the
    caller's transaction."""
    snapshot_tick = port.execute(q.STATE_SNAPSHOT_TICK, (world_id, tick))[0][0]
    replacing_tick = port.execute(q.STATE_REPLACING_TICK, (world_id, tick))[0][0]
    starts = [t for t in (snapshot_tick, replacing_tick) if t is not None]
    return StateAt(tick, snapshot_tick, max(starts) if starts else -MAX_SAFE_INTEGER)


class _Deltas:
    """The deltas of the state at a tick, in publication order, each parsed once it is first needed."""

    def __init__(self, port: SqlPort, world_id: str, at: StateAt) -> None:
        self._port, self._world_id = port, world_id
        self._ranges: list[tuple[int, int, int, int]] = []  # (tick, part, first id, last id)
        for tick, part, head in port.execute(q.STATE_DELTA_HEADS, (world_id, at.deltas_from, at.tick)):
            found = _DELTA_HEAD.match(head)
            assert found is not None, "publish stores only chunks that open so"
            first, last = (int(found[1]), int(found[2])) if found[1] else (int(found[3]), MAX_SAFE_INTEGER)
            self._ranges.append((tick, part, first, last))
        self._parsed: dict[tuple[int, int], Any] = {}

    def over(self, low: int, high: int) -> list[Any]:
        """The parsed deltas whose id range overlaps [low, high], in publication order."""
        overlapping = [(tick, part) for tick, part, first, last in self._ranges if first <= high and last >= low]
        missing = [key for key in overlapping if key not in self._parsed]
        if missing:
            rows = self._port.execute(q.GET_STATE_DELTAS, (json.dumps(missing), self._world_id))
            self._parsed.update(zip(missing, (json.loads(body) for (body,) in rows), strict=True))
        return [self._parsed[key] for key in overlapping]


Column = list[tuple[columnar.Values, int]]
"""One component type of a group's entities: for each (in the group's id order), the `Values`
and the row that hold its component."""


class Group:
    """Entities of one signature (their component keys, in key order) in id order, and for each
    key their `Column`."""

    __slots__ = ("columns", "ids", "signature")

    def __init__(self, signature: tuple[str, ...], ids: list[int], columns: list[Column]) -> None:
        self.signature, self.ids, self.columns = signature, ids, columns


Page = tuple[list[Group], int | None]


def read_page(port: SqlPort, world_id: str, at: StateAt, after: int, limit: int, *, keys: Set[str] | None = None,
              entity_ids: Sequence[int] | None = None, max_chunks: int | None = None) -> Page:  # fmt: skip
    """Up to `limit` entities of the state `at` a tick with ids above `after` (the lowest), in `Group`s by
    signature, and the id to continue after (None: nothing is left above the page).

    `keys` keeps the entities that have a component of every one of these component keys
    (`<name>:<fingerprint>`), each with only those components; `entity_ids` keeps these ids.
    `max_chunks` bounds the snapshot chunks one page reads: a page that reaches it answers what
    it found (maybe nothing) and the end of the span it read as where to continue. Inside the
    caller's transaction."""
    firsts = [] if at.snapshot_tick is None else [
        first for (first,) in port.execute(q.STATE_CHUNK_FIRSTS, (world_id, at.snapshot_tick))
    ]  # fmt: skip
    deltas = _Deltas(port, world_id, at)
    wanted = None if entity_ids is None else sorted({e for e in entity_ids if e > after})
    if wanted == []:
        return [], None
    groups: list[Group] = []
    room = limit
    index = max(0, bisect_right(firsts, after + 1) - 1)  # the span holding the id after `after`
    read = 0
    while True:
        last_span = index + 1 >= len(firsts)
        low = max(after + 1, firsts[index] if index else 1)
        high = MAX_SAFE_INTEGER if last_span else firsts[index + 1] - 1
        ids = None if wanted is None else set(wanted[bisect_left(wanted, low) : bisect_right(wanted, high)])
        if ids is None or ids:
            body = port.execute(q.GET_STATE_CHUNK, (world_id, at.snapshot_tick, firsts[index]))[0][0] if firsts else None
            read += 1
            found, cut = _span(body, deltas, low, high, keys, ids, room)
            groups += found
            room -= sum(len(group.ids) for group in found)
            if cut is not None:  # the span is read in part: the next page starts in it again
                return groups, cut
        done = last_span or (wanted is not None and wanted[-1] <= high)
        if done or not room:
            return groups, None if done else high
        if max_chunks is not None and read >= max_chunks:
            return groups, high
        index += 1


def _span(body: str | None, deltas: _Deltas, low: int, high: int, keys: Set[str] | None, ids: set[int] | None,
          room: int) -> tuple[list[Group], int | None]:  # fmt: skip
    """The lowest `room` whole entities of one span (of `ids`, if given), as its snapshot chunk
    `body` and the deltas over it make them, with only the components of `keys` and only those
    that have every one; and, when the span holds more of them, the last id taken.

    Each source of the span gets a stamp (the snapshot 0, then each delta in publication order):
    an entity is the row of the latest whole piece holding it (`owner`), and a component of it the
    row of the latest partial piece holding that type (`patches`) when that is later still."""
    owner: dict[int, tuple[int, columnar.Piece, int]] = {}
    patches: dict[str, dict[int, tuple[int, columnar.Values, int]]] = {}
    snapshot = [] if body is None else [json.loads(body)]
    for stamp, chunk in enumerate([*snapshot, *deltas.over(low, high)]):
        removed, found = columnar.pieces(chunk, low, high, keys)
        for entity_id in removed:
            owner.pop(entity_id, None)
        for piece in found:
            rows = range(len(piece.ids))
            if not piece.partial:
                owner.update(zip(piece.ids, zip(repeat(stamp), repeat(piece), rows), strict=True))
                continue
            for values in piece.values:  # a partial entry over nothing whole is never answered: its stamp loses
                patches.setdefault(values.key, {}).update(zip(piece.ids, zip(repeat(stamp), repeat(values), rows), strict=True))
    kept = sorted(owner) if ids is None else sorted(ids.intersection(owner))
    if keys is not None:
        kept = [e for e in kept if len(owner[e][1].values) == len(keys)]
    cut = kept[room - 1] if len(kept) > room else None
    by_piece: dict[columnar.Piece, list[int]] = {}
    for entity_id in kept[:room]:
        piece = owner[entity_id][1]
        held = by_piece.get(piece)
        if held is None:
            held = by_piece[piece] = []
        held.append(entity_id)
    groups = []
    for piece, entities in by_piece.items():
        places = [owner[e] for e in entities]
        columns = []
        for index, values in enumerate(piece.values):
            patched = patches.get(values.key)
            if patched is None:
                columns.append([(values, row) for _, _, row in places])
            else:
                columns.append([(patch[1], patch[2]) if (patch := patched.get(e)) is not None and patch[0] > stamp
                                else (piece.values[index], row) for e, (stamp, _, row) in zip(entities, places, strict=True)])  # fmt: skip
        groups.append(Group(tuple(values.key for values in piece.values), entities, columns))
    return groups, cut


def entity_texts_of(groups: Sequence[Group]) -> list[tuple[int, str]]:
    """The entities of `groups` in id order, each with its components text (what `load_state`
    answers for it)."""
    found: list[tuple[int, str]] = []
    for group in groups:
        texts = [[columnar.component_text(values.key, values.text(row)) for values, row in column] for column in group.columns]
        found += zip(group.ids, ["[" + ",".join(row) + "]" for row in zip(*texts, strict=True)] if texts else ["[]"] * len(group.ids),
                     strict=True)  # fmt: skip
    found.sort(key=_first)
    return found


def sections(groups: Sequence[Group]) -> list[StateSection]:
    """A page as `read_state` answers it: its entities by signature (their component types), the
    signatures in the order of their sorted keys, each a section of the chunk layout
    (docs/storage.md) with its ids listed, in id order: each entity's values, numeric columns as
    bytes, data rows as texts."""
    merged: dict[tuple[str, ...], list[Group]] = {}
    for group in groups:
        merged.setdefault(group.signature, []).append(group)
    found = []
    for signature in sorted(merged):
        parts = merged[signature]
        if len(parts) == 1:
            ids, columns = parts[0].ids, parts[0].columns
        else:  # pieces of one signature (the snapshot's, a delta's whole entries): put back in id order
            order = sorted((entity_id, part, row) for part, group in enumerate(parts) for row, entity_id in enumerate(group.ids))
            ids = [entity_id for entity_id, _, _ in order]
            columns = [[parts[part].columns[key][row] for _, part, row in order] for key in range(len(signature))]
        found.append(cast(StateSection, columnar.piece_section(ids, columns)))
    return found


def entity_texts(read: Sequence[StateSection]) -> list[tuple[int, str]]:
    """The entities of `read_state`'s sections in id order, each with its components text (what
    `load_state` answers for it)."""
    groups = []
    for section in read:
        piece = columnar.section_piece(section, 1, MAX_SAFE_INTEGER, None, row_texts=True)
        if piece is not None:
            rows = range(len(piece.ids))
            columns = [[(values, row) for row in rows] for values in piece.values]
            groups.append(Group(tuple(values.key for values in piece.values), piece.ids, columns))
    return entity_texts_of(groups)


def _first(item: tuple[int, Any]) -> int:
    return item[0]
