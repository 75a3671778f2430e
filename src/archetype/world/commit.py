"""The commit coordinator: stages a tick's settlements and publishes its manifest.

Successful durable commands are *staged* here while the tick runs. They become APPLIED only in
the transaction that publishes the tick (manifest + entity write-set + settlements + tick head),
which is the publisher's job (the command ledger, or an in-memory publisher for a bare world).
A prepared tick is kept until its publication is confirmed, so a retry republishes the very same
manifest; the commit token (a digest of its content) lets the authority recognise a publication
that committed but whose answer was lost.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from archetype.canonical import canonical_json, digest
from archetype.world.components import ComponentValue
from archetype.world.state import Layer


class TickManifest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    world_id: str
    tick: int
    writer_epoch: int
    applied_command_ids: tuple[str, ...]
    written_entity_ids: tuple[int, ...]
    commit_token: str


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


def encode_writes(layer: Layer) -> tuple[dict[str, Any], ...]:
    """The write-set as the ledger stores it, by entity id: each entity's component values as one
    canonical JSON text, or None when it was despawned. The commit token is a digest of exactly this."""
    writes = []
    for entity_id in sorted(layer):
        components = layer[entity_id]
        text = None
        if components is not None:
            values = [ComponentValue.from_component(components[key]) for key in sorted(components)]
            text = canonical_json([value.model_dump(mode="json") for value in values])
        writes.append({"entity_id": entity_id, "components": text})
    return tuple(writes)


class CommitCoordinator:
    def __init__(self, world_id: str) -> None:
        self.world_id = world_id
        self._staged: list[str] = []
        self._staged_set: set[str] = set()
        self.prepared: PreparedTick | None = None

    def stage(self, command_id: str) -> None:
        if command_id in self._staged_set:
            raise ValueError(f"command {command_id} is already staged in this tick")
        self._staged.append(command_id)
        self._staged_set.add(command_id)

    def is_staged(self, command_id: str) -> bool:
        return command_id in self._staged_set

    @property
    def staged(self) -> tuple[str, ...]:
        return tuple(self._staged)

    def prepare(self, tick: int, writer_epoch: int, layer: Layer) -> PreparedTick:
        writes = encode_writes(layer)
        body = {
            "world_id": self.world_id,
            "tick": tick,
            "writer_epoch": writer_epoch,
            "applied_command_ids": list(self._staged),
            "writes": list(writes),
        }
        manifest = TickManifest(
            world_id=self.world_id,
            tick=tick,
            writer_epoch=writer_epoch,
            applied_command_ids=tuple(self._staged),
            written_entity_ids=tuple(w["entity_id"] for w in writes),
            commit_token=digest(body),
        )
        self.prepared = PreparedTick(manifest=manifest, writes=writes)
        return self.prepared

    def clear(self) -> None:
        self._staged.clear()
        self._staged_set.clear()
        self.prepared = None


class InMemoryPublisher:
    """Publisher for a world with no authority: keeps the manifests it was given."""

    def __init__(self) -> None:
        self.manifests: list[TickManifest] = []

    async def publish(self, prepared: PreparedTick) -> None:
        canonical_json(prepared.manifest.model_dump(mode="json"))
        self.manifests.append(prepared.manifest)
