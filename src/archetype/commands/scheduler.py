"""CommandScheduler: durable admission, materialization inside a tick, and the ledger view.

The scheduler owns durability metadata only. What an operation *means* stays with the family
that registered it; the scheduler reaches it through the exact registration, never by switching
over operation names.
"""

from __future__ import annotations

import re
import string
import uuid
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from enum import Enum
from itertools import repeat
from operator import attrgetter, itemgetter
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, TypeAdapter

from archetype.canonical import canonical_json, digest
from archetype.commands.authority import Authority
from archetype.commands.component_check import check_components
from archetype.commands.errors import (
    CommandError,
    InvalidCommandError,
    StorageUnavailableError,
    UnsupportedComponentSchemaError,
    WorldClosingError,
    WorldNotFoundError,
)
from archetype.commands.failures import Permanent, Retryable
from archetype.commands.identity import COMMAND_ID_PATTERN, command_digest
from archetype.commands.ledger_rows import AdmissionRow, Admitted, CommandRow, ComponentSchemaRow, LeasedRow
from archetype.commands.options import ActorCtx, DurableOptions, Role
from archetype.commands.registry import OperationRegistry, OperationSpec, check_live_together
from archetype.world.commit import Outcome, PreparedTick, TickManifest, TickOutcomeUnknownError
from archetype.world.component_schema import UnsupportedSchemaError, check_record
from archetype.world.components import (
    DOC_KEYS,
    Component,
    LiveValue,
    all_exactly,
    canonical_prefixed_schema,
    resolve_component_class,
)
from archetype.world.error_text import error_text
from archetype.world.operations import Spawn, SpawnReserved

# A component identity in canonical JSON (sorted keys put these two side by side in a value or a
# type reference): found in text without parsing it. A stray match in component data can only
# name a class that is loaded anyway, whose schema is then recorded early: harmless.
# A world that is gone or closing: the ledger call a schema step runs ahead of refuses it too.
NOT_THERE = (WorldClosingError, WorldNotFoundError)
_IDENTITY_MARK = '"fingerprint":"'
_IDENTITY = re.compile(_IDENTITY_MARK + r'([0-9a-f]{64})","name":"([A-Za-z_][A-Za-z0-9_]{0,127})"')



# not StrEnum: str() and f-strings of a StrEnum give the bare value; these give "CommandStatus.PENDING"
class CommandStatus(str, Enum):  # noqa: UP042
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


class WorldHealth(str, Enum):  # noqa: UP042  (as CommandStatus)
    """ACTIVE, or STALLED: a tick failed before it was prepared and none has published since."""

    ACTIVE = "ACTIVE"
    STALLED = "STALLED"


class DeferredItem(BaseModel):
    """One command of a batch: the operation, its options and (optionally) its idempotency key."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    op: Any
    options: DurableOptions
    command_id: str | None = None


def one_item(op: Any, options: Any, command_id: Any) -> tuple[Any, DurableOptions, str | None]:
    """The three values a DeferredItem of these would hold, as its validation converts or refuses
    them: what `dispatcher.defer` asks of values other than a DurableOptions and a `str` or None,
    for which that validation would check and change nothing (`op` is `Any`; a DurableOptions
    instance is taken as it is; a `str` passes as it is)."""
    item = DeferredItem(op=op, options=options, command_id=command_id)
    return item.op, item.options, item.command_id


class CommandIdentity(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    command_id: str
    world_id: str
    sequence: int
    digest: str
    replayed: bool


# A batch's answers are validated as one list: one call into pydantic-core instead of one per answer.
_ANSWERS = TypeAdapter(list[CommandIdentity])
_ANSWER = CommandIdentity.__pydantic_validator__.validate_python
_OP, _OPTIONS, _COMMAND_ID = attrgetter("op"), attrgetter("options"), attrgetter("command_id")  # a batch's columns
# (a DurableOptions' fields from its __dict__: a model's attribute goes through a __getattr__ hook)
_FIELDS, _TICK_PRIORITY_ATTEMPTS = attrgetter("__dict__"), itemgetter("tick", "priority", "max_attempts")
_ROW_COMMAND_ID, _ROW_PAYLOAD = itemgetter("command_id"), itemgetter("payload")
_COPY: Callable[[AdmissionRow], AdmissionRow] = dict.copy  # type: ignore[assignment]  # (an AdmissionRow is a dict)


def identity_of(world_id: str, answer: Admitted) -> CommandIdentity:
    """An authority's answer to one admitted command, as `CommandIdentity(world_id=world_id,
    **answer)` makes it: a `dict` without a `world_id` of its own is validated with it added
    (pydantic-core makes the instance in fewer instructions than any Python that sets its
    attributes); any other answer is given to the constructor, which refuses it as it always did.
    tests/commands/test_answers.py holds it to the constructor's verdicts."""
    if type(answer) is dict and "world_id" not in answer:
        return _ANSWER({**answer, "world_id": world_id})
    return CommandIdentity(world_id=world_id, **answer)


def identities_of(world_id: str, answers: list[Admitted]) -> list[CommandIdentity]:
    """A batch's answers, validated as one list (its refusal says which answer)."""
    return _ANSWERS.validate_python([{**answer, "world_id": world_id} for answer in answers])


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
    redriven_from: int | None = None  # the sequence of the dead letter this command redrives
    redriven_by: int | None = None  # a dead letter's: the sequence of the command that redrove it
    created_at: int
    updated_at: int

    @classmethod
    def summary_fields(cls, row: Mapping[str, Any]) -> dict[str, Any]:
        return {name: row[name] for name in CommandSummary.model_fields}


class CommandRecord(CommandSummary):
    """A ledger row as the scheduler reports it. `operation_model` is None when the row could not
    be verified against its exact registration; `problem` then says why."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    operation_model: Any
    problem: str | None


class CommandScheduler:
    """Admission, and the materialization of due commands inside a world's tick.

    `owner` names the runner and is stable across its restarts (give each runner process its own);
    each world gets a fresh `session` per incarnation of this scheduler, so a restarted runner
    recovers its own leases at once and a crash is told apart from a renewal (docs/ledger.md).
    """

    def __init__(
        self,
        registry: OperationRegistry,
        authority: Authority,
        *,
        owner: str | None = None,
        lease_ms: int = 30_000,
        lease_limit: int = 10_000,
        quota: int | None = None,
        session_ids: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> None:
        self.registry = registry
        self.authority = authority
        self.owner = owner or f"scheduler-{uuid.uuid4().hex[:12]}"
        self.lease_ms = lease_ms
        self.lease_limit = lease_limit
        self.quota = quota
        self._new_session = session_ids
        self._sessions: dict[str, str] = {}
        self._recorded: dict[str, set[str]] = {}  # world id -> the fingerprints this process recorded there
        self._marks: dict[str, tuple[str, ...]] = {}  # world id -> those fingerprints as marks in text (_all_recorded)

    def session(self, world_id: str) -> str:
        """This incarnation's session for a world's leases."""
        if world_id not in self._sessions:
            self._sessions[world_id] = self._new_session()
        return self._sessions[world_id]

    def quota_for(self, actor: ActorCtx | None) -> int | None:
        """The per-tick quota `actor`'s admissions are charged against: none for trusted callers
        (no actor) and administrators (docs/http.md, "Quotas")."""
        return None if actor is None or actor.has(Role.admin) else self.quota

    def end_session(self, world_id: str) -> None:
        """After a process-fatal exception escaped a materializer, the next attempt at this world
        is treated as a restart: what this session holds is recovered like a crashed runner's."""
        self._sessions.pop(world_id, None)

    # -- component schemas --
    async def record_components(self, world_id: str, classes: Iterable[type[Component]], *, admitting: bool = True) -> None:
        """Record the schemas of these component classes in the world (once per process and world),
        so every authority can list them and validate their data at admission.

        A class whose schema the admission validator does not cover cannot be admitted anywhere:
        while `admitting` that is UnsupportedComponentSchemaError, at publication it is skipped
        (the world keeps the values; it only cannot list the type)."""
        fresh = {}
        for cls in classes:
            if cls.component_fingerprint() in self._recorded.get(world_id, ()):
                continue
            row = schema_row(cls)
            try:
                hidden = DOC_KEYS & set(cls.model_fields)
                if hidden:  # the fingerprint's step 1 drops such a property from the schema itself
                    raise UnsupportedSchemaError("$.properties", f"fields named {sorted(hidden)} cannot be fingerprinted")
                check_record(row["name"], row["fingerprint"], row["schema"])
            except UnsupportedSchemaError as exc:
                if admitting:
                    raise UnsupportedComponentSchemaError(f"component {cls.__qualname__}: {exc}") from None
                continue
            fresh[row["fingerprint"]] = row
        if fresh:
            try:
                await self.authority.record_components(world_id, list(fresh.values()))
            except NOT_THERE:
                return  # the call this records for (admit, reserve_spawn, publish) answers that itself
            recorded = self._recorded.setdefault(world_id, set())
            recorded.update(fresh)
            self._marks[world_id] = tuple(_IDENTITY_MARK + fingerprint for fingerprint in recorded)

    async def record_named(self, world_id: str, texts: Iterable[str], *, admitting: bool = True) -> None:
        """Record the schemas of the loaded classes that canonical JSON `texts` name (payloads, an
        entity's components). A type no class of this process has is left to whoever has one.

        This runs on every tick's write-set, so the usual answer (nothing new) is found by
        counting: when every identity in the text is one this process recorded, nothing is parsed."""
        texts = list(texts)  # (a snapshot's chunks are the whole state: counted in place, never joined)
        if self._all_recorded(world_id, texts):
            return
        known = self._recorded.setdefault(world_id, set())
        classes = []
        for fingerprint, name in {identity for text in texts for identity in _IDENTITY.findall(text)}:
            if fingerprint in known:
                continue
            try:
                classes.append(resolve_component_class(name, fingerprint))
            except LookupError:
                continue
        await self.record_components(world_id, classes, admitting=admitting)

    def _all_recorded(self, world_id: str, texts: list[str]) -> bool:
        """Whether every component identity in `texts` names a fingerprint this process recorded
        in the world: each identity mark is counted, and so are the marks of each recorded
        fingerprint (two can never match at one place: fingerprints are all 64 hex digits)."""
        marked = self._marks.get(world_id, ())
        for text in texts:
            unknown = text.count(_IDENTITY_MARK)
            for mark in marked:
                if not unknown:
                    break
                unknown -= text.count(mark)
            if unknown:
                return False
        return True

    # -- admission --
    def _admission_row(
        self, item: DeferredItem, actor: ActorCtx | None, origin: str, request_digest: str | None = None,
    ) -> tuple[str, AdmissionRow]:
        """The ledger row of `item`, validated (`_row`)."""
        return self._row(item.op, item.options, item.command_id, actor, origin, request_digest)

    def _row(
        self, op: Any, options: DurableOptions, command_id: str | None, actor: ActorCtx | None, origin: str,
        request_digest: str | None = None, live: list[LiveValue] | None = None, payload: str | None = None,
    ) -> tuple[str, AdmissionRow]:
        """The ledger row of one command (an item's three values), validated (its live values left
        in `live`, if given, for the caller to build: `OperationSpec.payload_of`), or with the
        `payload` its registration's `encode_all` answered. A SpawnReserved's `request_digest` is
        computed unless the caller already has it (admit_spawn, which reserved with it)."""
        spec = self.registry.durable_spec(op)
        command_id = checked_command_id(command_id)
        assert spec.world_key is not None  # register() refuses a durable operation without one
        world_id = spec.world_key(op)
        principal = actor.principal if actor else None
        # resolve() took the exact type: a subclass of SpawnReserved is no registered operation
        reserved = op if type(op) is SpawnReserved else None
        if type(options) is DurableOptions:  # its fields from its __dict__: a model's attribute goes through a __getattr__ hook
            given = options.__dict__
            tick, priority, max_attempts = given["tick"], given["priority"], given["max_attempts"]
        else:
            tick, priority, max_attempts = options.tick, options.priority, options.max_attempts
        row: AdmissionRow = {
            "command_id": command_id,
            "schema_version": spec.version,
            "scheduled_tick": tick,
            "priority": priority,
            "operation": spec.name,
            "payload": spec.payload_of(op, live) if payload is None else payload,
            "principal": principal,
            "origin": origin,
            "max_attempts": max_attempts,
            "reserved_entity_id": reserved.entity_id if reserved else None,
            "request_digest": None,
        }
        if reserved is not None:
            row["request_digest"] = (
                self.spawn_request_digest(reserved, options, principal) if request_digest is None else request_digest
            )
        return world_id, row

    def spawn_request_digest(self, op: Spawn | SpawnReserved, options: DurableOptions, principal: str | None) -> str:
        """The digest a spawn reservation binds: the spawn's content, options and principal. A
        SpawnReserved fulfils the reservation made for the Spawn with its world and components."""
        spawn = op if type(op) is Spawn else Spawn(world_id=op.world_id, components=op.components)
        request = {
            "payload": self.registry.resolve(spawn).payload_of(spawn),
            "options": options.model_dump(mode="json"),
            "principal": principal,
        }
        return digest(request)

    def admit(
        self, items: Sequence[DeferredItem], actor: ActorCtx | None = None, origin: str = "local"
    ) -> Coroutine[Any, Any, list[CommandIdentity]]:
        """Validate every item, then admit the batch in one ledger transaction (all or nothing):
        the admission to await. The items are validated by this call, which raises any refusal
        before anything is awaited (one coroutine fewer a command than a coroutine of its own)."""
        if not items:
            raise InvalidCommandError("a batch needs at least one command")
        return self._admit(*self._admission_rows(items, actor, origin), actor)

    def admit_one(
        self, op: Any, options: DurableOptions, command_id: str | None, actor: ActorCtx | None = None, origin: str = "local"
    ) -> Coroutine[Any, Any, CommandIdentity]:
        """`admit` of one command given as an item's three values (`one_item`'s), validated by this
        call: the admission to await, answering its identity."""
        world_id, row = self._row(op, options, command_id, actor, origin)
        return self._admit_row(world_id, row, actor)

    def _admission_rows(
        self, items: Sequence[DeferredItem], actor: ActorCtx | None, origin: str
    ) -> tuple[list[str], list[AdmissionRow]]:
        """Every item's world and row, as `_admission_row` makes each (the reference): a batch of
        one model whose payloads its registration's `encode_all` writes is made column by column
        (`_rows_by_column`); any other batch row by row, its live values built together
        (check_live_together). Should anything be refused, the batch is checked again item by
        item, which refuses as it always did: the first refusal in batch order."""
        if len(items) > 1:
            live: list[LiveValue] = []
            try:
                ops = list(map(_OP, items))
                spec = self.registry.durable.get(type(ops[0]))
                encode_all = spec.durable.encode_all if spec is not None and spec.durable is not None else None
                payloads = encode_all(ops) if encode_all is not None else None
                if payloads is not None and spec is not None and spec.model is not SpawnReserved:
                    by_column = self._rows_by_column(spec, ops, payloads, items, actor, origin)
                    if by_column is not None:
                        return by_column
                prepared = [
                    self._row(op, options, command_id, actor, origin, live=live, payload=payload)
                    for op, options, command_id, payload in zip(
                        ops, map(_OPTIONS, items), map(_COMMAND_ID, items), payloads or repeat(None), strict=False,
                    )
                ]  # fmt: skip
                check_live_together(live)
                return [world_id for world_id, _ in prepared], [row for _, row in prepared]
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException:  # a class's validator may raise anything: said again below, by the path that says which item and why
                pass
        prepared = [self._admission_row(item, actor, origin) for item in items]
        return [world_id for world_id, _ in prepared], [row for _, row in prepared]

    @staticmethod
    def _rows_by_column(
        spec: OperationSpec, ops: list[Any], payloads: list[str], items: Sequence[DeferredItem], actor: ActorCtx | None,
        origin: str,
    ) -> tuple[list[str], list[AdmissionRow]] | None:
        """`_row` of every item of a batch whose operations are all exactly `spec`'s model (not a
        SpawnReserved: no request digest) with the `payloads` its `encode_all` wrote, made a field
        at a time (each check asked of the column at once, in C; each row a copy of the batch's
        constant fields); None where an item's options are not exactly DurableOptions (the caller
        makes those rows one by one). Ids the batch's check does not vouch for are
        `checked_command_id`'s, which may refuse one: the caller then checks item by item, in order."""
        options = list(map(_OPTIONS, items))
        if not all_exactly(options, DurableOptions):
            return None
        command_ids = checked_command_ids(list(map(_COMMAND_ID, items)))
        assert spec.world_key is not None  # register() refuses a durable operation without one
        world_ids = list(map(spec.world_key, ops))
        # each row a copy of the batch's constant fields, the others set (cheaper than a dict display of eleven)
        constant: AdmissionRow = {
            "command_id": "", "schema_version": spec.version, "scheduled_tick": 0, "priority": 0, "operation": spec.name,
            "payload": "", "principal": actor.principal if actor else None, "origin": origin, "max_attempts": 0,
            "reserved_entity_id": None, "request_digest": None,
        }  # fmt: skip
        rows: list[AdmissionRow] = list(map(_COPY, repeat(constant, len(ops))))
        for row, command_id, payload, (tick, priority, max_attempts) in zip(
            rows, command_ids, payloads, map(_TICK_PRIORITY_ATTEMPTS, map(_FIELDS, options)), strict=True,
        ):  # fmt: skip
            row["command_id"], row["payload"] = command_id, payload
            row["scheduled_tick"], row["priority"], row["max_attempts"] = tick, priority, max_attempts
        return world_ids, rows

    async def admission(self, item: DeferredItem, actor: ActorCtx | None, origin: str = "local") -> tuple[str, AdmissionRow]:
        """The world and the ledger row `admit([item], actor, origin)` sends, checked as it checks
        them, the schemas of the components it names recorded: for a caller that carries many
        such rows to the ledger together (`Authority.admit_each`; archetype.commands.coalesced)."""
        world_id, row = self._admission_row(item, actor, origin)
        await self.record_named(world_id, [row["payload"]])
        return world_id, row

    async def _admit_row(self, world_id: str, row: AdmissionRow, actor: ActorCtx | None) -> CommandIdentity:
        """One command's row admitted: one world, one command id, nothing to compare."""
        payloads = [row["payload"]]
        if not self._all_recorded(world_id, payloads):
            await self.record_named(world_id, payloads)
        results = await self.authority.admit(world_id, [row], None if actor is None else self.quota_for(actor))
        return identity_of(world_id, results[0])

    async def _admit(self, world_ids: list[str], rows: list[AdmissionRow], actor: ActorCtx | None) -> list[CommandIdentity]:
        worlds = set(world_ids)
        if len(worlds) != 1:
            raise InvalidCommandError(f"a batch cannot span worlds (it names {sorted(worlds)})")
        if len(set(map(_ROW_COMMAND_ID, rows))) != len(rows):
            raise InvalidCommandError("a batch names the same command id twice")
        (world_id,) = worlds
        payloads = list(map(_ROW_PAYLOAD, rows))
        # counted in one text: a mark never spans two payloads, as none holds the newline between them
        if not self._all_recorded(world_id, ["\n".join(payloads)]):
            await self.record_named(world_id, payloads)
        results = await self.authority.admit(world_id, rows, self.quota_for(actor))
        return identities_of(world_id, results)

    async def admit_spawn(
        self, op: Spawn, options: DurableOptions, command_id: str | None, actor: ActorCtx | None, origin: str = "local"
    ) -> SpawnAdmission:
        """Reserve one entity id bound to the command id and request, then admit SpawnReserved.

        The whole admission is validated first (on a stand-in entity id), so a request that would
        be refused reserves nothing. The request digest is computed once, from `op` itself, and
        bound by both the reservation and the admitted row: the row's own rule (the digest of the
        Spawn with the SpawnReserved's world and components) gives the same bytes, those being
        `op`'s fields, so the check row (never admitted) goes without one.
        """
        if type(op) is not Spawn:
            raise InvalidCommandError("defer_spawn takes a Spawn")
        command_id = checked_command_id(command_id)
        principal = actor.principal if actor else None
        checked = SpawnReserved(world_id=op.world_id, entity_id=1, components=op.components)
        checked_item = DeferredItem(op=checked, options=options, command_id=command_id)
        _, row = self._admission_row(checked_item, actor, origin, request_digest="")  # never admitted: no digest
        await self._check_components(op.world_id, row)
        request_digest = self.spawn_request_digest(op, options, principal)
        entity_id = await self.authority.reserve_spawn(
            op.world_id, command_id, principal, request_digest, options.tick, self.quota_for(actor),
        )  # fmt: skip
        reserved = SpawnReserved(world_id=op.world_id, entity_id=entity_id, components=op.components)
        item = DeferredItem(op=reserved, options=options, command_id=command_id)
        identity = await self._admit_row(*self._admission_row(item, actor, origin, request_digest), actor)
        return SpawnAdmission(command=identity, entity_id=entity_id)

    async def _check_components(self, world_id: str, row: AdmissionRow) -> None:
        """The ledger's admission check of components, run before a spawn reserves its entity id:
        a spawn the ledger would refuse reserves nothing. A command id that already names a
        command is the ledger's to answer (an identical replay is not checked again: its types may
        have been migrated since; other content is a conflict)."""
        await self.record_named(world_id, [row["payload"]])
        try:
            recorded = (await self.authority.components(world_id))["components"]
        except NOT_THERE:
            return  # reserve_spawn refuses it in turn, before reserving anything
        rows = [(c["name"], c["fingerprint"], canonical_json(c["schema"]), c["recorded_at"], c["superseded_by"]) for c in recorded]
        try:
            check_components(world_id, [(f"command {row['command_id']!r}", row["payload"])],
                             lambda fingerprints: [r for r in rows if r[1] in fingerprints])  # fmt: skip
        except CommandError:
            # A closing world still lists its components (and recorded none of these, since
            # recording refused it): its refusal is reserve_spawn's, as the ledger would answer.
            try:
                status = (await self.authority.world_info(world_id))["status"]
            except NOT_THERE:
                return
            if status == "ACTIVE" and await self.authority.command(world_id, row["command_id"], row["principal"] or "") is None:
                raise

    # -- materialization (AsyncWorld calls this with the world's operation lock held) --
    async def materialize(self, world: Any, tick: int) -> None:
        """Lease the due commands and materialize them in ledger order, staging each outcome on
        the world's commit coordinator (the ledger writes them when the tick publishes).

        A command another session left leased (a crash) is *suspect*: before materializing it the
        crash guard names it durably, so if it kills this runner too it is charged an attempt.
        """
        world_id, session = world.world_id, self.session(world.world_id)
        rows = await self.authority.lease(
            world_id, self.owner, session, world.writer_epoch, tick, self.lease_limit, self.lease_ms
        )
        await world.ensure_entity_ids(sum(1 for r in rows if r["operation"] == Spawn.model_fields["operation"].default))
        guarded = False  # the guard must name the command running now, or nothing
        for row in rows:
            if row["suspect"] or guarded:
                guarded = row["suspect"]
                await self.authority.guard(
                    world_id, self.owner, session, world.writer_epoch, row["sequence"] if guarded else None
                )
            outcome, error = self._run(world, row)
            world.coordinator.settle(row["sequence"], row["command_id"], outcome, error)
            if outcome == "failed" and row["attempts"] + 1 < row["max_attempts"]:
                break  # RETRYABLE: stop the drain; publication gives the unprocessed tail back uncharged
            # a permanent failure dead-letters and the drain continues, like a spent budget
        if guarded:
            await self.authority.guard(world_id, self.owner, session, world.writer_epoch, None)

    def _run(self, world: Any, row: LeasedRow) -> tuple[Outcome, str | None]:
        """Verify and materialize one command in its own state layer; classify what it raised (the
        command's own verdict, Retryable or Permanent, before the exception-type rule). A
        BaseException that is not an Exception, whether the materializer raised it or reading the
        error's text did, propagates, and this session ends."""
        try:
            return self._attempt(world, row)
        except BaseException:
            self.end_session(world.world_id)
            raise

    def _attempt(self, world: Any, row: LeasedRow) -> tuple[Outcome, str | None]:
        try:
            spec, op = self._verify(world.world_id, row)
            durable = spec.require_durable()  # _verify() already did: this only narrows the type
            world.atomically(lambda: durable.materialize(world, op))
        except Retryable as exc:
            return "failed", error_text(exc)
        except Permanent as exc:
            return "permanent", error_text(exc)
        except (LookupError, TypeError, ValueError) as exc:
            return "rejected", error_text(exc)
        except Exception as exc:
            return "failed", error_text(exc)
        return "applied", None

    def _verify(self, world_id: str, row: CommandRow) -> tuple[OperationSpec, Any]:
        """Check a stored row against its exact registration before anything runs it."""
        if row["world_id"] != world_id:
            raise InvalidCommandError(f"row belongs to world {row['world_id']!r}, not {world_id!r}")
        spec = self.registry.named(row["operation"])
        if row["schema_version"] != spec.version:
            raise InvalidCommandError(f"schema version {row['schema_version']} is not {spec.version}")
        # a payload a component migration rewrote has its own digest; `digest` stays the admitted one
        if command_digest(dict(row)) != (row["migrated_digest"] or row["digest"]):
            raise InvalidCommandError("stored digest does not match the row's identity-bearing fields")
        op = spec.decode_exact(row["payload"])
        assert spec.world_key is not None  # decode_exact() required it durable, and register() a key then
        if spec.world_key(op) != world_id:
            raise InvalidCommandError("payload names another world")
        if isinstance(op, SpawnReserved) and op.entity_id != row["reserved_entity_id"]:
            raise InvalidCommandError("payload entity id differs from the reserved identity")
        return spec, op

    # -- the ledger view --
    async def history(
        self, world_id: str, *, status: CommandStatus | str | None = None, after_sequence: int = 0, limit: int = 100,
        scope: str | None = None,
    ) -> list[CommandRecord]:
        """Commands in sequence order; `scope` keeps one principal's ('' trusted callers'), None all."""
        status_name = CommandStatus(status).value if status is not None else None
        rows = await self.authority.history(world_id, status_name, after_sequence, limit, scope)
        return [self.record(row) for row in rows]

    async def command(self, world_id: str, command_id: str, scope: str = "") -> CommandRecord | None:
        """The command `command_id` in `scope` (the admitting principal's name; '' for trusted callers)."""
        row = await self.authority.command(world_id, command_id, scope)
        return None if row is None else self.record(row)

    def record(self, row: CommandRow) -> CommandRecord:
        """Decode one row through its exact registration; an unverifiable row says why instead of failing."""
        try:
            _, op = self._verify(row["world_id"], row)
            problem = None
        except (LookupError, TypeError, ValueError) as exc:
            op, problem = None, error_text(exc)
        return CommandRecord(**CommandSummary.summary_fields(dict(row)), operation_model=op, problem=problem)


def schema_row(cls: type[Component]) -> ComponentSchemaRow:
    """A component class as a world records it."""
    return {"name": cls.__name__, "fingerprint": cls.component_fingerprint(), "schema": canonical_prefixed_schema(cls)}


_ID_FIRST = frozenset(string.ascii_letters + string.digits)
_ID_ANY = _ID_FIRST | frozenset("_.:-")
_ID_LENGTH = 128
_COMMAND_IDS = re.compile("(?:" + COMMAND_ID_PATTERN.pattern.removeprefix("^").removesuffix("$") + "\n)+")


def checked_command_id(command_id: str | None) -> str:
    """The caller's idempotency key, or a fresh one; refused unless it matches COMMAND_ID_PATTERN whole."""
    if command_id is None:
        return uuid.uuid4().hex
    # COMMAND_ID_PATTERN's acceptance of an exact `str`, asked of its characters as sets (the
    # regular expression's match cost more than the rest of admission's row): held to the
    # pattern by tests/commands/test_command_ids.py; anything else is the pattern's to judge
    if type(command_id) is str and 0 < len(command_id) <= _ID_LENGTH and command_id[0] in _ID_FIRST and _ID_ANY.issuperset(command_id):
        return command_id
    if not isinstance(command_id, str) or not COMMAND_ID_PATTERN.fullmatch(command_id):
        raise InvalidCommandError(f"command id {command_id!r} must match {COMMAND_ID_PATTERN.pattern}")
    return command_id


def checked_command_ids(command_ids: list[str | None]) -> list[str]:
    """`checked_command_id` of each (the first refusal in order), a batch of exact `str`s asked of
    COMMAND_ID_PATTERN at once: the ids joined, each ended by a newline, none holding one of its
    own (the newlines counted), match the pattern repeated (held to `checked_command_id` by
    tests/commands/test_command_ids.py)."""
    if all_exactly(command_ids, str):
        given = cast("list[str]", command_ids)
        joined = "\n".join(given) + "\n"
        if joined.count("\n") == len(given) and _COMMAND_IDS.fullmatch(joined) is not None:
            return given
    return list(map(checked_command_id, command_ids))


class LedgerPublisher:
    """Publishes prepared ticks of one world through its authority, as the session that leased them."""

    def __init__(self, authority: Authority, scheduler: CommandScheduler) -> None:
        self.authority = authority
        self.scheduler = scheduler

    async def publish(self, prepared: PreparedTick) -> None:
        manifest = prepared.manifest
        session = self.scheduler.session(manifest.world_id)
        try:
            # before the tick, so a published entity's types are always recorded (the identities are
            # found in the chunks' text, unparsed)
            await self.scheduler.record_named(manifest.world_id, prepared.chunks, admitting=False)
            # The manifest's JSON is a ManifestRow, a type world/commit.py cannot name (ledger_rows
            # imports it): hence the ignore.
            await self.authority.publish(
                manifest.world_id, self.scheduler.owner, session, manifest.model_dump(mode="json"),  # type: ignore[arg-type]
                {"snapshot": prepared.snapshot, "chunks": list(prepared.chunks), "replaces_deltas": prepared.replaces_deltas},
                prepared.due_ms,
            )
        except CommandError as exc:
            if not isinstance(exc, StorageUnavailableError):
                raise  # the authority answered: a definitive refusal
            raise self._unknown(manifest, exc) from exc  # its storage failed: a commit's outcome may be unknown
        except Exception as exc:
            # No answer (connection dropped, timeout, storage error): the tick may have committed.
            # The world keeps the prepared tick; republishing it is safe, its commit token dedups.
            raise self._unknown(manifest, exc) from exc

    @staticmethod
    def _unknown(manifest: TickManifest, exc: Exception) -> TickOutcomeUnknownError:
        return TickOutcomeUnknownError(
            f"publication of tick {manifest.tick} of world {manifest.world_id!r} may or may not have committed: "
            f"{error_text(exc)}"
        )


class AuthorityIdSource:
    """Entity id blocks reserved in the ledger, so no id is ever handed out twice."""

    def __init__(self, authority: Authority, world_id: str) -> None:
        self.authority = authority
        self.world_id = world_id

    async def reserve(self, count: int) -> int:
        return await self.authority.reserve_entity_ids(self.world_id, count)
