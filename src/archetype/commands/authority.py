"""The one interface runners and the scheduler use to reach a control authority.

`Authority` has one typed method per ledger operation (`LEDGER_METHODS`, and `CATALOG_METHODS`,
which only a store of many worlds serves), so a wrong method or argument name fails the type
checker, not a run. Underneath, every authority is a plain-JSON
RPC: `rpc(method, arguments)` carries the arguments to the ledger and its result back, and
raises the typed `CommandError` the ledger raised. The local authority runs the ledger
in-process; the Durable Object and the HTTP client reach it remotely.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from archetype.commands.errors import UnregisteredOperationError
from archetype.commands.ledger import (
    CATALOG_METHODS,
    DEFAULT_IDEMPOTENCY_WINDOW_MS,
    DEFAULT_KEEP_TICKS,
    LEDGER_METHODS,
    PRUNE_LIMIT,
    Ledger,
)
from archetype.commands.ledger_rows import (
    MAX_PAGE,
    AdmissionRow,
    Admitted,
    CommandId,
    CommandLeaseMs,
    CommandRow,
    CommandSequence,
    ComponentMigrationRow,
    ComponentSchemaRow,
    Destroyed,
    EntityId,
    EntityRewrite,
    Epoch,
    HostLeaseMs,
    KeepTicks,
    LeasedRow,
    ManifestRow,
    Migrated,
    OutboxEvent,
    PageLimit,
    PayloadRewrite,
    PendingWorld,
    Position,
    Pruned,
    PruneLimit,
    Published,
    Quota,
    Redriven,
    ReserveCount,
    RunnerRow,
    StatePage,
    StateRead,
    StateWrite,
    Tick,
    TickIntervalMs,
    TickPosition,
    WallMs,
    Watermark,
    WindowMs,
    WorldComponents,
    WorldRow,
)
from archetype.world.operations import Label, Name
from archetype.world.tick_mode import DEFAULT_TICK_INTERVAL_MS, DEFAULT_TICK_MODE


class Authority(ABC):
    @abstractmethod
    async def rpc(self, method: str, arguments: dict[str, Any]) -> Any:
        """Run ledger `method` with these keyword arguments; answer its JSON result.

        The transport underneath the typed methods (and what the HTTP runner protocol relays);
        everything else calls the typed methods."""

    async def close(self) -> None:
        return None

    # -- worlds --
    async def create_world(self, world_id: str, name: Name, tick_mode: str = DEFAULT_TICK_MODE,
                           tick_interval_ms: TickIntervalMs = DEFAULT_TICK_INTERVAL_MS) -> WorldRow:  # fmt: skip
        return await self.rpc("create_world", {
            "world_id": world_id, "name": name, "tick_mode": tick_mode, "tick_interval_ms": tick_interval_ms,
        })  # fmt: skip

    async def fork_world(self, source_world_id: str, at_tick: TickPosition, world_id: str, name: Name,
                         with_open_commands: bool = False, actor: Name | None = None) -> WorldRow:  # fmt: skip
        return await self.rpc("fork_world", {
            "source_world_id": source_world_id, "at_tick": at_tick, "world_id": world_id, "name": name,
            "with_open_commands": with_open_commands, "actor": actor,
        })  # fmt: skip

    async def world_info(self, world_id: str) -> WorldRow:
        return await self.rpc("world_info", {"world_id": world_id})

    async def list_worlds(self) -> list[WorldRow]:
        return await self.rpc("list_worlds", {})

    async def acquire_writer(self, world_id: str) -> WorldRow:
        return await self.rpc("acquire_writer", {"world_id": world_id})

    async def claim_world(self, world_id: str, owner: Label, lease_ms: HostLeaseMs) -> WorldRow:
        return await self.rpc("claim_world", {"world_id": world_id, "owner": owner, "lease_ms": lease_ms})

    async def renew_world(self, world_id: str, owner: Label, writer_epoch: Epoch, lease_ms: HostLeaseMs) -> WorldRow:
        return await self.rpc("renew_world", {
            "world_id": world_id, "owner": owner, "writer_epoch": writer_epoch, "lease_ms": lease_ms,
        })  # fmt: skip

    async def release_world(self, world_id: str, owner: Label, writer_epoch: Epoch) -> WorldRow:
        return await self.rpc("release_world", {"world_id": world_id, "owner": owner, "writer_epoch": writer_epoch})

    # -- the runner registry --
    async def register_runner(self, runner_id: str, instance: Label, lease_ms: HostLeaseMs) -> RunnerRow:
        return await self.rpc("register_runner", {"runner_id": runner_id, "instance": instance, "lease_ms": lease_ms})

    async def leave_runner(self, runner_id: str, instance: Label) -> RunnerRow | None:
        return await self.rpc("leave_runner", {"runner_id": runner_id, "instance": instance})

    async def live_runners(self) -> list[RunnerRow]:
        return await self.rpc("live_runners", {})

    async def hosted_worlds(self, owner: Label) -> list[WorldRow]:
        return await self.rpc("hosted_worlds", {"owner": owner})

    async def pending_worlds(self) -> list[PendingWorld]:
        return await self.rpc("pending_worlds", {})

    async def load_state(self, world_id: str, after_entity_id: Position = 0, limit: PageLimit = MAX_PAGE) -> StatePage:
        return await self.rpc("load_state", {"world_id": world_id, "after_entity_id": after_entity_id, "limit": limit})

    async def read_state(self, world_id: str, after_entity_id: Position = 0, limit: PageLimit = 1_000,
                         component_types: list[str] | None = None, entity_ids: list[EntityId] | None = None,
                         tick: TickPosition | None = None) -> StateRead:  # fmt: skip
        return await self.rpc("read_state", {
            "world_id": world_id, "after_entity_id": after_entity_id, "limit": limit, "component_types": component_types,
            "entity_ids": entity_ids, "tick": tick,
        })  # fmt: skip

    async def reserve_entity_ids(self, world_id: str, count: ReserveCount) -> int:
        return await self.rpc("reserve_entity_ids", {"world_id": world_id, "count": count})

    # -- admission --
    async def reserve_spawn(self, world_id: str, command_id: CommandId, principal: Name | None, request_digest: str,
                            scheduled_tick: Tick, quota: Quota | None = None) -> int:  # fmt: skip
        return await self.rpc("reserve_spawn", {
            "world_id": world_id, "command_id": command_id, "principal": principal, "request_digest": request_digest,
            "scheduled_tick": scheduled_tick, "quota": quota,
        })  # fmt: skip

    async def admit(self, world_id: str, commands: list[AdmissionRow], quota: Quota | None = None) -> list[Admitted]:
        return await self.rpc("admit", {"world_id": world_id, "commands": commands, "quota": quota})

    async def admit_each(self, world_id: str, commands: list[AdmissionRow], quota: Quota | None = None) -> list[Admitted | Exception]:
        """Each command admitted as `admit(world_id, [command], quota)` admits it alone: its
        identity, or what refused it. Not a ledger operation: here, one `admit` per command, made
        concurrently as separate callers would make them; an authority that can carry them in one
        call overrides it (the local catalog's writer thread)."""

        async def alone(command: AdmissionRow) -> Admitted | Exception:
            try:
                (admitted,) = await self.admit(world_id, [command], quota)
            except Exception as exc:
                return exc
            return admitted

        return list(await asyncio.gather(*(alone(command) for command in commands)))

    # -- a tick --
    async def lease(self, world_id: str, owner: Label, session: Label, writer_epoch: Epoch, tick: Tick, limit: PageLimit,
                    lease_ms: CommandLeaseMs) -> list[LeasedRow]:  # fmt: skip
        return await self.rpc("lease", {
            "world_id": world_id, "owner": owner, "session": session, "writer_epoch": writer_epoch, "tick": tick,
            "limit": limit, "lease_ms": lease_ms,
        })  # fmt: skip

    async def guard(self, world_id: str, owner: Label, session: Label, writer_epoch: Epoch,
                    sequence: CommandSequence | None) -> None:  # fmt: skip
        await self.rpc("guard", {
            "world_id": world_id, "owner": owner, "session": session, "writer_epoch": writer_epoch, "sequence": sequence,
        })  # fmt: skip

    async def publish(self, world_id: str, owner: Label, session: Label, manifest: ManifestRow,
                      writes: StateWrite, due_ms: WallMs | None = None) -> Published:  # fmt: skip
        return await self.rpc("publish", {
            "world_id": world_id, "owner": owner, "session": session, "manifest": manifest, "writes": writes,
            "due_ms": due_ms,
        })  # fmt: skip

    async def record_tick_failure(self, world_id: str, owner: Label, session: Label, writer_epoch: Epoch, tick: Tick,
                                  error: str, release: bool = True) -> WorldRow:  # fmt: skip
        return await self.rpc("record_tick_failure", {
            "world_id": world_id, "owner": owner, "session": session, "writer_epoch": writer_epoch, "tick": tick,
            "error": error, "release": release,
        })  # fmt: skip

    async def retry_world(self, world_id: str, actor: Name | None = None) -> WorldRow:
        return await self.rpc("retry_world", {"world_id": world_id, "actor": actor})

    async def release(self, world_id: str, owner: Label, session: Label, writer_epoch: Epoch) -> int:
        return await self.rpc("release", {"world_id": world_id, "owner": owner, "session": session,
                                          "writer_epoch": writer_epoch})  # fmt: skip

    async def redrive(self, world_id: str, command_id: CommandId, scope: str = "",
                      new_command_id: CommandId | None = None, actor: Name | None = None) -> Redriven:  # fmt: skip
        return await self.rpc("redrive", {"world_id": world_id, "command_id": command_id, "scope": scope,
                                          "new_command_id": new_command_id, "actor": actor})  # fmt: skip

    async def destroy(self, world_id: str, actor: Name | None = None) -> Destroyed:
        return await self.rpc("destroy", {"world_id": world_id, "actor": actor})

    # -- reads --
    async def command(self, world_id: str, command_id: CommandId, scope: str | None = "") -> CommandRow | None:
        return await self.rpc("command", {"world_id": world_id, "command_id": command_id, "scope": scope})

    async def commands_by_id(self, world_id: str, command_ids: list[CommandId], scope: str = "") -> list[CommandRow]:
        return await self.rpc("commands_by_id", {"world_id": world_id, "command_ids": command_ids, "scope": scope})

    async def history(self, world_id: str, status: str | None = None, after_sequence: Position = 0, limit: PageLimit = 100,
                      scope: str | None = None) -> list[CommandRow]:  # fmt: skip
        return await self.rpc("history", {
            "world_id": world_id, "status": status, "after_sequence": after_sequence, "limit": limit, "scope": scope,
        })  # fmt: skip

    async def manifests(self, world_id: str, after_tick: TickPosition = -1, limit: PageLimit = 100) -> list[ManifestRow]:
        return await self.rpc("manifests", {"world_id": world_id, "after_tick": after_tick, "limit": limit})

    # -- outbox --
    async def read_outbox(self, world_id: str, after_seq: Position = 0, limit: PageLimit = 100) -> list[OutboxEvent]:
        return await self.rpc("read_outbox", {"world_id": world_id, "after_seq": after_seq, "limit": limit})

    async def read_outbox_columns(self, world_id: str, after_seq: Position = 0, limit: PageLimit = 100) -> dict[str, list[Any]]:
        return await self.rpc("read_outbox_columns", {"world_id": world_id, "after_seq": after_seq, "limit": limit})

    async def acknowledge_outbox(self, world_id: str, up_to_seq: Position) -> Watermark:
        return await self.rpc("acknowledge_outbox", {"world_id": world_id, "up_to_seq": up_to_seq})

    async def watermark(self, world_id: str) -> Watermark:
        return await self.rpc("watermark", {"world_id": world_id})

    async def next_due_tick(self, world_id: str) -> int | None:
        return await self.rpc("next_due_tick", {"world_id": world_id})

    # -- retention --
    async def prune(self, world_id: str, keep_ticks: KeepTicks = DEFAULT_KEEP_TICKS,
                    idempotency_window_ms: WindowMs = DEFAULT_IDEMPOTENCY_WINDOW_MS,
                    limit: PruneLimit = PRUNE_LIMIT) -> Pruned:  # fmt: skip
        return await self.rpc("prune", {
            "world_id": world_id, "keep_ticks": keep_ticks, "idempotency_window_ms": idempotency_window_ms,
            "limit": limit,
        })  # fmt: skip

    # -- component schemas --
    async def record_components(self, world_id: str, components: list[ComponentSchemaRow]) -> int:
        return await self.rpc("record_components", {"world_id": world_id, "components": components})

    async def components(self, world_id: str) -> WorldComponents:
        return await self.rpc("components", {"world_id": world_id})

    async def migrate_components(self, world_id: str, writer_epoch: Epoch, migration: ComponentMigrationRow,
                                 entities: list[EntityRewrite], commands: list[PayloadRewrite]) -> Migrated:  # fmt: skip
        return await self.rpc("migrate_components", {
            "world_id": world_id, "writer_epoch": writer_epoch, "migration": migration, "entities": entities,
            "commands": commands,
        })  # fmt: skip


class InProcessAuthority(Authority):
    def __init__(self, ledger: Ledger, close: Callable[[], None] | None = None) -> None:
        self.ledger = ledger
        self._close = close

    async def rpc(self, method: str, arguments: dict[str, Any]) -> Any:
        if method not in LEDGER_METHODS and method not in CATALOG_METHODS:
            raise UnregisteredOperationError(f"{method!r} is not a ledger method")
        return getattr(self.ledger, method)(**arguments)

    async def close(self) -> None:
        if self._close is not None:
            self._close()
