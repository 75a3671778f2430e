"""Entity state of one world: the committed entities plus stacked write layers.

A tick never mutates committed state in place. Each command materializes in its own layer
(merged on success, dropped on failure), so a failed command leaves no partial mutation; the
tick's merged layer is its write-set, published atomically and only then folded into the
committed entities.
"""

from __future__ import annotations

from collections.abc import Iterator

from archetype.world.components import Component

Components = dict[str, Component]  # type key -> live component

# A layer maps entity id -> its components, or None once despawned.
Layer = dict[int, Components | None]


class WorldState:
    def __init__(self, entities: dict[int, Components] | None = None) -> None:
        self._committed: dict[int, Components] = dict(entities or {})
        self._layers: list[Layer] = [{}]

    # -- reads through the layers --
    def get(self, entity_id: int) -> Components | None:
        for layer in reversed(self._layers):
            if entity_id in layer:
                return layer[entity_id]
        return self._committed.get(entity_id)

    def items(self) -> Iterator[tuple[int, Components]]:
        seen: set[int] = set()
        for layer in reversed(self._layers):
            for entity_id, components in layer.items():
                if entity_id not in seen:
                    seen.add(entity_id)
                    if components is not None:
                        yield entity_id, components
        for entity_id, components in self._committed.items():
            if entity_id not in seen:
                yield entity_id, components

    # -- writes go to the top layer --
    def put(self, entity_id: int, components: Components | None) -> None:
        self._layers[-1][entity_id] = components

    def push(self) -> None:
        self._layers.append({})

    def merge(self) -> None:
        top = self._layers.pop()
        self._layers[-1].update(top)

    def drop(self) -> None:
        self._layers.pop()

    # -- the tick's write-set --
    def seal(self) -> Layer:
        """Freeze the tick's write-set; later mutations go to a fresh layer above it."""
        if len(self._layers) != 1:
            raise RuntimeError("seal() needs every nested layer merged or dropped")
        self._layers.append({})
        return dict(self._layers[0])

    def commit_sealed(self) -> None:
        """Fold the sealed (now published) write-set into the committed entities."""
        if len(self._layers) != 2:
            raise RuntimeError("commit_sealed() needs a sealed write-set")
        for entity_id, components in self._layers.pop(0).items():
            if components is None:
                self._committed.pop(entity_id, None)
            else:
                self._committed[entity_id] = components
