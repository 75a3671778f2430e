"""CommandDispatcher: the governed entry for every operation, direct or durable.

Order, always: exact registration -> role check -> trusted/untrusted availability -> handler
(or durable admission). Role denial happens before anything looks a world up, so a caller
without the role cannot learn whether a world exists.
"""

from __future__ import annotations

from collections.abc import Coroutine
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from archetype.commands.errors import OperationUnavailableError, PermissionDeniedError
from archetype.commands.ledger_rows import AdmissionRow
from archetype.commands.options import ActorCtx, DurableOptions
from archetype.commands.registry import OperationRegistry, OperationSpec
from archetype.commands.scheduler import CommandIdentity, CommandScheduler, DeferredItem, SpawnAdmission, one_item
from archetype.world.operations import Spawn

_OP = attrgetter("op")  # a batch's operations, read in C


@dataclass(frozen=True)
class HandlerContext:
    """What a family handler may use: the runtime's worlds and scheduler, and who is asking."""

    worlds: Any
    scheduler: CommandScheduler
    actor: ActorCtx | None
    audit: Any = None


class CommandDispatcher:
    def __init__(self, registry: OperationRegistry, scheduler: CommandScheduler, worlds: Any, origin: str = "local",
                 audit: Any = None) -> None:  # fmt: skip
        self.registry = registry
        self.scheduler = scheduler
        self.worlds = worlds
        self.origin = origin
        self.audit = audit

    def _context(self, actor: ActorCtx | None) -> HandlerContext:
        return HandlerContext(self.worlds, self.scheduler, actor, self.audit)

    def _authorize(self, op: object, actor: ActorCtx | None, *, durable: bool = False) -> OperationSpec:
        if durable:
            spec = self.registry.durable_spec(op)
        else:
            spec = self.registry.resolve(op)
        if actor is None:
            if not spec.trusted:
                raise OperationUnavailableError(f"{spec.name} is not available to trusted callers")
            return spec
        if not actor.has(spec.permission):
            raise PermissionDeniedError(f"{spec.name} needs the {spec.permission.name} role")
        if not spec.untrusted:
            raise OperationUnavailableError(f"{spec.name} is not available to authenticated callers")
        return spec

    def authorize_as(self, actor: ActorCtx, op: object) -> None:
        """The checks `apply_as` makes before it runs the handler: for a caller that makes the
        operation's ledger call itself (to keep the row it answers)."""
        self._authorize(op, actor)

    # -- direct --
    async def apply(self, op: object) -> Any:
        spec = self._authorize(op, None)
        return await spec.handler(self._context(None), op)

    async def apply_as(self, actor: ActorCtx, op: object) -> Any:
        spec = self._authorize(op, actor)
        return await spec.handler(self._context(actor), op)

    # -- durable --
    async def defer(self, op: object, options: DurableOptions, *, command_id: str | None = None) -> CommandIdentity:
        return await self._defer_one(op, options, command_id, None)

    async def defer_as(self, actor: ActorCtx, op: object, options: DurableOptions, *, command_id: str | None = None) -> CommandIdentity:
        return await self._defer_one(op, options, command_id, actor)

    def _defer_one(self, op: Any, options: Any, command_id: Any, actor: ActorCtx | None) -> Coroutine[Any, Any, CommandIdentity]:
        """`defer`'s checks in their order (the item's values, converted or refused as a
        DeferredItem's are, before the role; then the row), and the admission to await."""
        if type(options) is not DurableOptions or not (command_id is None or type(command_id) is str):
            op, options, command_id = one_item(op, options, command_id)
        self._authorize(op, actor, durable=True)
        return self.scheduler.admit_one(op, options, command_id, actor, self.origin)

    def _authorize_each(self, items: list[DeferredItem], actor: ActorCtx | None) -> None:
        """Every item's operation authorized, in order, once per operation type: `_authorize`'s
        verdict (and its message) is its registration's (found by the exact type) and the
        actor's, so one operation of each type stands for the others (the types in the order
        they first appear, each with its last operation: a dict made in C)."""
        ops = list(map(_OP, items))
        for op in dict(zip(map(type, ops), ops, strict=True)).values():
            self._authorize(op, actor, durable=True)

    async def defer_batch(self, items: list[DeferredItem]) -> list[CommandIdentity]:
        self._authorize_each(items, None)
        return await self.scheduler.admit(items, None, self.origin)

    async def defer_batch_as(self, actor: ActorCtx, items: list[DeferredItem]) -> list[CommandIdentity]:
        self._authorize_each(items, actor)
        return await self.scheduler.admit(items, actor, self.origin)

    async def admission_as(self, actor: ActorCtx, item: DeferredItem) -> tuple[str, AdmissionRow]:
        """What `defer_as` of `item` checks before the ledger (the role, the durable registration,
        the row) and sends it: its world and row (`CommandScheduler.admission`)."""
        self._authorize(item.op, actor, durable=True)
        return await self.scheduler.admission(item, actor, self.origin)

    async def defer_spawn(self, op: Spawn, options: DurableOptions, *, command_id: str | None = None) -> SpawnAdmission:
        self._authorize(op, None, durable=True)
        return await self.scheduler.admit_spawn(op, options, command_id, None, self.origin)

    async def defer_spawn_as(self, actor: ActorCtx, op: Spawn, options: DurableOptions, *, command_id: str | None = None) -> SpawnAdmission:
        self._authorize(op, actor, durable=True)
        return await self.scheduler.admit_spawn(op, options, command_id, actor, self.origin)
