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

from typing import Any, Literal, Protocol, get_args

from pydantic import BaseModel, ConfigDict

from archetype.canonical import canonical_json, digest
from archetype.world.components import ComponentValue
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
    writes: tuple[dict[str, Any], ...]  # as the ledger stores them: see `encode_writes`


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


# entity id -> (the components an encoding was made of, that encoding): a layer's entries are
# replaced, never mutated, so an unchanged entry (`is`) still has the same encoding
Encodings = dict[int, tuple["Components | None", "str | None"]]


def encode_writes(layer: Layer, encodings: Encodings | None = None) -> tuple[dict[str, Any], ...]:
    """The write-set as the ledger stores it, by entity id: each entity's component values as one
    canonical JSON text, or None when it was despawned. The commit token is a digest of exactly this.

    `encodings` remembers what was encoded, so an entity encoded when its command ran (to check
    its values) is not encoded again when the tick is prepared."""
    writes = []
    for entity_id in sorted(layer):
        components = layer[entity_id]
        known = encodings.get(entity_id) if encodings is not None else None
        if known is not None and known[0] is components:
            text = known[1]
        else:
            text = None
            if components is not None:
                values = [ComponentValue.from_component(components[key]) for key in sorted(components)]
                text = canonical_json([value.model_dump(mode="json") for value in values])
            if encodings is not None:
                encodings[entity_id] = (components, text)
        writes.append({"entity_id": entity_id, "components": text})
    return tuple(writes)


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

    def prepare(self, tick: int, writer_epoch: int, layer: Layer, encodings: Encodings | None = None) -> PreparedTick:
        writes = encode_writes(layer, encodings)
        body = {
            "world_id": self.world_id,
            "tick": tick,
            "writer_epoch": writer_epoch,
            "settlements": [s.model_dump(mode="json") for s in self._settlements],
            "writes": list(writes),
        }
        manifest = TickManifest(
            world_id=self.world_id,
            tick=tick,
            writer_epoch=writer_epoch,
            settlements=tuple(self._settlements),
            written_entity_ids=tuple(w["entity_id"] for w in writes),
            commit_token=digest(body),
        )
        self.prepared = PreparedTick(manifest=manifest, writes=writes)
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
