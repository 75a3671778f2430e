"""The world family's registrations: each operation's handler, permission and durability.

One mutation function per operation serves both paths: the direct handler (which takes the
world's operation lock) and the durable materializer (which runs with the lock already held).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, TypedDict

from archetype.commands.authority import Authority
from archetype.commands.dispatcher import HandlerContext
from archetype.commands.errors import OperationUnavailableError
from archetype.commands.ledger_rows import WorldRow
from archetype.commands.options import ActorCtx, Role
from archetype.commands.registry import DurableOperation, OperationRegistry, OperationSpec
from archetype.world.operations import (
    AddComponents,
    CreateWorld,
    Despawn,
    DestroyWorld,
    ForkWorld,
    Operation,
    QueryComponents,
    RemoveComponents,
    ReserveEntityIds,
    Spawn,
    SpawnReserved,
    Step,
    Update,
    operation_components,
    payload_encoder,
)
from archetype.world.world import AsyncWorld


# -- the mutations, shared by direct handlers and durable materializers --
def _spawn(world: AsyncWorld, op: Spawn) -> int:
    return world.spawn(operation_components(op))


def _spawn_reserved(world: AsyncWorld, op: SpawnReserved) -> int:
    return world.spawn(operation_components(op), entity_id=op.entity_id)


def _despawn(world: AsyncWorld, op: Despawn) -> None:
    world.despawn(op.entity_id)


def _update(world: AsyncWorld, op: Update) -> None:
    world.update(op.entity_id, operation_components(op))


def _add_components(world: AsyncWorld, op: AddComponents) -> None:
    world.add_components(op.entity_id, operation_components(op))


def _remove_components(world: AsyncWorld, op: RemoveComponents) -> None:
    world.remove_components(op.entity_id, op.component_types)


def _direct(mutate: Callable[[AsyncWorld, Any], Any]) -> Callable[[HandlerContext, Any], Any]:
    """A direct handler: apply the mutation now, atomically, under the world's operation lock.

    The change is part of the world's next tick and becomes durable when that tick publishes.
    """

    async def handler(ctx: HandlerContext, op: Any) -> Any:
        world = await ctx.worlds.get(op.world_id)
        await world.ensure_entity_ids()
        async with world.lock:
            return world.atomically(lambda: mutate(world, op))

    return handler


async def _spawn_reserved_direct(ctx: HandlerContext, op: SpawnReserved) -> None:
    raise OperationUnavailableError("SpawnReserved is only materialized from the ledger; use defer_spawn")


# -- direct-only operations --
async def create_world_row(authority: Authority, op: CreateWorld) -> WorldRow:
    """CreateWorld's ledger call, answering the world's row (the HTTP route answers it as it is,
    without a second call to read it back)."""
    return await authority.create_world(op.world_id or uuid.uuid4().hex, op.name, op.tick_mode, op.tick_interval_ms)


async def _create_world(ctx: HandlerContext, op: CreateWorld) -> str:
    return (await create_world_row(ctx.scheduler.authority, op))["world_id"]


async def fork_world_row(authority: Authority, op: ForkWorld, actor: ActorCtx | None) -> WorldRow:
    """ForkWorld's ledger call, answering the fork's row; its events name `actor`."""
    return await authority.fork_world(op.world_id, op.at_tick, op.fork_world_id or uuid.uuid4().hex, op.name,
                                      op.with_open_commands, actor.principal if actor else None)  # fmt: skip


async def _fork_world(ctx: HandlerContext, op: ForkWorld) -> str:
    return (await fork_world_row(ctx.scheduler.authority, op, ctx.actor))["world_id"]


async def _destroy_world(ctx: HandlerContext, op: DestroyWorld) -> int:
    result = await ctx.scheduler.authority.destroy(op.world_id, ctx.actor.principal if ctx.actor else None)
    ctx.worlds.drop(op.world_id)
    return result["cancelled"]


async def _step(ctx: HandlerContext, op: Step) -> int:
    return (await ctx.worlds.step(op.world_id)).commands_applied


async def _query_components(ctx: HandlerContext, op: QueryComponents) -> list[tuple[int, tuple[Any, ...]]]:
    world = await ctx.worlds.get(op.world_id)
    async with world.lock:
        return world.query(*op.component_types)


async def _reserve_entity_ids(ctx: HandlerContext, op: ReserveEntityIds) -> list[int]:
    first = await ctx.scheduler.authority.reserve_entity_ids(op.world_id, op.count)
    return list(range(first, first + op.count))


def _world_id(op: Any) -> str:
    return op.world_id


def _summary(op: Operation) -> str:
    fields = op.model_dump(exclude={"components", "component_types"})
    count = len(getattr(op, "components", ()) or getattr(op, "component_types", ()))
    return f"{fields}" + (f" with {count} component(s)" if count else "")


def _durable(model: type[Operation], mutate: Callable[[AsyncWorld, Any], Any]) -> DurableOperation:
    encode, encode_all = payload_encoder(model)
    return DurableOperation(decode=model.model_validate, materialize=mutate, encode=encode, encode_all=encode_all)


class _MutationSpec(TypedDict):
    """What the portable mutations' registrations share."""

    permission: Role
    quota_scope: str
    untrusted: bool
    world_key: Callable[[Any], str]
    summarize: Callable[[Any], str]


def world_family_specs() -> list[OperationSpec]:
    mutation = _MutationSpec(
        permission=Role.player, quota_scope="commands", untrusted=True, world_key=_world_id, summarize=_summary
    )
    return [
        OperationSpec(Spawn, _direct(_spawn), durable=_durable(Spawn, _spawn), **mutation),
        OperationSpec(
            SpawnReserved, _spawn_reserved_direct, permission=Role.admin, quota_scope="commands",
            world_key=_world_id, summarize=_summary, durable=_durable(SpawnReserved, _spawn_reserved),
        ),  # fmt: skip
        OperationSpec(Despawn, _direct(_despawn), durable=_durable(Despawn, _despawn), **mutation),
        OperationSpec(Update, _direct(_update), durable=_durable(Update, _update), **mutation),
        OperationSpec(AddComponents, _direct(_add_components), durable=_durable(AddComponents, _add_components), **mutation),
        OperationSpec(
            RemoveComponents, _direct(_remove_components), durable=_durable(RemoveComponents, _remove_components), **mutation
        ),
        OperationSpec(CreateWorld, _create_world, permission=Role.admin, untrusted=True, summarize=_summary),
        OperationSpec(ForkWorld, _fork_world, permission=Role.admin, untrusted=True, world_key=_world_id, summarize=_summary),
        OperationSpec(DestroyWorld, _destroy_world, permission=Role.admin, untrusted=True, world_key=_world_id, summarize=_summary),
        OperationSpec(Step, _step, permission=Role.operator, untrusted=True, world_key=_world_id, summarize=_summary),
        OperationSpec(
            QueryComponents, _query_components, permission=Role.viewer, untrusted=True, world_key=_world_id, summarize=_summary
        ),
        OperationSpec(ReserveEntityIds, _reserve_entity_ids, permission=Role.operator, world_key=_world_id, summarize=_summary),
    ]


def register_world_family(registry: OperationRegistry) -> None:
    for spec in world_family_specs():
        registry.register(spec)
