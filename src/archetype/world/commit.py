"""The commit coordinator: stages a tick's settlements and publishes its manifest.

Every outcome of a durable command (applied, rejected, failed, permanent) is *staged* here while the tick
runs. It becomes the command's status only in the transaction that publishes the tick (manifest
+ entity write-set + settlements + tick head), which is the publisher's job (the command ledger,
or an in-memory publisher for a bare world): no settlement is ever decided against state that is
not published with it.
A prepared tick is kept until its publication is confirmed, so a retry republishes the very same
manifest; the commit token (a digest of its content) lets the authority recognise a publication
that committed but whose answer was lost.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any, Literal, Protocol, get_args

from pydantic import BaseModel, ConfigDict

from archetype.canonical import canonical_json
from archetype.world.components import Component, component_text
from archetype.world.state import Components, Layer

# What a tick did with each command it leased and materialized, in ledger order. "failed" is a
# retryable failure: the ledger makes it RETRYABLE, or DEAD_LETTER once the budget is spent;
# "permanent" (the command raised `Permanent`) is DEAD_LETTER at once.
Outcome = Literal["applied", "rejected", "failed", "permanent"]
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)
ERROR_TEXT_LIMIT = 500


class Settlement(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    sequence: int
    command_id: str
    outcome: Outcome
    error: str | None = None


class TickManifest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    world_id: str
    tick: int
    writer_epoch: int
    settlements: tuple[Settlement, ...]
    written_entity_ids: tuple[int, ...]
    commit_token: str

    @property
    def applied_command_ids(self) -> tuple[str, ...]:
        return tuple(s.command_id for s in self.settlements if s.outcome == "applied")


class PreparedTick(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    manifest: TickManifest
    # the tick's state write, exactly as sent and digested (docs/storage.md): a snapshot replaces
    # the world's whole published state, a delta (snapshot False) overlays it
    snapshot: bool
    chunks: tuple[str, ...]


class CommittedTickReceipt(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    world_id: str
    tick: int
    commit_token: str
    commands_applied: int


class TickPublisher(Protocol):
    async def publish(self, prepared: PreparedTick) -> None: ...


class TickOutcomeUnknownError(RuntimeError):
    """Publication may or may not have committed; the prepared tick is kept for the next step."""

    code = "tick_outcome_unknown"


CHUNK_BYTES = 1_000_000
"""The most characters a state chunk holds (unless one entity alone is larger): half the Durable
Object's 2 MB row limit, so a chunk is always one row on every authority."""

# A cached encoding: the components it was made of, its text, and each component's own text.
_Encoded = tuple["Components", str, dict[str, tuple[Component, str]]]


class EntityEncoder:
    """The canonical text of each entity's components, cached per world.

    A layer's entries are replaced, never mutated (components are immutable too), so an entry
    that is still the same object (`is`) still has the same text, and a component that is still
    the same object inside a changed entity keeps its own text: a tick encodes what it changed.
    """

    def __init__(self) -> None:
        self._known: dict[int, _Encoded] = {}
        # texts written for new components by whoever made them in bulk (archetype.vector): by
        # the component's id, with the component itself, so a recycled id never matches
        self._offered: dict[int, tuple[Component, str]] = {}

    def offer(self, component: Component, text: str) -> None:
        """`component_text(component)`, computed by its maker (who guarantees it is exactly that)."""
        self._offered[id(component)] = (component, text)

    def text(self, entity_id: int, components: Components) -> str:
        """`[<component>,...]` in component-key order (see `component_text`); NonCanonicalValueError
        when a value has no canonical form."""
        known = self._known.get(entity_id)
        if known is not None and known[0] is components:
            return known[1]
        previous = known[2] if known is not None else _NOTHING
        offered = self._offered
        parts: dict[str, tuple[Component, str]] = {}
        texts = []
        for key in sorted(components):
            component = components[key]
            cached = previous.get(key)
            if cached is None or cached[0] is not component:
                cached = offered.pop(id(component), None) if offered else None
                if cached is None or cached[0] is not component:
                    cached = (component, component_text(component))
            parts[key] = cached
            texts.append(cached[1])
        text = "[" + ",".join(texts) + "]"
        self._known[entity_id] = (components, text, parts)
        return text

    def encode(self, layer: Layer) -> list[tuple[int, str | None]]:
        """Every entry of `layer` by entity id: its text, or None when it was despawned."""
        entries = [(entity_id, self._text_or_none(entity_id, layer[entity_id])) for entity_id in sorted(layer)]
        self._offered.clear()  # an offer is for the tick it was made in
        return entries

    def _text_or_none(self, entity_id: int, components: Components | None) -> str | None:
        if components is None:
            self._known.pop(entity_id, None)
            return None
        return self.text(entity_id, components)

    def snapshot(self, entities: Iterable[tuple[int, Components]]) -> list[tuple[int, str]]:
        """Every live entity by id, encoded; the cache keeps only these from now on."""
        entries = sorted(((entity_id, self.text(entity_id, components)) for entity_id, components in entities), key=_first)
        self._offered.clear()
        live = {entity_id for entity_id, _ in entries}
        self._known = {entity_id: known for entity_id, known in self._known.items() if entity_id in live}
        return entries


_NOTHING: dict[str, tuple[Component, str]] = {}


def _first(entry: tuple[int, Any]) -> int:
    return entry[0]


def chunk_entries(entries: Iterable[tuple[int, str | None]], limit: int | None = None) -> list[str]:
    """`[[entity_id,components|null],...]` texts of at most `limit` (CHUNK_BYTES) characters each
    (a single entry larger than that gets a chunk of its own), in entry order."""
    limit = CHUNK_BYTES if limit is None else limit
    chunks: list[str] = []
    items: list[str] = []
    size = 2
    for entity_id, text in entries:
        item = f"[{entity_id},{'null' if text is None else text}]"
        if items and size + len(item) + 1 > limit:
            chunks.append("[" + ",".join(items) + "]")
            items, size = [], 2
        items.append(item)
        size += len(item) + 1
    if items:
        chunks.append("[" + ",".join(items) + "]")
    return chunks


def commit_token(head: dict[str, Any], chunks: Sequence[str]) -> str:
    """SHA-256 (hex) of the bytes a publication sends: the canonical JSON of the manifest's head,
    then each chunk after a newline (all of it ASCII)."""
    hasher = hashlib.sha256(canonical_json(head).encode("ascii"))
    for chunk in chunks:
        hasher.update(b"\n")
        hasher.update(chunk.encode("ascii"))
    return hasher.hexdigest()


class CommitCoordinator:
    """The settlements of the tick being prepared, and the prepared tick until it is published.

    Nothing here is durable: a tick that fails before it is prepared is discarded whole (its
    settlements with it) and run again from the published state.
    """

    def __init__(self, world_id: str) -> None:
        self.world_id = world_id
        self._settlements: list[Settlement] = []
        self._settled: set[int] = set()
        self.prepared: PreparedTick | None = None

    def settle(self, sequence: int, command_id: str, outcome: Outcome, error: str | None = None) -> None:
        if sequence in self._settled:
            raise ValueError(f"command #{sequence} is already settled in this tick")
        self._settled.add(sequence)
        text = None if error is None else error[:ERROR_TEXT_LIMIT]
        self._settlements.append(Settlement(sequence=sequence, command_id=command_id, outcome=outcome, error=text))

    @property
    def settlements(self) -> tuple[Settlement, ...]:
        return tuple(self._settlements)

    def prepare(self, tick: int, writer_epoch: int, written: Sequence[int], entries: Iterable[tuple[int, str | None]],
                *, snapshot: bool) -> PreparedTick:  # fmt: skip
        """Seal the tick: `written` are the entities it changed, `entries` the state it sends (the
        changed entities for a delta, every live entity for a snapshot), by entity id."""
        chunks = tuple(chunk_entries(entries))
        head = {
            "world_id": self.world_id,
            "tick": tick,
            "writer_epoch": writer_epoch,
            "settlements": [s.model_dump(mode="json") for s in self._settlements],
            "written_entity_ids": list(written),
            "snapshot": snapshot,
            "chunks": len(chunks),
        }
        manifest = TickManifest(
            world_id=self.world_id,
            tick=tick,
            writer_epoch=writer_epoch,
            settlements=tuple(self._settlements),
            written_entity_ids=tuple(written),
            commit_token=commit_token(head, chunks),
        )
        self.prepared = PreparedTick(manifest=manifest, snapshot=snapshot, chunks=chunks)
        return self.prepared

    def clear(self) -> None:
        self._settlements.clear()
        self._settled.clear()
        self.prepared = None


class InMemoryPublisher:
    """Publisher for a world with no authority: keeps the manifests it was given."""

    def __init__(self) -> None:
        self.manifests: list[TickManifest] = []

    async def publish(self, prepared: PreparedTick) -> None:
        canonical_json(prepared.manifest.model_dump(mode="json"))
        self.manifests.append(prepared.manifest)
