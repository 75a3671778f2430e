"""Pages of a world's published state, read from its stored chunks (docs/storage.md).

The state is the last snapshot's chunks (disjoint ascending id ranges) with the deltas published
since laid over them, later ticks winning. A page is read span by span: the span of snapshot chunk
i runs from its first id to the next chunk's first id less one (the first span from id 1, the last
to the highest id), so each entity belongs to exactly one span, that of the one chunk that may hold
it. For a span, only its chunk and the deltas whose id range overlaps it are parsed (each delta at
most once per page), and only the rows within the span (and of the component types asked for) are
written out as text. So a page costs what its spans hold, never the whole world, however large:
paging through 100,000 entities holds one span's chunks at a time.

Every authority runs this Python over its own SQL port, so every one answers the same bytes.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_left, bisect_right
from collections.abc import Sequence, Set
from typing import Any

from archetype.canonical import MAX_SAFE_INTEGER
from archetype.commands import ledger_sql as q
from archetype.commands.ledger_rows import StateColumn, StateSection
from archetype.commands.port import SqlPort
from archetype.world import columnar

# A delta's opening: a columnar chunk names its first and last id, a per-entity one its first only.
_DELTA_HEAD = re.compile(r'\{"first":([0-9]+),"last":([0-9]+),|\[\[([0-9]+),')


class _Deltas:
    """The world's deltas, in publication order, each parsed once it is first needed."""

    def __init__(self, port: SqlPort, world_id: str) -> None:
        self._port, self._world_id = port, world_id
        self._ranges: list[tuple[int, int, int, int]] = []  # (tick, part, first id, last id)
        for tick, part, head in port.execute(q.STATE_DELTA_HEADS, (world_id,)):
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


Page = tuple[list[tuple[int, dict[str, str]]], int | None]


def read_page(port: SqlPort, world_id: str, after: int, limit: int, *, keys: Set[str] | None = None,
              entity_ids: Sequence[int] | None = None, max_chunks: int | None = None) -> Page:  # fmt: skip
    """Up to `limit` published entities with ids above `after`, in id order, each with its
    components' data texts by component key (`columnar.Entry`), and the id to continue after
    (None: nothing is left above the page).

    `keys` keeps the entities that have a component of every one of these component keys
    (`<name>:<fingerprint>`), each with only those components; `entity_ids` keeps these ids.
    `max_chunks` bounds the snapshot chunks one page reads: a page that reaches it answers what
    it found (maybe nothing) and the end of the span it read as where to continue. Inside the
    caller's transaction."""
    firsts = [first for (first,) in port.execute(q.STATE_CHUNK_FIRSTS, (world_id,))]
    deltas = _Deltas(port, world_id)
    wanted = None if entity_ids is None else sorted({e for e in entity_ids if e > after})
    if wanted == []:
        return [], None
    page: list[tuple[int, dict[str, str]]] = []
    index = max(0, bisect_right(firsts, after + 1) - 1)  # the span holding the id after `after`
    read = 0
    while True:
        last_span = index + 1 >= len(firsts)
        low = max(after + 1, firsts[index] if index else 1)
        high = MAX_SAFE_INTEGER if last_span else firsts[index + 1] - 1
        ids = None if wanted is None else set(wanted[bisect_left(wanted, low) : bisect_right(wanted, high)])
        if ids is None or ids:
            body = port.execute(q.GET_STATE_CHUNK, (world_id, firsts[index]))[0][0] if firsts else None
            read += 1
            found = _span(body, deltas, low, high, keys)
            page += found if ids is None else [(e, entry) for e, entry in found if e in ids]
        done = last_span or (wanted is not None and wanted[-1] <= high)
        if len(page) > limit:  # the span is read in part: the next page starts in it again
            return page[:limit], page[limit - 1][0]
        if done or len(page) == limit:
            return page, None if done else high
        if max_chunks is not None and read >= max_chunks:
            return page, high
        index += 1


def _span(body: str | None, deltas: _Deltas, low: int, high: int, keys: Set[str] | None) -> list[tuple[int, dict[str, str]]]:
    """The whole entities of one span in id order, as its snapshot chunk `body` and the deltas
    over it make them, with only the components of `keys` and only those that have every one."""
    state: dict[int, dict[str, str]] = {} if body is None else dict(columnar.entries(json.loads(body), low, high, keys))  # type: ignore[arg-type]  # a snapshot removes nothing
    for delta in deltas.over(low, high):
        for entity_id, entry in columnar.entries(delta, low, high, keys):
            below = state.get(entity_id)
            if entry is None:
                state.pop(entity_id, None)
            elif isinstance(entry, columnar.Partial) and below is not None:
                below.update(entry)  # a Partial below stays one: the snapshot under it holds the rest
            else:
                state[entity_id] = entry  # kept partial when nothing is below: not answered
    wanted = None if keys is None else len(keys)
    return [(entity_id, entry) for entity_id, entry in sorted(state.items(), key=_first)
            if type(entry) is dict and (wanted is None or len(entry) == wanted)]  # fmt: skip


def _first(item: tuple[int, Any]) -> int:
    return item[0]


def sections(page: list[tuple[int, dict[str, str]]]) -> list[StateSection]:
    """A page as `read_state` answers it: its entities grouped by signature (their component keys),
    the groups in the order of their sorted keys, each group's entities in id order, each component
    type's data texts a row per entity (the layout of docs/storage.md, "The columnar chunk")."""
    grouped: dict[tuple[str, ...], tuple[list[int], list[list[str]]]] = {}
    for entity_id, entry in page:
        signature = tuple(entry)
        group = grouped.get(signature)
        if group is None:
            group = grouped[signature] = ([], [[] for _ in signature])
        group[0].append(entity_id)
        for rows, data in zip(group[1], entry.values(), strict=True):
            rows.append(data)
    found: list[StateSection] = []
    for signature in sorted(grouped):
        ids, columns = grouped[signature]
        components = []
        for key, rows in zip(signature, columns, strict=True):
            name, _, fingerprint = key.partition(":")
            components.append(StateColumn(name=name, fingerprint=fingerprint, rows=rows))
        found.append(StateSection(ids=ids, components=components))
    return found


def entity_texts(read: Sequence[StateSection]) -> list[tuple[int, str]]:
    """The entities of `read_state`'s sections in id order, each with its components text (what
    `load_state` answers for it)."""
    found = []
    for section in read:
        columns = [(f"{c['name']}:{c['fingerprint']}", c["rows"]) for c in section["components"]]
        for row, entity_id in enumerate(section["ids"]):
            found.append((entity_id, "[" + ",".join([columnar.component_text(key, rows[row]) for key, rows in columns]) + "]"))
    found.sort(key=_first)
    return found
