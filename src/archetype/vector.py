"""Vectorised processors (CPython runners only: this module imports numpy, which Pyodide-hosted
worlds do without; `archetype.world` never imports it).

A world that has a vectorised processor holds the component types it reads in numpy columns
(`NumpyColumn`: one float64/int64 array per field, in each archetype table of the world's state,
docs/storage.md), kept across ticks. The processor runs on them in place: once per tick for each
table of entities that have its component types (tables in the order of their sorted component
keys, each one's rows in entity-id order), and once more for the entities with those types that
the tick already changed through the per-entity API (they are not in their table's columns yet),
in id order. It changes entities by assigning to (or updating in place) the arrays of the
component types it declares it writes; what it writes is a new column for the whole table, in the
tick's layer (a failed tick drops it), so reads, queries, hooks, the write-set and the retry
rule keep their meaning, and no Python object is made per entity.

    def move(world, tick, table):
        table[Position].x += table[Velocity].dx
        table[Position].y += table[Velocity].dy

    add_vector_processor(world, move, Position, Velocity, writes=[Position])

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
from archetype.world.state import Column, Components, TextOf
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


class NumpyColumn:
    """An eligible component type's values in one table (`archetype.world.state.Column`): an
    array per field. A chunk takes its values as they are (archetype.world.columnar)."""

    def __init__(self, item: _Layout, arrays: dict[str, np.ndarray]) -> None:
        self.layout = item
        self.arrays = arrays

    @classmethod
    def of(cls, item: _Layout, components: Sequence[Component]) -> NumpyColumn:
        import numpy as np

        return cls(item, {
            field: np.fromiter((c.__dict__[field] for c in components), dtype=dtype, count=len(components))
            for field, dtype in zip(item.fields, item.dtypes, strict=True)
        })  # fmt: skip

    def __len__(self) -> int:
        return len(self.arrays[self.layout.fields[0]])

    def value(self, row: int) -> Component:
        return self.layout.build({field: self.arrays[field][row].item() for field in self.layout.fields})

    def set(self, rows: Sequence[int], components: Sequence[Component], text_of: TextOf | None) -> None:
        import numpy as np

        taken = np.asarray(rows, dtype=np.intp)
        for field in self.layout.fields:
            self.arrays[field][taken] = [component.__dict__[field] for component in components]

    def append(self, components: Sequence[Component], texts: Sequence[str | None]) -> None:
        import numpy as np

        added = NumpyColumn.of(self.layout, components)
        self.arrays = {field: np.concatenate((self.arrays[field], added.arrays[field])) for field in self.layout.fields}

    def select(self, rows: Sequence[int]) -> NumpyColumn:
        import numpy as np

        taken = np.asarray(rows, dtype=np.intp)
        return NumpyColumn(self.layout, {field: array[taken] for field, array in self.arrays.items()})

    def copy(self) -> NumpyColumn:
        return NumpyColumn(self.layout, {field: array.copy() for field, array in self.arrays.items()})

    def known_text(self, row: int, component: Component) -> str | None:
        return None  # a row is values, not that component object

    def texts(self, rows: Sequence[int]) -> list[str]:
        return [component_text(self.value(row)) for row in rows]  # (a chunk encodes the values, not these)

    def field_values(self, rows: Sequence[int], field: str) -> np.ndarray:
        import numpy as np

        array = self.arrays[field]
        if isinstance(rows, range) and len(rows) == len(array):
            return array
        return array[np.asarray(rows, dtype=np.intp)]

    def changed_rows(self, base: Column) -> list[int]:
        import numpy as np

        if not isinstance(base, NumpyColumn):
            return [row for row in range(len(self)) if self.value(row) != base.value(row)]
        changed = np.zeros(len(self), dtype=bool)
        for field, array in self.arrays.items():
            # an exact comparison, that tells -0.0 from 0.0 (both are canonical, and differ)
            changed |= array.view(np.int64) != base.arrays[field].view(np.int64)
        return np.flatnonzero(changed).tolist()


class ComponentColumns:
    """One component type's columns in a table: an attribute per field (a numpy array)."""

    def __init__(self, columns: dict[str, np.ndarray]) -> None:
        self.__dict__.update(columns)

    def __getitem__(self, field: str) -> np.ndarray:
        return self.__dict__[field]


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
        for table in state.tables(keys):
            current = {item.cls: state.column(table, item.key) for item in layouts}
            skipped = [table.index[e] for e in entered if e in table.index]
            rows = None if not skipped else np.setdiff1d(np.arange(len(table)), skipped)
            columns: dict[type[Component], ComponentColumns] = {}
            for cls, column in current.items():
                assert isinstance(column, NumpyColumn)  # use_columns above made every one
                arrays = {}
                for field, array in column.arrays.items():
                    if rows is not None:
                        array = array[rows]  # a copy: the rows changed earlier are not the processor's here
                    elif cls in writing:
                        array = array.copy()
                    else:
                        array = array.view()
                        array.flags.writeable = False
                    arrays[field] = array
                columns[cls] = ComponentColumns(arrays)
            count = len(table) if rows is None else len(rows)
            if not count:
                continue
            fn(world, tick, Table(_ids_of(table, rows), count, columns))
            for item in written:
                base = current[item.cls]
                assert isinstance(base, NumpyColumn)
                arrays = {}
                for field in item.fields:
                    values = _checked_column(columns[item.cls][field], item, field, count)
                    if rows is not None:
                        whole = base.arrays[field].copy()
                        whole[rows] = values
                        values = whole
                    arrays[field] = values
                state.override(table, item.key, NumpyColumn(item, arrays))
        changed_earlier = []
        for entity_id in sorted(entered):
            components = state.get(entity_id)
            if components is not None and keys <= components.keys():
                changed_earlier.append((entity_id, components))
        if changed_earlier:
            _run_on_entries(world, tick, fn, layouts, written, changed_earlier)

    world.add_batch_processor(run, *component_types, name=name or getattr(fn, "__name__", "vector"))


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

    columns = {
        item.cls: ComponentColumns(NumpyColumn.of(item, [c[item.key] for _, c in live]).arrays) for item in layouts
    }
    originals = {item.cls: {f: columns[item.cls][f].copy() for f in item.fields} for item in written}
    entity_ids = np.asarray([entity_id for entity_id, _ in live], dtype=np.int64)
    fn(world, tick, Table(lambda: entity_ids, len(live), columns))
    changed = np.zeros(len(live), dtype=bool)
    for item in written:
        for field in item.fields:
            values = _checked_column(columns[item.cls][field], item, field, len(live))
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


def _checked_column(values: Any, item: _Layout, field: str, rows: int) -> np.ndarray:
    """A processor's column of `rows` values, as the field's dtype."""
    import numpy as np

    dtype = item.dtypes[item.fields.index(field)]
    array = np.asarray(values)
    if array.shape != (rows,):
        raise ValueError(
            f"{item.cls.__name__}.{field}: a column of {rows} values was expected, not shape {array.shape}"
        )
    if dtype == "float64":
        return array if array.dtype == np.float64 else array.astype(np.float64)
    if array.dtype != np.int64:
        if array.dtype.kind not in "iu":
            raise TypeError(f"{item.cls.__name__}.{field} is an int column; got {array.dtype}")
        array = array.astype(np.int64)
    return array
