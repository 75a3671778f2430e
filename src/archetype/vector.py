"""Vectorised processors (CPython runners only: this module imports numpy, which Pyodide-hosted
worlds do without; `archetype.world` never imports it).

A vectorised processor sees, once per tick, every entity that has its component types as one
*table*: the entity ids and one numpy array per field, in entity-id order (the same entities, in
the same order, that a per-entity processor of those types would visit). It changes entities by
assigning to (or updating in place) the arrays of the component types it declares it writes; when
it returns, each entity whose written values differ gets new components, through the world's
layered state like any other mutation, so reads, queries, hooks, the write-set and the retry rule
keep their meaning.

    def move(world, tick, table):
        table[Position].x += table[Velocity].dx
        table[Position].y += table[Velocity].dy

    add_vector_processor(world, move, Position, Velocity, writes=[Position])

Eligible component types have only `float` and `int` fields (float64 and int64 columns), no
aliases, serializers, computed fields, private attributes or post-init hooks, so that a component
is exactly its field values and its canonical text can be written from the columns directly
(docs/storage.md): the values a processor writes are checked canonical for the whole column at
once (finite floats, integers within +/-(2**53-1)), and a refusal fails the tick like any other
non-canonical value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from archetype.canonical import MAX_SAFE_INTEGER, NonCanonicalValueError
from archetype.world.components import Component, type_key

if TYPE_CHECKING:
    import numpy as np

    from archetype.world.world import AsyncWorld

_KINDS = {float: "float64", int: "int64"}


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
    decorators = cls.__pydantic_decorators__
    plain = (
        not cls.__private_attributes__
        and not cls.model_computed_fields
        and not decorators.field_serializers
        and not decorators.model_serializers
        and not cls.__pydantic_post_init__
    )
    fields = sorted(cls.model_fields.items())
    for name, info in fields:
        if info.annotation not in _KINDS or info.alias not in (None, name) or info.serialization_alias not in (None, name):
            plain = False
        if not name.isascii():
            plain = False
    if not plain or not fields:
        raise TypeError(
            f"{cls.__qualname__} cannot be a column table: a vectorised processor takes components whose fields "
            "are all plain float or int (no aliases, serializers, computed fields or private attributes)"
        )
    dtypes = tuple(_KINDS[info.annotation] for _, info in fields)  # type: ignore[index]  # annotation checked above
    made = _Layout(cls, type_key(cls), tuple(name for name, _ in fields), dtypes, tuple(cls.model_fields))
    _LAYOUTS[cls] = made
    return made


class ComponentColumns:
    """One component type's columns in a table: an attribute per field (a numpy array)."""

    def __init__(self, columns: dict[str, np.ndarray]) -> None:
        self.__dict__.update(columns)

    def __getitem__(self, field: str) -> np.ndarray:
        return self.__dict__[field]


class Table:
    """The entities a vectorised processor runs over this tick: `ids`, and `table[Type]` columns."""

    def __init__(self, ids: np.ndarray, columns: dict[type[Component], ComponentColumns]) -> None:
        self.ids = ids
        self._columns = columns

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, component_type: type[Component]) -> ComponentColumns:
        return self._columns[component_type]


VectorProcessor = Callable[["AsyncWorld", int, Table], None]


def add_vector_processor(world: AsyncWorld, fn: VectorProcessor, *component_types: type[Component],
                         writes: Iterable[type[Component]] | None = None, name: str | None = None) -> None:  # fmt: skip
    """Register `fn` to run once per tick over the table of entities that have `component_types`,
    in its place among the world's processors; `writes` (default: all of them) are the types
    whose columns it may change."""
    import numpy as np

    layouts = [layout(t) for t in component_types]
    written = [layout(t) for t in (component_types if writes is None else writes)]
    if not {w.cls for w in written} <= set(component_types):
        raise ValueError("a vectorised processor writes only component types it reads")

    def run(world: AsyncWorld, tick: int, entity_ids: list[int]) -> None:
        get = world.state.get
        live = [get(entity_id) for entity_id in entity_ids]
        columns: dict[type[Component], ComponentColumns] = {}
        for item in layouts:
            components = [r[item.key] for r in live]  # type: ignore[index]  # matching() answers live entities
            columns[item.cls] = ComponentColumns({
                field: np.fromiter((c.__dict__[field] for c in components), dtype=dtype, count=len(components))
                for field, dtype in zip(item.fields, item.dtypes, strict=True)
            })  # fmt: skip
        originals = {item.cls: {f: columns[item.cls][f].copy() for f in item.fields} for item in written}
        fn(world, tick, Table(np.asarray(entity_ids, dtype=np.int64), columns))
        changed = np.zeros(len(live), dtype=bool)
        for item in written:
            for field in item.fields:
                values = _checked_column(columns[item.cls][field], item, field, len(live))
                columns[item.cls].__dict__[field] = values
                original = originals[item.cls][field]
                # an exact comparison, that tells -0.0 from 0.0 (both are canonical, and differ)
                changed |= values.view(np.int64) != original.view(np.int64)
        _write_back(world, entity_ids, live, written, columns, np.flatnonzero(changed).tolist())  # type: ignore[arg-type]

    world.add_batch_processor(run, *component_types, name=name or getattr(fn, "__name__", "vector"))


def _checked_column(values: Any, item: _Layout, field: str, rows: int) -> np.ndarray:
    import numpy as np

    dtype = item.dtypes[item.fields.index(field)]
    array = np.asarray(values)
    if array.shape != (rows,):
        raise ValueError(f"{item.cls.__name__}.{field}: a column of {rows} values was expected, not shape {array.shape}")
    if dtype == "float64":
        if array.dtype != np.float64:
            array = array.astype(np.float64)
        if not np.isfinite(array).all():
            raise NonCanonicalValueError(
                f"$.{field}: {item.cls.__name__}.{field} has a value that is not a finite number",
                path=f"$.{field}", reason="not a finite number (JSON has no NaN or infinities)",
            )  # fmt: skip
        return array
    if array.dtype != np.int64:
        if array.dtype.kind not in "iu":
            raise TypeError(f"{item.cls.__name__}.{field} is an int column; got {array.dtype}")
        array = array.astype(np.int64)
    if rows and (array.max() > MAX_SAFE_INTEGER or array.min() < -MAX_SAFE_INTEGER):
        raise NonCanonicalValueError(
            f"$.{field}: {item.cls.__name__}.{field} has an integer outside +/-(2**53-1)",
            path=f"$.{field}", reason="integer outside +/-(2**53-1)",
        )  # fmt: skip
    return array


def _write_back(world: AsyncWorld, entity_ids: list[int], live: list[dict[str, Component]], written: list[_Layout],
                columns: dict[type[Component], ComponentColumns], rows: list[int]) -> None:  # fmt: skip
    """New components for the rows whose values changed, each with its canonical text given to
    the world's encoder, so the write-set does not serialize them again."""
    if not rows:
        return
    put, offer = world.state.put, world.encoder.offer
    updates = [dict(live[row]) for row in rows]
    for item in written:
        values = zip(*[columns[item.cls][field][rows].tolist() for field in item.fields], strict=True)
        # %r is repr(), which is how json writes floats and ints: the canonical text of this data
        suffix = item.cls.__component_wire_suffix__.replace("%", "%%")
        template = '{"data":{' + ",".join(f'"{field}":%r' for field in item.fields) + "}" + suffix
        build, key, fields = item.build, item.key, item.fields
        for updated, row_values in zip(updates, values, strict=True):
            component = build(dict(zip(fields, row_values, strict=True)))
            offer(component, template % row_values)
            updated[key] = component
    for row, updated in zip(rows, updates, strict=True):
        put(entity_ids[row], updated)
