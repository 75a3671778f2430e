"""Entity state of one world: the committed entities in archetype tables, the sealed write-set of
a prepared tick, and stacked write layers above them.

A tick never mutates committed state in place. The bottom layer collects direct mutations and
the tick being run; the tick runs in a layer of its own above it, and each command in its own
layer above that (merged on success, dropped on failure), so a failed command leaves no partial
mutation and a tick that fails before it is prepared is dropped whole, leaving the world exactly
as it was. A prepared tick's write-set is sealed (published atomically, then folded into the
committed entities); mutations made meanwhile go to a fresh bottom layer, for the next tick.

The committed entities are grouped by *signature* (their set of component keys) into tables: a
table holds its entity ids in ascending order and one `Column` per component key, a row per
entity. Finding the entities a processor matches costs what matches plus the layers, never a
scan of the world: an idle tick of a large world touches no entity. A layer holds two kinds of
write: *entries* (an entity's whole components, or None once despawned; what the per-entity API
writes) and *column overrides* (a new column for every row of one committed table; what a
vectorised processor writes, docs/storage.md). An entity's entry, in any layer, wins over any
column override of its table: whoever writes an override re-puts, in the same layer, every entity
of that table that already had an entry (archetype.vector does). Structural changes (spawn,
despawn, a component added or removed) are entries, and move rows between tables only when the
sealed write-set is committed.

A column is any object with the `Column` methods: `ObjectColumn` (the components themselves,
what every host has, Pyodide included) unless the state was told to make another kind for a
component key (`use_columns`: archetype.vector's numpy columns, on CPython runners).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence, Set
from typing import Any, Protocol

from archetype.world.columnar import Part, Section, as_list, numeric_fields
from archetype.world.components import Component, component_text

Components = dict[str, Component]  # type key -> live component

# A layer's entries map entity id -> its components, or None once despawned.
Layer = dict[int, Components | None]
Signature = frozenset[str]


class Column(Protocol):
    """One component type's values in a table, a row per entity, in the table's id order."""

    @property
    def component_type(self) -> type[Component]:
        """The class of the components (of a column that has a row)."""

    def value(self, row: int) -> Component: ...

    def set(self, rows: Sequence[int], components: Sequence[Component], text_of: TextOf | None) -> None:
        """Each of `rows` is now its component of `components`, whose `component_text` is
        `text_of(component)` when known (`text_of` None: no text is known)."""

    def append(self, components: Sequence[Component], texts: Sequence[str | None]) -> None: ...

    def select(self, rows: Sequence[int]) -> Column:
        """A new column of these rows, in this order."""

    def copy(self) -> Column: ...

    def known_text(self, row: int, component: Component) -> str | None:
        """Row `row`'s text when it holds this very `component` and its text is at hand."""

    def texts(self, rows: Sequence[int]) -> list[str]:
        """`component_text` of each of these rows' components (NonCanonicalValueError as it)."""

    def field_values(self, rows: Sequence[int], field: str) -> Any:
        """Field `field` of these rows' components (a numeric type's), as a sequence or an array."""

    def changed_rows(self, base: Column) -> list[int]:
        """The rows whose value differs from `base`'s (a column of the same rows), ascending."""


ColumnMaker = Callable[[Sequence[Component]], Column]
# An entry's component text: (entity id, component key, component) -> `component_text`.
PartText = Callable[[int, str, Component], str]
# The text a component was already encoded to (by the write-set's encoder), if any.
TextOf = Callable[[Component], str | None]


class ObjectColumn:
    """The components themselves, each with its text once it was asked for."""

    def __init__(self, components: Sequence[Component], texts: list[str | None] | None = None) -> None:
        self._components = list(components)
        self._texts: list[str | None] = [None] * len(self._components) if texts is None else texts
        # read once or twice per processed entity: the list's own lookup, no Python call (the
        # list is only ever changed in place)
        self.value: Callable[[int], Component] = self._components.__getitem__

    @property
    def component_type(self) -> type[Component]:
        return type(self._components[0])

    def set(self, rows: Sequence[int], components: Sequence[Component], text_of: TextOf | None) -> None:
        held, texts = self._components, self._texts
        for row, component in zip(rows, components, strict=True):
            if held[row] is not component:
                held[row] = component
                texts[row] = None if text_of is None else text_of(component)

    def append(self, components: Sequence[Component], texts: Sequence[str | None]) -> None:
        self._components += components
        self._texts += texts

    def select(self, rows: Sequence[int]) -> ObjectColumn:
        components, texts = self._components, self._texts
        return ObjectColumn([components[r] for r in rows], [texts[r] for r in rows])

    def copy(self) -> ObjectColumn:
        return ObjectColumn(self._components, list(self._texts))

    def known_text(self, row: int, component: Component) -> str | None:
        return self.texts([row])[0] if self._components[row] is component else None

    def texts(self, rows: Sequence[int]) -> list[str]:
        components, texts = self._components, self._texts
        found = []
        for row in rows:
            text = texts[row]
            if text is None:
                text = texts[row] = component_text(components[row])
            found.append(text)
        return found

    def field_values(self, rows: Sequence[int], field: str) -> list[Any]:
        components = self._components
        return [components[row].__dict__[field] for row in rows]

    def changed_rows(self, base: Column) -> list[int]:
        return [row for row, component in enumerate(self._components) if base.value(row) is not component]


class Table:
    """The committed entities of one signature: ascending ids, a column per component key."""

    def __init__(self, signature: Signature, columns: dict[str, Column], ids: list[int]) -> None:
        self.signature = signature
        self.keys = tuple(sorted(signature))
        self.columns = columns
        self.ids = ids
        self.index = {entity_id: row for row, entity_id in enumerate(ids)}

    def __len__(self) -> int:
        return len(self.ids)


# A table's columns as a tick sees them: (component key, the column's `value`), in key order.
View = list[tuple[str, Callable[[int], Component]]]
# A layer's column overrides: table signature -> component key -> the table's new column.
Overrides = dict[Signature, dict[str, Column]]
# Whole columns a delta sends: table signature -> the keys of the columns it sends of every row.
Cover = dict[Signature, frozenset[str]]


class WriteSet:
    """What a tick changed: its entries, and its column overrides of the committed tables."""

    def __init__(self, entries: Layer, overrides: Overrides) -> None:
        self.entries = entries
        self.overrides = overrides
        # per table, the rows whose overridden columns hold another value than the committed, and
        # the keys of those columns (`WorldState.changed` finds them): what a delta sends of them
        self.changed_rows: dict[Signature, Sequence[int]] = {}
        self.changed_keys: dict[Signature, set[str]] = {}

    def __bool__(self) -> bool:
        return bool(self.entries or self.overrides)


class WorldState:
    def __init__(self, entities: dict[int, Components] | None = None) -> None:
        self._tables: dict[Signature, Table] = {}
        self._table_of: dict[int, Table] = {}
        self._makers: dict[str, ColumnMaker] = {}
        self._sealed = WriteSet({}, {})
        self._layers: list[Layer] = [{}]
        self._overrides: list[Overrides] = [{}]
        # each table's columns as `column` resolves them (`_view`): read once or twice per
        # processed entity, so kept until an override, a dropped layer or a commit can change them
        self._views: dict[Signature, View] = {}
        self._move(dict(entities or {}), None)

    def use_columns(self, key: str, maker: ColumnMaker) -> None:
        """Hold component `key` in columns `maker` builds, from now on and in the tables already
        committed (outside a tick: nothing may be sealed or overridden)."""
        if self._sealed or any(self._overrides):
            raise RuntimeError("columns change kind between ticks only")
        self._makers[key] = maker
        self._views.clear()
        for table in self._tables.values():
            if key in table.columns:
                column = table.columns[key]
                table.columns[key] = maker([column.value(row) for row in range(len(table))])

    def _stack(self) -> Iterator[Layer]:
        """Every layer's entries a read looks through, newest first, down to the sealed write-set."""
        yield from reversed(self._layers)
        yield self._sealed.entries

    # -- reads through the layers --
    def get(self, entity_id: int) -> Components | None:
        # the hottest read (once per processed entity): a plain loop, not the `_stack` generator
        layers = self._layers
        for index in range(len(layers) - 1, -1, -1):
            layer = layers[index]
            if entity_id in layer:
                return layer[entity_id]
        sealed = self._sealed.entries
        if entity_id in sealed:
            return sealed[entity_id]
        table = self._table_of.get(entity_id)
        if table is None:
            return None
        row = table.index[entity_id]
        view = self._views.get(table.signature) or self._view(table)
        return {key: value(row) for key, value in view}

    def _view(self, table: Table) -> View:
        found = self._views.get(table.signature)
        if found is None:
            found = self._views[table.signature] = [(key, self.column(table, key).value) for key in table.keys]
        return found

    def scan(self, keys: frozenset[str], order: Sequence[str]) -> Iterator[tuple[int, tuple[Component, ...]]]:
        """Every entity that has all of `keys` when the scan starts, in id order, with its
        components of `order`, each read only when it is reached: an entity written, despawned
        or stripped of one of `keys` meanwhile (by whoever consumes the scan) is seen as it is
        then, or skipped."""
        tables = [table for table in self._tables.values() if keys <= table.signature]
        entered = any(self._layers) or bool(self._sealed.entries)
        ids: Sequence[int] = tables[0].ids if len(tables) == 1 and not entered else self.matching(keys)
        # per table: the view its readers were taken from, and a reader per key of `order`
        readers: dict[Signature, tuple[View, list[Callable[[int], Component]]]] = {}
        # push, drop and unwind change these in place, so a write made meanwhile is seen
        layers, sealed, table_of, views = self._layers, self._sealed.entries, self._table_of, self._views
        for entity_id in ids:
            for layer in layers:
                if entity_id in layer:
                    break
            else:
                if entity_id not in sealed:
                    table = table_of.get(entity_id)
                    if table is None:
                        continue
                    found = readers.get(table.signature)
                    if found is None or found[0] is not views.get(table.signature):
                        view = self._view(table)
                        found = readers[table.signature] = (view, [dict(view)[key] for key in order])
                    row = table.index[entity_id]
                    yield entity_id, tuple([value(row) for value in found[1]])
                    continue
            components = self.get(entity_id)
            if components is not None and keys <= components.keys():
                yield entity_id, tuple([components[key] for key in order])

    def column(self, table: Table, key: str) -> Column:
        """Table `table`'s column `key` as this tick sees it: the newest override, or the committed one."""
        overrides = self._overrides
        for index in range(len(overrides) - 1, -1, -1):
            found = overrides[index].get(table.signature)
            if found is not None and key in found:
                return found[key]
        found = self._sealed.overrides.get(table.signature)
        if found is not None and key in found:
            return found[key]
        return table.columns[key]

    def committed_text(self, entity_id: int, key: str, component: Component) -> str | None:
        """The text of `component` when it is entity `entity_id`'s committed `key` (see `Column.known_text`)."""
        table = self._table_of.get(entity_id)
        column = None if table is None else table.columns.get(key)
        return None if column is None else column.known_text(table.index[entity_id], component)  # type: ignore[union-attr]

    def tables(self, keys: frozenset[str]) -> list[Table]:
        """The committed tables whose signature has all of `keys`, by their sorted signature."""
        return [table for signature, table in sorted(self._tables.items(), key=_by_keys) if keys <= signature]

    def entered(self) -> set[int]:
        """The ids with an entry in a layer or in the sealed write-set."""
        return {entity_id for layer in self._stack() for entity_id in layer}

    def matching(self, keys: frozenset[str]) -> list[int]:
        """The ids of every entity that has all of `keys`, in id order."""
        found: set[int] = set()
        for signature, table in self._tables.items():
            if keys <= signature:
                found.update(table.ids)
        for layer in self._stack():  # small: what this tick and the sealed one wrote
            for entity_id in layer:
                found.discard(entity_id)
        seen: set[int] = set()
        for layer in self._stack():
            for entity_id, components in layer.items():
                if entity_id not in seen:
                    seen.add(entity_id)
                    if components is not None and keys <= components.keys():
                        found.add(entity_id)
        return sorted(found)

    def items(self) -> Iterator[tuple[int, Components]]:
        seen: set[int] = set()
        for layer in self._stack():
            for entity_id, components in layer.items():
                if entity_id not in seen:
                    seen.add(entity_id)
                    if components is not None:
                        yield entity_id, components
        for table in self._tables.values():
            columns = [(key, self.column(table, key)) for key in table.keys]
            for row, entity_id in enumerate(table.ids):
                if entity_id not in seen:
                    yield entity_id, {key: column.value(row) for key, column in columns}

    # -- writes go to the top layer --
    def put(self, entity_id: int, components: Components | None) -> None:
        self._layers[-1][entity_id] = components

    def override(self, table: Table, key: str, column: Column) -> None:
        """Every row of `table`'s column `key` is now `column`'s (see the module's rule on entries)."""
        self._overrides[-1].setdefault(table.signature, {})[key] = column
        self._views.pop(table.signature, None)

    @property
    def top(self) -> Layer:
        return self._layers[-1]

    @property
    def depth(self) -> int:
        return len(self._layers)

    def push(self) -> None:
        self._layers.append({})
        self._overrides.append({})

    def merge(self) -> None:
        self._layers[-2].update(self._layers.pop())
        below = self._overrides[-2]
        for signature, columns in self._overrides.pop().items():
            below.setdefault(signature, {}).update(columns)

    def drop(self) -> None:
        self._layers.pop()
        if self._overrides.pop():
            self._views.clear()

    def unwind(self, depth: int) -> None:
        """Drop every layer above `depth`: what a failed tick wrote is gone."""
        del self._layers[depth:]
        del self._overrides[depth:]
        self._views.clear()

    # -- the tick's write-set --
    def write_set(self) -> WriteSet:
        """What the tick changed: every unsealed layer, merged (nothing is modified)."""
        entries: Layer = {}
        overrides: Overrides = {}
        for layer, columns in zip(self._layers, self._overrides, strict=True):
            entries.update(layer)
            for signature, by_key in columns.items():
                overrides.setdefault(signature, {}).update(by_key)
        return WriteSet(entries, overrides)

    def changed(self, write_set: WriteSet) -> list[int]:
        """The ids `write_set` (this state's `write_set()`) changes, ascending: its entries, and the
        rows of other entities whose overridden columns hold another value than the committed."""
        runs: list[list[int]] = [sorted(write_set.entries)] if write_set.entries else []
        for signature, by_key in write_set.overrides.items():
            table = self._tables[signature]
            # a column written back unchanged (a vectorised processor's every declared write) adds no rows
            changed = {key: rows for key, column in by_key.items() if (rows := column.changed_rows(table.columns[key]))}
            if not changed:
                continue
            found = list(changed.values())
            rows = found[0] if len(found) == 1 else sorted(set().union(*found))
            ids = table.ids
            every = len(rows) == len(ids)
            write_set.changed_rows[signature] = range(len(ids)) if every else rows
            write_set.changed_keys[signature] = set(changed)
            runs.append(list(ids) if every else [ids[row] for row in rows])
        if len(runs) == 1:
            return runs[0]
        return sorted({entity_id for run in runs for entity_id in run})

    def entered_all(self, write_set: WriteSet) -> bool:
        """Whether every committed entity has an entry in `write_set` (its delta would carry every
        live entity whole: the snapshot, and more)."""
        entries, table_of = write_set.entries, self._table_of
        return bool(entries) and len(entries) >= len(table_of) and sum(map(table_of.__contains__, entries)) == len(table_of)

    def whole_columns(self, write_set: WriteSet) -> Cover | None:
        """The columns (per table) a delta of `write_set` sends when it changes nothing but whole
        columns: no entry, and every row of each table it changes (after `changed`); else None."""
        if write_set.entries or not all(isinstance(rows, range) for rows in write_set.changed_rows.values()):
            return None
        return {signature: frozenset(keys) for signature, keys in write_set.changed_keys.items()}

    def sections(self, write_set: WriteSet, snapshot: bool, text: PartText) -> tuple[list[Section], list[int]]:
        """What a tick sends, as columnar sections (archetype.world.columnar): every live entity
        once `write_set` commits (a snapshot), or the entities it changes (a delta, with the
        despawned ones as removed ids; `changed` has found them). `text(entity_id, key, component)`
        is an entry's component text (the encoder's)."""
        entries = write_set.entries
        removed = [] if snapshot else sorted(e for e, c in entries.items() if c is None)
        # the committed rows of entities with an entry: sent from the entry (a pass over the
        # entries, not over the tables)
        entered_rows: dict[Signature, set[int]] = {}
        for entity_id in entries:
            table = self._table_of.get(entity_id)
            if table is not None:
                entered_rows.setdefault(table.signature, set()).add(table.index[entity_id])
        found = {signature: range(len(table)) for signature, table in self._tables.items()} if snapshot else write_set.changed_rows
        rows: dict[Signature, Sequence[int]] = {}
        for signature, taken in found.items():
            gone = entered_rows.get(signature)
            rows[signature] = taken if not gone else [r for r in taken if r not in gone]
        entered: dict[Signature, list[tuple[int, Components]]] = {}
        for entity_id in sorted(entries):
            components = entries[entity_id]
            if components is not None:
                entered.setdefault(frozenset(components), []).append((entity_id, components))
        sections = []
        for signature in sorted({*rows, *entered}, key=sorted):
            # a delta's rows that only overridden columns changed carry just the columns that
            # changed (a partial section), unless entities entered the same signature this tick
            keys = signature if snapshot or signature in entered else write_set.changed_keys.get(signature, signature)
            section = self._section(write_set, signature, keys, rows.get(signature, ()), entered.get(signature, []), text)
            if section is not None:
                sections.append(section)
        return sections, removed

    def _section(self, write_set: WriteSet, signature: Signature, keys: Set[str], rows: Sequence[int],
                 entered: list[tuple[int, Components]], text: PartText) -> Section | None:  # fmt: skip
        table = self._tables.get(signature)
        if table is None or not rows:
            rows = ()
        if not rows and not entered:
            return None
        overridden = write_set.overrides.get(signature, {})
        ids: list[int] = list(table.ids) if table is not None and isinstance(rows, range) else [table.ids[r] for r in rows]  # type: ignore[union-attr]
        ids += [entity_id for entity_id, _ in entered]
        order = None if not rows or not entered else sorted(range(len(ids)), key=ids.__getitem__)
        parts = []
        for key in sorted(keys):
            column = None if not rows else (overridden.get(key) or table.columns[key])  # type: ignore[union-attr]
            cls = type(entered[0][1][key]) if entered else column.component_type  # type: ignore[union-attr]
            fields = numeric_fields(cls)
            if fields is None:
                texts = column.texts(rows) if column is not None else []
                texts += [text(entity_id, key, components[key]) for entity_id, components in entered]
                parts.append(Part(cls, texts=_ordered(texts, order)))
                continue
            values: dict[str, Any] = {}
            # each entered component's fields, reached once for all of them (a pass over the
            # entries per field cost more than the values it collects)
            held = [components[key].__dict__ for _, components in entered]
            for field, _ in fields:
                found = column.field_values(rows, field) if column is not None else []
                if held:
                    found = [*as_list(found), *[data[field] for data in held]]
                values[field] = _ordered(found, order)
            parts.append(Part(cls, fields=values))
        return Section(sorted(ids) if order is not None else ids, parts, partial=len(keys) < len(signature))

    def seal(self, write_set: WriteSet) -> None:
        """Freeze the prepared tick's write-set; later mutations go to a fresh layer above it."""
        if self._sealed:
            raise RuntimeError("a write-set is already sealed; publish it first")
        self._sealed = write_set
        self._layers = [{}]
        self._overrides = [{}]

    def commit_sealed(self, text_of: TextOf | None) -> None:
        """Fold the sealed (now published) write-set into the committed tables: overridden
        columns replace the committed ones, then the entries are written, moving rows between
        tables where an entity's signature changed."""
        sealed = self._sealed
        for signature, by_key in sealed.overrides.items():
            self._tables[signature].columns.update(by_key)
        self._move(sealed.entries, text_of)
        self._sealed = WriteSet({}, {})
        self._views.clear()

    def _move(self, entries: Layer, text_of: TextOf | None) -> None:
        tables, table_of = self._tables, self._table_of
        rebuilt: set[Signature] = set()  # tables made anew: every id of theirs points to the new one
        leaving: dict[Signature, set[int]] = {}
        arriving: dict[Signature, list[tuple[int, Components]]] = {}
        staying: dict[Signature, list[tuple[int, Components]]] = {}  # (row, components) in a table
        for entity_id, components in entries.items():
            table = table_of.get(entity_id)
            if table is not None and components is not None and table.signature == components.keys():
                stay = staying.get(table.signature)
                if stay is None:
                    stay = staying[table.signature] = []
                stay.append((table.index[entity_id], components))
                continue
            if table is not None:
                leaving.setdefault(table.signature, set()).add(entity_id)
                del table_of[entity_id]
            if components is not None:
                arriving.setdefault(frozenset(components), []).append((entity_id, components))
        for signature, held in staying.items():  # before any table is rebuilt: the rows are its
            rows = [row for row, _ in held]
            for key, column in tables[signature].columns.items():
                column.set(rows, [components[key] for _, components in held], text_of)
        for signature, gone in leaving.items():
            table = tables[signature]
            keep = [row for row, entity_id in enumerate(table.ids) if entity_id not in gone]
            if not keep and signature not in arriving:
                del tables[signature]
                continue
            tables[signature] = Table(signature, {k: c.select(keep) for k, c in table.columns.items()},
                                      [table.ids[row] for row in keep])  # fmt: skip
            rebuilt.add(signature)
        for signature, new in arriving.items():
            new.sort(key=_first)
            table = tables.get(signature)
            if table is None:
                table = tables[signature] = Table(signature, {key: self._maker(key)([]) for key in signature}, [])
            ordered = not table.ids or new[0][0] > table.ids[-1]
            for key, column in table.columns.items():
                added = [components[key] for _, components in new]
                column.append(added, [None] * len(added) if text_of is None else [text_of(c) for c in added])
            ids = table.ids + [entity_id for entity_id, _ in new]
            if ordered:
                first = len(table.ids)
                table.ids = ids
                table.index.update((entity_id, first + offset) for offset, (entity_id, _) in enumerate(new))
                table_of.update((entity_id, table) for entity_id, _ in new)
            else:  # an entity joined a table below its highest id: the table is put back in id order
                order = sorted(range(len(ids)), key=ids.__getitem__)
                table = tables[signature] = Table(signature, {k: c.select(order) for k, c in table.columns.items()},
                                                  [ids[row] for row in order])  # fmt: skip
                rebuilt.add(signature)
        for signature in rebuilt:
            table = tables.get(signature)
            if table is not None:
                table_of.update(dict.fromkeys(table.ids, table))

    def _maker(self, key: str) -> ColumnMaker:
        return self._makers.get(key, ObjectColumn)


def _ordered(values: Any, order: list[int] | None) -> Any:
    if order is None:
        return values
    return [values[i] for i in order]


def _first(entry: tuple[int, object]) -> int:
    return entry[0]


def _by_keys(item: tuple[Signature, Table]) -> tuple[str, ...]:
    return item[1].keys
