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
import json
from collections.abc import Iterable, Sequence
from typing import Any, Literal, Protocol, get_args

from pydantic import BaseModel, ConfigDict

from archetype.canonical import canonical_json
from archetype.world import columnar
from archetype.world.components import Component, component_text
from archetype.world.error_text import safe_text
from archetype.world.state import Components, Layer, TextOf, WorldState

# What a tick did with each command it leased and materialized, in ledger order. "failed" is a
# retryable failure: the ledger makes it RETRYABLE, or DEAD_LETTER once the budget is spent;
# "permanent" (the command raised `Permanent`) is DEAD_LETTER at once.
Outcome = Literal["applied", "rejected", "failed", "permanent"]
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)


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
    # the ids the tick changed, as ascending maximal runs [first, last] (docs/storage.md): a moving
    # world's manifest is one run, not every id
    written_runs: tuple[tuple[int, int], ...]
    commit_token: str

    @property
    def applied_command_ids(self) -> tuple[str, ...]:
        return tuple(s.command_id for s in self.settlements if s.outcome == "applied")

    @property
    def written_entity_ids(self) -> list[int]:
        return columnar.run_ids(self.written_runs)

    @property
    def written_count(self) -> int:
        return sum(last - first + 1 for first, last in self.written_runs)


class PreparedTick(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    manifest: TickManifest
    # the tick's state write, exactly as sent and digested (docs/storage.md): a snapshot replaces
    # the world's whole published state, a delta (snapshot False) overlays it
    snapshot: bool
    chunks: tuple[str, ...]
    # a delta that holds everything the deltas since the last snapshot held (the same columns of
    # the same whole tables, or more): the authority keeps it in their place (docs/storage.md)
    replaces_deltas: bool = False
    # a lockstep tick: when its schedule had it due (recorded with it: docs/ledger.md, "Tick modes");
    # not part of the commit token, which covers what the tick did, not when
    due_ms: int | None = None


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


class EntityEncoder:
    """The canonical text of the entities a tick wrote as entries (docs/storage.md).

    Components are immutable, so a component that is still the very object the committed table
    holds keeps the text the table has for it (an entity whose `Position` moved encodes its
    `Position` only); the texts made here are handed to the tables when the tick commits
    (`text_of`), so no component is encoded twice.
    """

    def __init__(self, state: WorldState) -> None:
        self._state = state
        # texts made since the last commit: by the component's id, with the component itself, so
        # a recycled id never matches
        self._made: dict[int, tuple[Component, str]] = {}

    def text_of(self, component: Component) -> str | None:
        """The text made for `component` since the last commit, if any."""
        made = self._made.get(id(component))
        return made[1] if made is not None and made[0] is component else None

    def known_texts(self) -> TextOf | None:
        """`text_of`, or None when no text was made since the last commit (a world of numeric
        components: its chunks carry values, so a commit need not ask for each component's text)."""
        return self.text_of if self._made else None

    def committed(self) -> None:
        """The sealed write-set is in the tables, with its texts: forget them."""
        self._made.clear()

    def text(self, entity_id: int, components: Components) -> str:
        """`[<component>,...]` in component-key order (see `component_text`); NonCanonicalValueError
        when a value has no canonical form."""
        part = self.component
        return "[" + ",".join([part(entity_id, key, components[key]) for key in sorted(components)]) + "]"

    def component(self, entity_id: int, key: str, component: Component) -> str:
        """`component_text(component)`, component `key` of entity `entity_id`, encoded once."""
        text = self._state.committed_text(entity_id, key, component)
        if text is None:
            made = self._made
            cached = made.get(id(component))
            if cached is None or cached[0] is not component:
                cached = (component, component_text(component))
            made[id(component)] = cached
            text = cached[1]
        return text


    def encode(self, layer: Layer) -> list[tuple[int, str | None]]:
        """Every entry of `layer` by entity id: its text, or None when it was despawned."""
        text = self.text
        return [(e, None if layer[e] is None else text(e, layer[e])) for e in sorted(layer)]  # type: ignore[arg-type]


def chunk_entries(entries: Iterable[tuple[int, str | None]], limit: int | None = None) -> list[str]:
    """The per-entity chunk layout (what a component migration writes; docs/storage.md):
    `[[entity_id,components|null],...]` texts of at most `limit` (CHUNK_BYTES) characters each
    (a single entry larger than that gets a chunk of its own), in entry order."""
    limit = columnar.CHUNK_BYTES if limit is None else limit
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
    hasher = hashlib.sha256(_head_text(head).encode("ascii"))
    for chunk in chunks:
        hasher.update(b"\n")
        hasher.update(chunk.encode("ascii"))
    return hasher.hexdigest()


def _head_text(head: dict[str, Any]) -> str:
    """`canonical_json(head)`; a tick's `written_runs` (its last key, made by `columnar.id_runs`
    of ids checked at spawn to be integers within 1..2**53-1) written without checking every id
    again: a tick changing 1,000 scattered entities has 1,000 runs."""
    runs = head.get("written_runs")
    if not isinstance(runs, list) or max(head) != "written_runs":
        return canonical_json(head)
    rest = canonical_json({key: value for key, value in head.items() if key != "written_runs"})
    return rest[:-1] + ("," if len(head) > 1 else "") + '"written_runs":' + json.dumps(runs, separators=(",", ":")) + "}"


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
        text = None if error is None else safe_text(error)
        self._settlements.append(Settlement(sequence=sequence, command_id=command_id, outcome=outcome, error=text))

    @property
    def settlements(self) -> tuple[Settlement, ...]:
        return tuple(self._settlements)

    def prepare(self, tick: int, writer_epoch: int, written: Sequence[int], chunks: Sequence[str], *,
                snapshot: bool, replaces_deltas: bool = False, due_ms: int | None = None) -> PreparedTick:  # fmt: skip
        """Seal the tick: `written` are the entities it changed, `chunks` the state it sends (the
        changed entities for a delta, every live entity for a snapshot: docs/storage.md)."""
        chunks = tuple(chunks)
        runs = columnar.id_runs(written)
        head = {
            "world_id": self.world_id,
            "tick": tick,
            "writer_epoch": writer_epoch,
            "settlements": [s.model_dump(mode="json") for s in self._settlements],
            "written_runs": runs,
            "snapshot": snapshot,
            "replaces_deltas": replaces_deltas,
            "chunks": len(chunks),
        }
        manifest = TickManifest(
            world_id=self.world_id,
            tick=tick,
            writer_epoch=writer_epoch,
            settlements=tuple(self._settlements),
            written_runs=tuple(map(tuple, runs)),
            commit_token=commit_token(head, chunks),
        )
        self.prepared = PreparedTick(manifest=manifest, snapshot=snapshot, chunks=chunks, replaces_deltas=replaces_deltas,
                                     due_ms=due_ms)  # fmt: skip
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
        canonical_json(prepared.manifest.model_dump(mode="json"))  # what an authority would be sent: checked canonical
        self.manifests.append(prepared.manifest)
