"""How much state one mutation may write: limits within what every authority stores, so that a
tick the world prepares is always one its authority accepts (docs/ledger.md, "State limits").

Sizes are characters of canonical JSON text (ASCII, so bytes too): a component's is its
`component_text`, an entity's its components text (docs/storage.md), a mutation's the sum of
the entities it wrote (a despawned one counts nothing), and a tick's that of the entities its
mutations wrote since the last published tick (each entity once, as last written). They are
checked when a mutation lands (`AsyncWorld.atomically`): a command over a limit is REJECTED with
`StateTooLargeError` and the others of its tick apply.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

STATE_CHUNK_LIMIT = 2_000_000 - 4_096
"""The most characters of one state chunk, one row: the Durable Object's 2 MB row limit with room for its key."""
COMPONENT_LIMIT = 1_000_000
"""A component: no larger than a request body (1 MiB) can carry, so a client can always send it back."""
ENTITY_LIMIT = 1_500_000
"""An entity: within one state chunk, with a quarter of it left for the chunk's headers and for
numeric columns, whose form is larger than their text (docs/storage.md)."""
COMMAND_LIMIT = 4_000_000
"""One command: a quarter of a tick's, so that no single command takes a tick's whole budget."""
WRITE_SET_LIMIT = 16_000_000
"""A tick's mutations together: half of the 32 MiB a Durable Object call may carry, and an eighth
of its 128 MB of memory, so its publication (the chunks, their copies on the way) fits with room."""


class StateTooLargeError(ValueError):
    """A mutation would make a component, an entity, the mutation itself or its tick's write-set
    larger than the state limits; nothing of it lands (a command: REJECTED)."""

    code = "state_too_large"


class WriteBudget:
    """The size of each entity the world's mutations wrote since its last published tick (as last
    written), and their total: what the next tick will publish of them."""

    def __init__(self) -> None:
        self.sizes: dict[int, int] = {}
        self.total = 0

    def spend(self, written: Iterable[tuple[int, str | None]],
              components: Callable[[int], Iterable[tuple[str, str]]]) -> None:  # fmt: skip
        """Count one mutation's write, `written` (entity id, components text or None when
        despawned), or raise StateTooLargeError and count nothing. `components(entity_id)` is the
        (class name, text) of each of its components, asked only of an entity over COMPONENT_LIMIT."""
        sizes: dict[int, int] = {}
        for entity_id, text in written:
            size = 0 if text is None else len(text)
            if size > COMPONENT_LIMIT:
                for name, part in components(entity_id):
                    _refuse(f"component {name} of entity {entity_id}", len(part), COMPONENT_LIMIT)
            _refuse(f"entity {entity_id}", size, ENTITY_LIMIT)
            sizes[entity_id] = size
        _refuse("the write", sum(sizes.values()), COMMAND_LIMIT)
        total = self.total + sum(size - self.sizes.get(entity_id, 0) for entity_id, size in sizes.items())
        _refuse("the tick's write-set with this write", total, WRITE_SET_LIMIT)
        self.sizes.update(sizes)
        self.total = total

    def copy(self) -> WriteBudget:
        budget = WriteBudget()
        budget.sizes, budget.total = dict(self.sizes), self.total
        return budget


def _refuse(what: str, size: int, limit: int) -> None:
    if size > limit:
        raise StateTooLargeError(f'{what}: {size:,} characters, over the limit of {limit:,} (docs/ledger.md, "State limits")')
