"""Vectorised processors (CPython runners only: this module imports numpy, which Pyodide-hosted
worlds do without; `archetype.world` never imports it). The guide: docs/guide/vectorised.md.

A world that has a vectorised processor holds the component types it reads in numpy columns
(`NumpyColumn`: one float64/int64 array per field, in each archetype table of the world's state,
docs/storage.md), kept across ticks. The processor runs on them in place: once per tick for each
table of entities that have its component types (tables in the order of their sorted component
keys, each one's rows in entity-id order), and once more, in id order, for the entities with
those types that the tick already changed through the per-entity API in one of those types, or
spawned, or moved into such a table (they are not in their table's columns yet); an entity the
tick changed in other components only is in its table's call. It changes entities by assigning
to (or updating in place) the arrays of the component types it declares it writes; what it
writes is a new column for the whole table, in the tick's layer (a failed tick drops it), so
reads, queries, hooks, the write-set and the retry rule keep their meaning, and no Python object
is made per entity.

    def move(world, tick, table):
        table[Position].x += table[Velocity].dx
        table[Position].y += table[Velocity].dy

    add_vector_processor(world, move, Position, Velocity, writes=[Position])

Per-entity code reads the same columns: a row's component object is built when it is first read
after its values changed, and kept (`NumpyColumn`), so a world that mixes both kinds of processor
builds one object per row changed through the columns and read per entity, and one that reads no
column per entity builds none.

Eligible component types have only `float` and `int` fields (float64 and int64 columns), no
aliases, serializers, computed fields, private attributes or post-init hooks, so that a component
is exactly its field values and its canonical text can be written from the columns directly: the
values are checked canonical (finite floats, integers within +/-(2**53-1)) a whole column at a
time when they are encoded, and a refusal fails the tick like any other non-canonical value.
The columns a processor only reads are handed to it read-only. Like a per-entity processor, it gets
the tick number as `tick` and reads the tick's simulated time step as `world.dt` (docs/ledger.md,
"Tick modes"): `table[Position].x += table[Velocity].dx * world.dt`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from archetype.world.columnar import numeric_fields
from archetype.world.components import Component, component_text, type_key
from archetype.world.state import Column, Components, TextOf, WorldState
from archetype.world.state import Table as StateTable

if TYPE_CHECKING:
    import numpy as np

    from archetype.world.world import AsyncWorld

_DTYPES = {"f8": "float64", "i8": "int64"}


@dataclass(frozen=True)
class _Layout:
    """How one eligible component type maps to columns and back."""

    cls: type[Component]
    key: str
    fields: tuple[str, ...]  # in sorted order: the canonical order of the component's data
    dtypes: tuple[str, ...]
    declared: tuple[str, ...]  # in the class's order: the order pydantic keeps a model's values in

    def build(self, values: dict[str, Any]) -> Component:
        """A component of exactly these values (by field name, in sorted order), unvalidated: what
        `model_construct` does for such a class, without its per-field alias search."""
        component = object.__new__(self.cls)
        ordered = values if self.declared == self.fields else {field: values[field] for field in self.declared}
        object.__setattr__(component, "__dict__", ordered)
        object.__setattr__(component, "__pydantic_fields_set__", set(self.fields))
        object.__setattr__(component, "__pydantic_extra__", None)
        object.__setattr__(component, "__pydantic_private__", None)
        return component


_LAYOUTS: dict[type[Component], _Layout] = {}


def layout(cls: type[Component]) -> _Layout:
    """The column layout of an eligible component type; TypeError for any other."""
    known = _LAYOUTS.get(cls)
    if known is not None:
        return known
    if not (isinstance(cls, type) and issubclass(cls, Component)):
        raise TypeError(f"{cls!r} is not a Component subclass")
    fields = numeric_fields(cls)
    if fields is None:
        raise TypeError(
            f"{cls.__qualname__} cannot be a column table: a vectorised processor takes components whose fields "
            "are all plain float or int (no aliases, serializers, computed fields or private attributes)"
        )
    names = tuple(name for name, _ in fields)
    made = _Layout(cls, type_key(cls), names, tuple(_DTYPES[kind] for _, kind in fields), tuple(cls.model_fields))
    _LAYOUTS[cls] = made
    return made


UNREAD_WRITES = 4
"""How many columns written after a column (`NumpyColumn.replaced`) without a per-entity read in
between still take over its component objects: a world whose per-entity code stopped reading a
column soon stops carrying them, one that never reads it never builds them."""


class NumpyColumn:
    """An eligible component type's values in one table (`archetype.world.state.Column`): an
    array per field. A chunk takes its values as they are (archetype.world.columnar).

    A per-entity read of a row (`value`) answers a component object, built from the arrays the
    first time the row is read after its values changed and kept until they change again: the
    components a per-entity write puts in the column (`set`, `append`) are kept as given, and a
    column a vectorised processor writes (`replaced`) takes over those of the rows it left as
    they were. So a world mixing both kinds of processor builds a component once per row changed
    through the columns and then read through the per-entity API, not once per row per read."""

    def __init__(self, item: _Layout, arrays: dict[str, np.ndarray], objects: np.ndarray | None = None,
                 unread: int = 0) -> None:  # fmt: skip
        self.layout = item
        self.arrays = arrays
        # each row's component once built or given (None: not yet), in an object array; None when
        # no row has one
        self._objects = objects
        # how many columns were written, each after the one before, since `_objects` was read
        self._unread = unread

    @classmethod
    def of(cls, item: _Layout, components: Sequence[Component]) -> NumpyColumn:
        import numpy as np

        return cls(item, {
            field: np.fromiter((c.__dict__[field] for c in components), dtype=dtype, count=len(components))
            for field, dtype in zip(item.fields, item.dtypes, strict=True)
        })  # fmt: skip

    def replaced(self, arrays: dict[str, np.ndarray]) -> NumpyColumn:
        """A column of `arrays` (for the same rows) in this one's place, with this one's component
        objects of the rows whose values it keeps."""
        if self._objects is None or self._unread >= UNREAD_WRITES:
            return NumpyColumn(self.layout, arrays)
        objects = self._objects.copy()
        objects[_changed(arrays, self.arrays)] = None
        return NumpyColumn(self.layout, arrays, objects, self._unread + 1)

    def __len__(self) -> int:
        return len(self.arrays[self.layout.fields[0]])

    @property
    def component_type(self) -> type[Component]:
        return self.layout.cls

    def held(self) -> np.ndarray | None:
        """Each row's component object when it has one (None: not built), without building any;
        None when no row has one."""
        return self._objects

    def value(self, row: int) -> Component:
        objects = self._objects
        if objects is None:
            objects = self._objects = _no_objects(len(self))
        self._unread = 0
        found = objects[row]
        if found is None:
            found = objects[row] = self.layout.build(
                {field: self.arrays[field][row].item() for field in self.layout.fields}
            )
        return found

    def values(self, rows: Sequence[int]) -> list[Component]:
        """The components of `rows`, those not at hand built in bulk (and kept)."""
        import numpy as np

        objects = self._objects
        if objects is None:
            objects = self._objects = _no_objects(len(self))
        missing = [row for row in rows if objects[row] is None]
        if missing:
            build, fields, taken = self.layout.build, self.layout.fields, np.asarray(missing, dtype=np.intp)
            columns = [self.arrays[field][taken].tolist() for field in fields]
            for row, values in zip(missing, zip(*columns, strict=True), strict=True):
                objects[row] = build(dict(zip(fields, values, strict=True)))
        return [objects[row] for row in rows]

    def set(self, rows: Sequence[int], components: Sequence[Component], text_of: TextOf | None) -> None:
        import numpy as np

        objects = self._objects
        if objects is not None:
            # an entry carries every component of its entity: those it did not change are the
            # very objects read from here
            rows, components = _unzip([(r, c) for r, c in zip(rows, components, strict=True) if objects[r] is not c])
            for row, component in zip(rows, components, strict=True):
                objects[row] = component  # one at a time: numpy never looks into a component
        if rows:
            taken = np.asarray(rows, dtype=np.intp)
            for field in self.layout.fields:
                self.arrays[field][taken] = [component.__dict__[field] for component in components]

    def append(self, components: Sequence[Component], texts: Sequence[str | None]) -> None:
        import numpy as np

        added = NumpyColumn.of(self.layout, components)
        if self._objects is not None:
            held = _no_objects(len(components))
            for row, component in enumerate(components):
                held[row] = component  # one at a time: numpy never looks into a component
            self._objects = np.concatenate((self._objects, held))
        self.arrays = {field: np.concatenate((self.arrays[field], added.arrays[field])) for field in self.layout.fields}

    def select(self, rows: Sequence[int]) -> NumpyColumn:
        import numpy as np

        taken = np.asarray(rows, dtype=np.intp)
        objects = None if self._objects is None else self._objects[taken]
        return NumpyColumn(
            self.layout, {field: array[taken] for field, array in self.arrays.items()}, objects, self._unread
        )

    def copy(self) -> NumpyColumn:
        objects = None if self._objects is None else self._objects.copy()
        return NumpyColumn(
            self.layout, {field: array.copy() for field, array in self.arrays.items()}, objects, self._unread
        )

    def known_text(self, row: int, component: Component) -> str | None:
        return None  # a numeric chunk takes values, not texts

    def texts(self, rows: Sequence[int]) -> list[str]:
        return [component_text(self.value(row)) for row in rows]  # (a chunk encodes the values, not these)

    def field_values(self, rows: Sequence[int], field: str) -> np.ndarray:
        import numpy as np

        array = self.arrays[field]
        if isinstance(rows, range) and len(rows) == len(array):
            return array
        return array[np.asarray(rows, dtype=np.intp)]

    def changed_rows(self, base: Column) -> list[int]:
        if not isinstance(base, NumpyColumn):
            return [row for row in range(len(self)) if self.value(row) != base.value(row)]
        return _changed(self.arrays, base.arrays).tolist()


def _no_objects(rows: int) -> np.ndarray:
    import numpy as np

    return np.full(rows, None, dtype=object)


def _unzip(pairs: list[tuple[int, Component]]) -> tuple[Sequence[int], Sequence[Component]]:
    return ([row for row, _ in pairs], [component for _, component in pairs]) if pairs else ((), ())


def _changed(arrays: dict[str, np.ndarray], base: dict[str, np.ndarray]) -> np.ndarray:
    """The rows where any of `arrays` holds another value than `base`, ascending: an exact
    comparison, that tells -0.0 from 0.0 (both are canonical, and differ)."""
    import numpy as np

    changed = None
    for field, array in arrays.items():
        differs = array.view(np.int64) != base[field].view(np.int64)
        changed = differs if changed is None else changed | differs
    assert changed is not None  # a column has a field at least
    return np.flatnonzero(changed)


class ComponentColumns:
    """One component type's columns in a table: an attribute per field (a numpy array). Those of a
    type the processor does not write are read-only arrays, and cannot be assigned either."""

    def __init__(self, cls: type[Component], columns: dict[str, np.ndarray], writable: bool) -> None:
        self.__dict__.update(columns)
        self.__dict__["_type"], self.__dict__["_writable"] = cls, writable  # (no field starts with _)

    def __getitem__(self, field: str) -> np.ndarray:
        return self.__dict__[field]

    def __setattr__(self, field: str, values: Any) -> None:
        cls = self.__dict__["_type"]
        if field.startswith("_") or field not in self.__dict__:
            raise AttributeError(f"{cls.__name__} has no field {field!r}")
        if not self.__dict__["_writable"]:
            raise ValueError(
                f"{cls.__name__} is read-only here: the processor writes only the types of its writes=[...]"
            )
        self.__dict__[field] = values


class Table:
    """The entities a vectorised processor runs over in one call: `ids`, and `table[Type]` columns."""

    def __init__(
        self, ids: Callable[[], np.ndarray], rows: int, columns: dict[type[Component], ComponentColumns]
    ) -> None:
        self._ids = ids
        self._rows = rows
        self._columns = columns

    @property
    def ids(self) -> np.ndarray:
        return self._ids()

    def __len__(self) -> int:
        return self._rows

    def __getitem__(self, component_type: type[Component]) -> ComponentColumns:
        return self._columns[component_type]


VectorProcessor = Callable[["AsyncWorld", int, Table], None]


def add_vector_processor(world: AsyncWorld, fn: VectorProcessor, *component_types: type[Component],
                         writes: Iterable[type[Component]] | None = None, name: str | None = None) -> None:  # fmt: skip
    """Register `fn` to run once per tick over the tables of entities that have `component_types`,
    in its place among the world's processors; `writes` (default: all of them) are the types
    whose columns it may change. The world holds these types in numpy columns from now on."""
    import numpy as np

    layouts = [layout(t) for t in component_types]
    written = [layout(t) for t in (component_types if writes is None else writes)]
    if not {w.cls for w in written} <= set(component_types):
        raise ValueError("a vectorised processor writes only component types it reads")
    for item in layouts:
        world.state.use_columns(item.key, functools.partial(NumpyColumn.of, item))
    keys = frozenset(item.key for item in layouts)
    writing = {item.cls for item in written}

    def run(world: AsyncWorld, tick: int) -> None:
        state = world.state
        entered = state.entered()
        in_columns: set[int] = set()  # entered entities processed in their table's columns
        for table in state.tables(keys):
            current = {item.cls: state.column(table, item.key) for item in layouts}
            kept, aside = _entered_rows(state, table, entered, {item.key: current[item.cls] for item in layouts})
            in_columns.update(table.ids[row] for row in kept)
            rows = None if not aside else np.setdiff1d(np.arange(len(table)), aside)
            columns: dict[type[Component], ComponentColumns] = {}
            for cls, column in current.items():
                assert isinstance(column, NumpyColumn)  # use_columns above made every one
                arrays = {}
                for field, array in column.arrays.items():
                    if rows is not None:
                        array = array[rows]  # a copy: the rows set aside are not the processor's here
                    elif cls in writing:
                        array = array.copy()
                    if cls not in writing:
                        array = array.view()
                        array.flags.writeable = False
                    arrays[field] = array
                columns[cls] = ComponentColumns(cls, arrays, cls in writing)
            count = len(table) if rows is None else len(rows)
            if not count:
                continue
            fn(world, tick, Table(_ids_of(table, rows), count, columns))
            taken: set[int] = set()
            for item in written:
                base = current[item.cls]
                assert isinstance(base, NumpyColumn)
                arrays = {}
                for field in item.fields:
                    values = _checked_column(columns[item.cls][field], item, field, count, taken)
                    if rows is not None:
                        whole = base.arrays[field].copy()
                        whole[rows] = values
                        values = whole
                    arrays[field] = values
                column = base.replaced(arrays)
                state.override(table, item.key, column)
                if not kept:
                    continue
                # an entity's entry wins over its table's columns (archetype.world.state): the
                # entered ones processed here take their new components into their entries
                moved = np.intersect1d(_changed(arrays, base.arrays), kept, assume_unique=True).tolist()
                for row, component in zip(moved, column.values(moved), strict=True):
                    entity_id = table.ids[row]
                    state.put(entity_id, {**state.get(entity_id), item.key: component})  # type: ignore[dict-item]
        changed_earlier = []
        for entity_id in sorted(entered - in_columns):
            components = state.get(entity_id)
            if components is not None and keys <= components.keys():
                changed_earlier.append((entity_id, components))
        if changed_earlier:
            _run_on_entries(world, tick, fn, layouts, written, changed_earlier)

    world.add_batch_processor(run, *component_types, name=name or getattr(fn, "__name__", "vector"))


def _entered_rows(state: WorldState, table: StateTable, entered: set[int],
                  current: dict[str, Column]) -> tuple[list[int], list[int]]:  # fmt: skip
    """The rows of `table` whose entities the tick already wrote as entries: those whose
    components of the processor's types are still the very objects the columns hold (the tick
    changed others of their components: they are processed in the table), and the rest (set
    aside: processed from their entries, as they are now), each ascending."""
    index, get = table.index, state.get
    rows = [row for row in map(index.get, entered) if row is not None]
    found = [(key, column.held()) for key, column in current.items() if isinstance(column, NumpyColumn)]
    held = [(key, objects) for key, objects in found if objects is not None]
    if len(held) < len(current):
        return [], sorted(rows)  # a column that holds no objects: no entry's component is its
    kept: list[int] = []
    aside: list[int] = []
    ids = table.ids
    for row in rows:
        components = get(ids[row])
        for key, objects in held:
            if components is None or components.get(key, _ABSENT) is not objects[row]:
                aside.append(row)
                break
        else:
            kept.append(row)
    return sorted(kept), sorted(aside)


_ABSENT = object()  # a component an entry does not have: never a column's


def _ids_of(table: StateTable, rows: np.ndarray | None) -> Callable[[], np.ndarray]:
    def ids() -> np.ndarray:
        import numpy as np

        every = np.asarray(table.ids, dtype=np.int64)
        return every if rows is None else every[rows]

    return ids


def _run_on_entries(world: AsyncWorld, tick: int, fn: VectorProcessor, layouts: list[_Layout], written: list[_Layout],
                    live: list[tuple[int, Components]]) -> None:  # fmt: skip
    """`fn` over entities the tick changed as entries: columns made from their components, and
    the rows it changed written back as entries (their values are checked canonical when they
    are encoded, a column at a time, like a table's)."""
    import numpy as np

    writing = {item.cls for item in written}
    columns = {}
    for item in layouts:
        arrays = NumpyColumn.of(item, [c[item.key] for _, c in live]).arrays
        for array in arrays.values():
            array.flags.writeable = item.cls in writing
        columns[item.cls] = ComponentColumns(item.cls, arrays, item.cls in writing)
    originals = {item.cls: {f: columns[item.cls][f].copy() for f in item.fields} for item in written}
    entity_ids = np.asarray([entity_id for entity_id, _ in live], dtype=np.int64)
    fn(world, tick, Table(lambda: entity_ids, len(live), columns))
    changed = np.zeros(len(live), dtype=bool)
    taken: set[int] = set()
    for item in written:
        for field in item.fields:
            values = _checked_column(columns[item.cls][field], item, field, len(live), taken)
            columns[item.cls].__dict__[field] = values
            changed |= values.view(np.int64) != originals[item.cls][field].view(np.int64)
    rows = np.flatnonzero(changed).tolist()
    state = world.state
    for item in written:
        rows_values = zip(*[columns[item.cls][field][rows].tolist() for field in item.fields], strict=True)
        build, key, fields = item.build, item.key, item.fields
        for row, row_values in zip(rows, rows_values, strict=True):
            entity_id, components = live[row]
            component = build(dict(zip(fields, row_values, strict=True)))
            state.put(entity_id, {**(state.get(entity_id) or components), key: component})


def _checked_column(values: Any, item: _Layout, field: str, rows: int, taken: set[int]) -> np.ndarray:
    """A processor's column of `rows` values, as the field's dtype, in an array no other column
    holds: a commit writes a per-entity change into a column's arrays in place, which must not
    reach another column (a view of one the processor read, an array given for two fields).
    `taken` are the ids of the arrays the processor's columns took so far."""
    import numpy as np

    dtype = item.dtypes[item.fields.index(field)]
    array = np.asarray(values)
    if array.shape != (rows,):
        raise ValueError(
            f"{item.cls.__name__}.{field}: a column of {rows} values was expected, not shape {array.shape}"
        )
    if dtype == "float64" and array.dtype != np.float64:
        array = array.astype(np.float64)
    elif dtype == "int64" and array.dtype != np.int64:
        if array.dtype.kind not in "iu":
            raise TypeError(f"{item.cls.__name__}.{field} is an int column; got {array.dtype}")
        array = array.astype(np.int64)
    if array.base is not None or not array.flags.writeable or id(array) in taken:
        array = array.copy()
    taken.add(id(array))
    return array
