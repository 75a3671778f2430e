"""What `archetype.Client.state()` answers (CPython only): the entities of a state read's
sections (`GET /worlds/{id}/state?layout=sections`, docs/http.md), each a row of its section's
columns, its components built by class only when asked for; and the query a read sends."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from archetype.commands.state_pages import STATE_READ_IDS
from archetype.world import columnar
from archetype.world.components import Component, ComponentValue, type_key

C = TypeVar("C", bound=Component)
# A component type a state read keeps: a class, `<name>:<fingerprint>`, or the name of the world's one current type so named.
ComponentFilter = type[Component] | str


class _Column:
    """One component type of a state read's section: its numeric columns' values (decoded from
    their bytes) or its data rows, and each entity's data by row, made when asked for."""

    __slots__ = ("fields", "fingerprint", "name", "rows")

    def __init__(self, component: dict[str, Any]) -> None:
        self.name, self.fingerprint = component["name"], component["fingerprint"]
        self.rows: list[dict[str, Any]] | None = component.get("rows")
        columns = component.get("columns") or {}
        self.fields = [(field, columnar.column_values(column)) for field, column in columns.items()]

    def data(self, row: int) -> dict[str, Any]:
        if self.rows is not None:
            return self.rows[row]
        return {field: values[row] for field, values in self.fields}


class EntityState:
    """One published entity as a state read answers it: `entity_id`, and its components, read by
    class (`get`, `[]`, `in`) or as wire values (`components`). It is a row of its section's
    columns as the answer carried them; a component becomes an instance of its class only when it
    is asked for."""

    __slots__ = ("_columns", "_row", "entity_id")

    def __init__(self, entity_id: int, columns: list[_Column], row: int) -> None:
        self.entity_id = entity_id
        self._columns = columns  # its section's, in component-key order
        self._row = row

    def _column(self, cls: type[Component]) -> _Column | None:
        name, fingerprint = cls.__name__, cls.__component_fingerprint__
        for column in self._columns:
            if column.name == name and column.fingerprint == fingerprint:
                return column
        return None

    def get(self, cls: type[C]) -> C | None:
        """Its component of class `cls` (by name and fingerprint), or None when it has none."""
        column = self._column(cls)
        return None if column is None else cls.model_validate(column.data(self._row))

    def __getitem__(self, cls: type[C]) -> C:
        found = self.get(cls)
        if found is None:
            raise KeyError(f"entity {self.entity_id} has no {cls.__name__} component")
        return found

    def __contains__(self, cls: type[Component]) -> bool:
        return self._column(cls) is not None

    @property
    def components(self) -> list[ComponentValue]:
        """Its components as wire values (name, fingerprint, data), in component-key order."""
        return [ComponentValue(name=c.name, fingerprint=c.fingerprint, data=c.data(self._row)) for c in self._columns]

    def __repr__(self) -> str:
        return f"EntityState({self.entity_id}, {[c.name for c in self._columns]})"


@dataclass(frozen=True)
class WorldState:
    """A world's published entities, in id order. A state of more than one page is read page by
    page while the world runs, so `tick_head` is that of the first page and a later page may be of
    a later tick."""

    tick_head: int
    entities: list[EntityState]


@dataclass(frozen=True)
class StatePage:
    """One answer of a state read: its entities in id order, and where the next page starts."""

    tick_head: int
    entities: list[EntityState]
    next_after: int | None

    @classmethod
    def of(cls, page: dict[str, Any]) -> StatePage:
        """The page of the route's `sections` layout (its JSON, parsed)."""
        entities = []
        for section in page["sections"]:
            columns = [_Column(component) for component in section["components"]]
            entities += [EntityState(entity_id, columns, row) for row, entity_id in enumerate(section["ids"])]
        if len(page["sections"]) > 1:
            entities.sort(key=_entity_id)
        return cls(page["tick_head"], entities, page["next_after"])


@dataclass(frozen=True)
class StateQuery:
    """The query of a state read: component types, and entity ids in groups of at most 1,000 (one
    paged read each, in id order); no ids: one read of every entity. `tick`: the state as the world
    published it at that tick (None: at its tick head)."""

    components: list[str]
    id_groups: list[list[int]] | None
    tick: int | None = None

    @classmethod
    def of(cls, components: Iterable[ComponentFilter] | None, entity_ids: Iterable[int] | None,
           tick: int | None = None) -> StateQuery:  # fmt: skip
        types = [c if isinstance(c, str) else type_key(c) for c in components or ()]
        if entity_ids is None:
            return cls(types, None, tick)
        ids = sorted(set(entity_ids))
        if not ids:
            raise ValueError("entity_ids names no entity: leave it out (None) to read every entity")
        return cls(types, [ids[i : i + STATE_READ_IDS] for i in range(0, len(ids), STATE_READ_IDS)], tick)

    def queries(self) -> list[dict[str, Any]]:
        groups: list[list[int] | None] = list(self.id_groups) if self.id_groups is not None else [None]
        at = {} if self.tick is None else {"tick": self.tick}
        return [{"component": self.components, "entity_id": ids or [], **at} for ids in groups]


def _entity_id(entity: EntityState) -> int:
    return entity.entity_id
