"""Entity state of one world: the committed entities, the sealed write-set of a prepared tick,
and stacked write layers above them.

A tick never mutates committed state in place. The bottom layer collects direct mutations and
the tick being run; the tick runs in a layer of its own above it, and each command in its own
layer above that (merged on success, dropped on failure), so a failed command leaves no partial
mutation and a tick that fails before it is prepared is dropped whole, leaving the world exactly
as it was. A prepared tick's write-set is sealed (published atomically, then folded into the
committed entities); mutations made meanwhile go to a fresh bottom layer, for the next tick.

The committed entities are also grouped by *signature* (their set of component keys), so finding
the entities a processor matches costs what matches plus the layers, never a scan of the world:
an idle tick of a large world touches no entity.
"""

from __future__ import annotations

from collections.abc import Iterator

from archetype.world.components import Component

Components = dict[str, Component]  # type key -> live component

# A layer maps entity id -> its components, or None once despawned.
Layer = dict[int, Components | None]
Signature = frozenset[str]


class WorldState:
    def __init__(self, entities: dict[int, Components] | None = None) -> None:
        self._committed: dict[int, Components] = dict(entities or {})
        self._signatures: dict[Signature, set[int]] = {}  # committed entities by signature
        for entity_id, components in self._committed.items():
            self._signatures.setdefault(frozenset(components), set()).add(entity_id)
        self._sealed: Layer = {}
        self._layers: list[Layer] = [{}]

    def _stack(self) -> Iterator[Layer]:
        """Every layer a read looks through, newest first, down to the sealed write-set."""
        yield from reversed(self._layers)
        yield self._sealed

    # -- reads through the layers --
    def get(self, entity_id: int) -> Components | None:
        # the hottest read (once per processed entity): a plain loop, not the `_stack` generator
        layers = self._layers
        for index in range(len(layers) - 1, -1, -1):
            layer = layers[index]
            if entity_id in layer:
                return layer[entity_id]
        if entity_id in self._sealed:
            return self._sealed[entity_id]
        return self._committed.get(entity_id)

    def matching(self, keys: frozenset[str]) -> list[int]:
        """The ids of every entity that has all of `keys`, in id order."""
        found: set[int] = set()
        for signature, members in self._signatures.items():
            if keys <= signature:
                found |= members
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
        for entity_id, components in self._committed.items():
            if entity_id not in seen:
                yield entity_id, components

    # -- writes go to the top layer --
    def put(self, entity_id: int, components: Components | None) -> None:
        self._layers[-1][entity_id] = components

    @property
    def top(self) -> Layer:
        return self._layers[-1]

    @property
    def depth(self) -> int:
        return len(self._layers)

    def push(self) -> None:
        self._layers.append({})

    def merge(self) -> None:
        top = self._layers.pop()
        self._layers[-1].update(top)

    def drop(self) -> None:
        self._layers.pop()

    def unwind(self, depth: int) -> None:
        """Drop every layer above `depth`: what a failed tick wrote is gone."""
        del self._layers[depth:]

    # -- the tick's write-set --
    def write_set(self) -> Layer:
        """What the tick changed: every unsealed layer, merged (nothing is modified)."""
        merged: Layer = {}
        for layer in self._layers:
            merged.update(layer)
        return merged

    def count_after(self, write_set: Layer) -> int:
        """How many entities live once `write_set` (this state's `write_set()`, nothing sealed) commits."""
        count = len(self._committed)
        for entity_id, components in write_set.items():
            count += (components is not None) - (entity_id in self._committed)
        return count

    def seal(self, write_set: Layer) -> None:
        """Freeze the prepared tick's write-set; later mutations go to a fresh layer above it."""
        if self._sealed:
            raise RuntimeError("a write-set is already sealed; publish it first")
        self._sealed = write_set
        self._layers = [{}]

    def commit_sealed(self) -> None:
        """Fold the sealed (now published) write-set into the committed entities."""
        committed, signatures = self._committed, self._signatures
        for entity_id, components in self._sealed.items():
            old = committed.get(entity_id)
            if old is not None and (components is None or old.keys() != components.keys()):
                members = signatures[frozenset(old)]
                members.discard(entity_id)
                if not members:
                    del signatures[frozenset(old)]
            if components is None:
                committed.pop(entity_id, None)
            else:
                if old is None or old.keys() != components.keys():
                    signatures.setdefault(frozenset(components), set()).add(entity_id)
                committed[entity_id] = components
        self._sealed = {}
