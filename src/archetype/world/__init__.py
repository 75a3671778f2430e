"""The world: components, entities, processors, hooks, ticks and the family operation models."""

from archetype.world.commit import CommittedTickReceipt, TickManifest, TickOutcomeUnknownError
from archetype.world.components import Component, ComponentTypeRef, ComponentValue
from archetype.world.evolution import ComponentMigration, ComponentMigrationError, ComponentMigrationRequiredError
from archetype.world.operations import (
    AddComponents,
    CreateWorld,
    Despawn,
    DestroyWorld,
    ForkWorld,
    QueryComponents,
    RemoveComponents,
    ReserveEntityIds,
    Spawn,
    SpawnReserved,
    Step,
    Update,
)
from archetype.world.world import AsyncWorld, OnDestroy, OnSpawn, PostTick, PreTick

__all__ = [
    "AddComponents",
    "AsyncWorld",
    "CommittedTickReceipt",
    "Component",
    "ComponentMigration",
    "ComponentMigrationError",
    "ComponentMigrationRequiredError",
    "ComponentTypeRef",
    "ComponentValue",
    "CreateWorld",
    "ForkWorld",
    "Despawn",
    "DestroyWorld",
    "OnDestroy",
    "OnSpawn",
    "PostTick",
    "PreTick",
    "QueryComponents",
    "RemoveComponents",
    "ReserveEntityIds",
    "Spawn",
    "SpawnReserved",
    "Step",
    "TickManifest",
    "TickOutcomeUnknownError",
    "Update",
]
