"""CommandScheduler: durable admission, materialization inside a tick, and the ledger view.

The scheduler owns durability metadata only. What an operation *means* stays with the family
that registered it; the scheduler reaches it through the exact registration, never by switching
over operation names.
"""

from __future__ import annotations

import re
import uuid
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict

from archetype.canonical import digest
from archetype.commands.authority import Authority
from archetype.commands.errors import CommandError, InvalidCommandError
from archetype.commands.identity import command_digest
from archetype.commands.options import ActorCtx, DurableOptions
from archetype.commands.registry import OperationRegistry, OperationSpec
from archetype.world.commit import PreparedTick, TickOutcomeUnknownError
from archetype.world.operations import Spawn, SpawnReserved

COMMAND_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


class CommandStatus(str, Enum):
    PENDING = "PENDING"
    LEASED = "LEASED"
    RETRYABLE = "RETRYABLE"
    APPLIED = "APPLIED"
    REJECTED = "REJECTED"
    DEAD_LETTER = "DEAD_LETTER"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self not in (CommandStatus.PENDING, CommandStatus.LEASED, CommandStatus.RETRYABLE)


class DeferredItem(BaseModel):
    """One command of a batch: the operation, its options and (optionally) its idempotency key."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    op: Any
    options: DurableOptions
    command_id: str | None = None


class CommandIdentity(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    command_id: str
    world_id: str
    sequence: int
    digest: str
    replayed: bool


class SpawnAdmission(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    command: CommandIdentity
    entity_id: int


class CommandSummary(BaseModel):
    """The fields of a ledger row every view of a command shares."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    command_id: str
    world_id: str
    sequence: int
    operation: str
    status: CommandStatus
    scheduled_tick: int
    priority: int
    attempts: int
    max_attempts: int
    applied_tick: int | None
    last_error: str | None
    principal: str | None
    origin: str
    reserved_entity_id: int | None
    created_at: int
    updated_at: int

    @classmethod
    def summary_fields(cls, row: dict[str, Any]) -> dict[str, Any]:
        return {name: row[name] for name in CommandSummary.model_fields}


class CommandRecord(CommandSummary):
    """A ledger row as the scheduler reports it. `operation_model` is None when the row could not
    be verified against its exact registration; `problem` then says why."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    operation_model: Any
    problem: str | None


class CommandScheduler:
    def __init__(
        self,
        registry: OperationRegistry,
        authority: Authority,
        *,
        owner: str | None = None,
        lease_ms: int = 30_000,
        lease_limit: int = 10_000,
        quota: int | None = None,
    ) -> None:
        self.registry = registry
        self.authority = authority
        self.owner = owner or f"scheduler-{uuid.uuid4().hex[:12]}"
        self.lease_ms = lease_ms
        self.lease_limit = lease_limit
        self.quota = quota

    # -- admission --
    def _admission_row(self, item: DeferredItem, actor: ActorCtx | None, origin: str) -> tuple[str, dict[str, Any]]:
        spec = self.registry.resolve(item.op)
        spec.require_durable()
        command_id = item.command_id or uuid.uuid4().hex
        if not isinstance(command_id, str) or not COMMAND_ID_PATTERN.match(command_id):
            raise InvalidCommandError(f"command id {command_id!r} must match {COMMAND_ID_PATTERN.pattern}")
        world_id = spec.world_key(item.op)
        row = {
            "command_id": command_id,
            "schema_version": spec.version,
            "scheduled_tick": item.options.tick,
            "priority": item.options.priority,
            "operation": spec.name,
            "payload": spec.payload_of(item.op),
            "principal": actor.principal if actor else None,
            "origin": origin,
            "max_attempts": item.options.max_attempts,
            "reserved_entity_id": getattr(item.op, "entity_id", None) if isinstance(item.op, SpawnReserved) else None,
        }
        return world_id, row

    async def admit(self, items: list[DeferredItem], actor: ActorCtx | None = None, origin: str = "local") -> list[CommandIdentity]:
        """Validate every item, then admit the batch in one ledger transaction (all or nothing)."""
        if not items:
            raise InvalidCommandError("a batch needs at least one command")
        prepared = [self._admission_row(item, actor, origin) for item in items]
        worlds = {world_id for world_id, _ in prepared}
        if len(worlds) != 1:
            raise InvalidCommandError(f"a batch cannot span worlds (it names {sorted(worlds)})")
        (world_id,) = worlds
        results = await self.authority.call(
            "admit", world_id=world_id, commands=[row for _, row in prepared], quota=self.quota if actor else None
        )
        return [CommandIdentity(world_id=world_id, **r) for r in results]

    async def admit_spawn(
        self, op: Spawn, options: DurableOptions, command_id: str | None, actor: ActorCtx | None, origin: str = "local"
    ) -> SpawnAdmission:
        """Reserve one entity id bound to the command id and request, then admit SpawnReserved."""
        spec = self.registry.resolve(op)
        if type(op) is not Spawn:
            raise InvalidCommandError("defer_spawn takes a Spawn")
        command_id = command_id or uuid.uuid4().hex
        request = {
            "payload": spec.payload_of(op),
            "options": options.model_dump(mode="json"),
            "principal": actor.principal if actor else None,
        }
        entity_id = await self.authority.call(
            "reserve_spawn", world_id=op.world_id, command_id=command_id, request_digest=digest(request),
            quota=self.quota if actor else None, principal=request["principal"], scheduled_tick=options.tick,
        )  # fmt: skip
        reserved = SpawnReserved(world_id=op.world_id, entity_id=entity_id, components=op.components)
        (identity,) = await self.admit([DeferredItem(op=reserved, options=options, command_id=command_id)], actor, origin)
        return SpawnAdmission(command=identity, entity_id=entity_id)

    # -- materialization (AsyncWorld calls this with the world's operation lock held) --
    async def materialize(self, world: Any, tick: int) -> None:
        rows = await self.authority.call(
            "lease", world_id=world.world_id, owner=self.owner, writer_epoch=world.writer_epoch,
            tick=tick, limit=self.lease_limit, lease_ms=self.lease_ms,
        )  # fmt: skip
        await world.ensure_entity_ids(sum(1 for r in rows if r["operation"] == Spawn.model_fields["operation"].default))
        for index, row in enumerate(rows):
            if world.coordinator.is_staged(row["command_id"]):
                continue  # staged by an earlier attempt at this tick: never applied twice
            try:
                spec, op = self._verify(world.world_id, row)
                world.atomically(lambda: spec.durable.materialize(world, op))
            except (LookupError, TypeError, ValueError) as exc:
                await self._fail(world, row, exc, permanent=True)
                continue
            except Exception as exc:
                status = await self._fail(world, row, exc, permanent=False)
                if status == CommandStatus.RETRYABLE:
                    tail = [r["command_id"] for r in rows[index + 1 :] if not world.coordinator.is_staged(r["command_id"])]
                    if tail:
                        await self.authority.call("release", world_id=world.world_id, owner=self.owner, command_ids=tail)
                    return
                continue
            world.coordinator.stage(row["command_id"])

    async def _fail(self, world: Any, row: dict[str, Any], exc: Exception, *, permanent: bool) -> CommandStatus:
        error = f"{type(exc).__name__}: {exc}"
        status = await self.authority.call(
            "fail", world_id=world.world_id, owner=self.owner, writer_epoch=world.writer_epoch,
            command_id=row["command_id"], permanent=permanent, error=error,
        )
        return CommandStatus(status)

    def _verify(self, world_id: str, row: dict[str, Any]) -> tuple[OperationSpec, Any]:
        """Check a stored row against its exact registration before anything runs it."""
        if row["world_id"] != world_id:
            raise InvalidCommandError(f"row belongs to world {row['world_id']!r}, not {world_id!r}")
        spec = self.registry.named(row["operation"])
        if row["schema_version"] != spec.version:
            raise InvalidCommandError(f"schema version {row['schema_version']} is not {spec.version}")
        if command_digest(row) != row["digest"]:
            raise InvalidCommandError("stored digest does not match the row's identity-bearing fields")
        op = spec.decode_exact(row["payload"])
        if spec.world_key(op) != world_id:
            raise InvalidCommandError("payload names another world")
        if isinstance(op, SpawnReserved) and op.entity_id != row["reserved_entity_id"]:
            raise InvalidCommandError("payload entity id differs from the reserved identity")
        return spec, op

    # -- the ledger view --
    async def history(
        self, world_id: str, *, status: CommandStatus | str | None = None, after_sequence: int = 0, limit: int = 100
    ) -> list[CommandRecord]:
        status_name = CommandStatus(status).value if status is not None else None
        rows = await self.authority.call(
            "history", world_id=world_id, status=status_name, after_sequence=after_sequence, limit=limit
        )
        return [self.record(row) for row in rows]

    async def command(self, world_id: str, command_id: str) -> CommandRecord | None:
        row = await self.authority.call("command", world_id=world_id, command_id=command_id)
        return None if row is None else self.record(row)

    def record(self, row: dict[str, Any]) -> CommandRecord:
        """Decode one row through its exact registration; an unverifiable row says why instead of failing."""
        try:
            _, op = self._verify(row["world_id"], row)
            problem = None
        except (LookupError, TypeError, ValueError) as exc:
            op, problem = None, f"{type(exc).__name__}: {exc}"
        return CommandRecord(**CommandSummary.summary_fields(row), operation_model=op, problem=problem)


class LedgerPublisher:
    """Publishes prepared ticks of one world through its authority."""

    def __init__(self, authority: Authority, owner: str) -> None:
        self.authority = authority
        self.owner = owner

    async def publish(self, prepared: PreparedTick) -> None:
        manifest = prepared.manifest
        try:
            await self.authority.call(
                "publish", world_id=manifest.world_id, owner=self.owner, manifest=manifest.model_dump(mode="json"),
                writes=list(prepared.writes),
            )  # fmt: skip
        except CommandError:
            raise  # the authority answered: a definitive refusal
        except Exception as exc:
            # No answer (connection dropped, timeout, storage error): the tick may have committed.
            # The world keeps the prepared tick; republishing it is safe, its commit token dedups.
            raise TickOutcomeUnknownError(
                f"publication of tick {manifest.tick} of world {manifest.world_id!r} may or may not have committed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc


class AuthorityIdSource:
    """Entity id blocks reserved in the ledger, so no id is ever handed out twice."""

    def __init__(self, authority: Authority, world_id: str) -> None:
        self.authority = authority
        self.world_id = world_id

    async def reserve(self, count: int) -> int:
        return await self.authority.call("reserve_entity_ids", world_id=self.world_id, count=count)
