"""The one HTTP application, served by `archetype serve` (local authority) and by the Worker
(an authority routing to per-world Durable Objects). It only translates HTTP to the dispatcher
and the authority: roles, quotas, idempotency and admission all live behind them.

Every route authenticates and checks its role before it touches a world, so a caller without
the role gets the same answer whether or not the world exists.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from fastapi import Body, Depends, FastAPI, Header, Path, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import Field, StringConstraints

from archetype.api.auth import Bearer, TokenTable, require
from archetype.api.errors import InvalidRequestError, ShuttingDownError, install_error_handlers, unexpected_error
from archetype.api.hot import HotPath, HotRoutes, hot_route
from archetype.api.limits import DEFAULT_BODY_TIMEOUT_S, DEFAULT_MAX_BODY_BYTES, BodyLimit
from archetype.api.models import (
    MAX_BATCH,
    AuditPage,
    BatchAccepted,
    CommandAccepted,
    CommandOutcome,
    CommandView,
    ComponentList,
    CreateWorldRequest,
    DestroyedWorld,
    ForkWorldRequest,
    Health,
    HistoryPage,
    OutcomesPage,
    OutcomesRequest,
    RedriveAccepted,
    StateSectionsView,
    StateView,
    SubmitBatchRequest,
    SubmitCommand,
    WorldList,
    WorldView,
)
from archetype.api.openapi import (
    CREATE_WORLD,
    DESTROY_WORLD,
    FORK_WORLD,
    LEDGER,
    READ_AUDIT,
    READ_COMMAND,
    READ_OUTCOMES,
    READ_STATE,
    REDRIVE,
    RETRY_WORLD,
    SUBMITTING,
    WORLD_PATH,
    error_responses,
)
from archetype.api.runner_protocol import ADMISSION_METHODS, LEDGER_ROUTE_ROLES, ledger_arguments
from archetype.canonical import MAX_SAFE_INTEGER
from archetype.commands.audit_history import GetAuditHistory
from archetype.commands.authority import Authority
from archetype.commands.coalesced import CoalescedAdmissions
from archetype.commands.dispatcher import CommandDispatcher
from archetype.commands.errors import (
    CommandError,
    CommandNotFoundError,
    PermissionDeniedError,
    UnregisteredOperationError,
)
from archetype.commands.families import default_registry
from archetype.commands.http_translator import translate
from archetype.commands.identity import COMMAND_ID_PATTERN
from archetype.commands.ledger import COMPONENT_SPEC_PATTERN
from archetype.commands.ledger_core import scope_of
from archetype.commands.ledger_rows import CommandRow
from archetype.commands.options import ActorCtx, Role
from archetype.commands.port import StorageFault
from archetype.commands.registry import OperationRegistry
from archetype.commands.scheduler import CommandIdentity, CommandScheduler, CommandStatus
from archetype.commands.state_pages import STATE_READ_IDS, STATE_READ_LIMIT, STATE_READ_TYPES
from archetype.world.error_text import error_text
from archetype.world.family import create_world_row, fork_world_row
from archetype.world.operations import WORLD_ID_PATTERN, DestroyWorld, Name, Spawn

# Commands one principal may have admitted for one target tick of one world (ledger-enforced).
DEFAULT_QUOTA = 1000

WorldIdPath = Annotated[str, Path(pattern=WORLD_ID_PATTERN)]
CommandIdPath = Annotated[str, Path(pattern=COMMAND_ID_PATTERN.pattern)]
IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", pattern=COMMAND_ID_PATTERN.pattern)]
PrincipalQuery = Annotated[Name | None, Query(description="an analyst's view of this principal's commands")]
TrustedQuery = Annotated[bool, Query(description="an analyst's view of the commands trusted callers admitted in-process")]
ComponentQuery = Annotated[
    list[Annotated[str, StringConstraints(pattern=COMPONENT_SPEC_PATTERN)]] | None,
    Query(max_length=STATE_READ_TYPES, description="keep the entities that have a component of each of these types (repeat "
          "it), and only those components: `<name>:<fingerprint>` of a recorded type, or the `<name>` of the one current type "
          "so named"),
]  # fmt: skip
EntityIdQuery = Annotated[
    list[Annotated[int, Field(ge=1, le=MAX_SAFE_INTEGER)]] | None,
    Query(max_length=STATE_READ_IDS, description="keep these entities (repeat it)"),
]
TickQuery = Annotated[
    int | None,
    Query(ge=-1, le=MAX_SAFE_INTEGER, description="read the state as the world published it at this tick, any tick of its "
          "retention window (`tick_not_retained` outside it); default: the tick head"),
]  # fmt: skip
LAYOUT = ("`entities`: each entity with its component values (name, fingerprint, data); `sections`: the same entities "
          "grouped by signature, each component type named once per section with a row of data per entity (a fraction of "
          "the bytes: what `archetype.Client` reads)")
LedgerArguments = Annotated[dict[str, Any], Body(default_factory=dict, description="the method's keyword arguments")]


class AdmissionGate:
    """Open while the service admits; a shutting-down server closes it and answers 503."""

    def __init__(self) -> None:
        self.open = True

    def close(self) -> None:
        self.open = False

    def check(self) -> None:
        if not self.open:
            raise ShuttingDownError("the server is shutting down and admits nothing more")


class HttpApp(FastAPI):
    """FastAPI behind front layers: ASGI layers every request passes before the framework's own
    (its error pages, OpenTelemetry hooks, body limit and routing), each added with `front` (the
    last added runs first, like `add_middleware`). The requests HotRoutes answers never enter the
    framework: its layers cost an admission a tenth of the event loop's work (docs/http.md).
    `hot_path` is what these layers do to a hot route's request, for a server answering it
    without ASGI (archetype.api.hot.HotPath); None once a layer that cannot say was added."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self._front: Callable[..., Any] = super().__call__
        self.hot_path: HotPath | None = HotPath()

    def front(self, layer: Callable[..., Any], **options: Any) -> None:
        self._front = layer(self._front, **options)
        on_hot_path = getattr(self._front, "on_hot_path", None)
        if on_hot_path is None:
            self.hot_path = None
        elif self.hot_path is not None:
            on_hot_path(self.hot_path)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self._front(scope, receive, send)


class EdgeWorlds:
    """The HTTP edge steps no worlds, so destroying one has no loaded world to drop."""

    def drop(self, world_id: str) -> None:
        return None


def readable_scope(actor: ActorCtx, principal: str | None, trusted: bool) -> str | None:
    """Whose commands `actor` reads: its own; an analyst (an operator, an admin) the principal it
    names, the trusted callers' with `trusted`, or every principal's when it names none (None).

    A principal's commands (payloads included) are private to it: without the analyst role,
    naming another principal is refused, and another's command id reads as absent.
    """
    if actor.has(Role.analyst):
        return "" if trusted else principal
    if trusted or (principal is not None and principal != actor.principal):
        raise PermissionDeniedError("reading another principal's commands needs the analyst role")
    return actor.principal


# The dependencies are coroutines although they never wait: see `require`.
async def _admitting(request: Request) -> None:
    request.app.state.admission.check()


async def _ledger_actor(method: str, request: Request, credentials: Bearer) -> ActorCtx:
    role = LEDGER_ROUTE_ROLES.get(method)
    actor = await require(role or Role.operator)(request, credentials)
    if role is None:
        raise UnregisteredOperationError(f"{method!r} is not a runner-protocol method")
    if method in ADMISSION_METHODS:
        request.app.state.admission.check()
    return actor


def _no_fault() -> StorageFault | None:
    return None


def create_app(
    authority: Authority,
    *,
    registry: OperationRegistry | None = None,
    tokens: TokenTable | Mapping[str, Any] | None = None,
    quota: int | None = DEFAULT_QUOTA,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    worlds: Any = None,
    audit: Any = None,
    telemetry: bool = False,
    storage_fault: Callable[[], StorageFault | None] | None = None,
) -> HttpApp:
    """The HTTP application over `authority`. `tokens` maps bearer tokens to actors; `worlds` is
    the runner's WorldHost when one shares the process (destroy then drops its loaded world);
    `audit` is the audit projection GetAuditHistory reads (without one it answers 503);
    `storage_fault` says why the storage's writes fail, for `/health` (None: nothing to say).

    `telemetry` turns on FastAPI's OpenTelemetry spans, metrics and logs (reported where the
    process configures an OpenTelemetry provider); every request then goes through the
    framework, the hot routes included, so that each has its span."""
    registry = registry or default_registry()
    scheduler = CommandScheduler(registry, authority, quota=quota)
    dispatcher = CommandDispatcher(registry, scheduler, worlds or EdgeWorlds(), origin="gateway", audit=audit)
    coalesced = CoalescedAdmissions(dispatcher)  # single admissions in one turn of the loop: one ledger call

    # No trailing-slash redirects: the framework builds them from the request's Host header, which
    # the client controls (`GET /worlds/w1/` with `Host: evil.example` would send it there).
    # No docs pages here: FastAPI's load Swagger UI from a CDN; `archetype serve` mounts local ones (archetype.docs_ui).
    off = None if telemetry else {"tracing": False, "metrics": False, "logs": False}
    app = HttpApp(title="archetype", version="1", summary="Durable world commands over HTTP", redirect_slashes=False,
                  docs_url=None, redoc_url=None, telemetry=off)  # fmt: skip
    app.state.tokens = tokens if isinstance(tokens, TokenTable) else TokenTable(tokens or {})
    app.state.admission = AdmissionGate()
    app.state.storage_fault = storage_fault or _no_fault
    install_error_handlers(app)

    # The work of the two routes HotRoutes may answer as well (archetype.api.hot).
    async def admit_one(world_id: str, body: SubmitCommand, actor: ActorCtx,
                        idempotency_key: str | None) -> tuple[CommandIdentity, int | None]:  # fmt: skip
        """The admitted command and, for a spawn, its entity id: CommandAccepted's fields."""
        item = translate(world_id, body, idempotency_key=idempotency_key)
        if type(item.op) is Spawn:
            admission = await dispatcher.defer_spawn_as(actor, item.op, item.options, command_id=item.command_id)
            return admission.command, admission.entity_id
        return await coalesced.admit_as(actor, item), None

    async def admit_hot(world_id: str, body: SubmitCommand, actor: ActorCtx, idempotency_key: str | None) -> bytes:
        return CommandAccepted.json_of(*await admit_one(world_id, body, actor, idempotency_key))

    async def create_one(_: None, body: CreateWorldRequest, actor: ActorCtx, __: str | None) -> WorldView:
        op = body.operation()
        dispatcher.authorize_as(actor, op)  # then the handler's own ledger call, whose row is the answer
        return WorldView.of(await create_world_row(authority, op))

    hot = (hot_route("/worlds/{world_id}/commands", Role.player, SubmitCommand, 202, admit_hot, keyed=True),
           hot_route("/worlds", Role.admin, CreateWorldRequest, 201, create_one, keyed=False))  # fmt: skip
    # BodyLimit runs first: HotRoutes gets the body read, checked and parsed
    if not telemetry:
        app.front(HotRoutes, state=app.state, routes=lambda: app.router.routes, hot=hot, on_error=unexpected_error)
    app.front(BodyLimit, max_bytes=max_body_bytes, body_timeout_s=body_timeout_s, state=app.state)

    viewer, player, operator, admin = (
        Depends(require(role)) for role in (Role.viewer, Role.player, Role.operator, Role.admin)
    )
    admitting = Depends(_admitting)

    @app.get("/health", response_model=Health, response_model_exclude_none=True,
             responses=error_responses((ShuttingDownError,), authenticated=False))  # fmt: skip
    async def health() -> Health:
        app.state.admission.check()
        return Health.of(app.state.storage_fault())

    # -- worlds --
    @app.post("/worlds", status_code=201, response_model=WorldView, responses=error_responses(CREATE_WORLD))
    async def create_world(body: CreateWorldRequest, actor: ActorCtx = admin, _: None = admitting) -> WorldView:
        return await create_one(None, body, actor, None)

    @app.get("/worlds", response_model=WorldList, responses=error_responses())
    async def list_worlds(actor: ActorCtx = viewer) -> WorldList:
        """Every world of the authority (at the edge, through its world directory)."""
        return WorldList(worlds=[WorldView.of(info) for info in await authority.list_worlds()])

    @app.get("/worlds/{world_id}", response_model=WorldView, responses=error_responses(WORLD_PATH))
    async def inspect_world(world_id: WorldIdPath, actor: ActorCtx = viewer) -> WorldView:
        return WorldView.of(await authority.world_info(world_id))

    @app.get("/worlds/{world_id}/state", response_model=StateView | StateSectionsView, responses=error_responses(READ_STATE))
    async def world_state(
        world_id: WorldIdPath,
        actor: ActorCtx = viewer,
        component: ComponentQuery = None,
        entity_id: EntityIdQuery = None,
        after: Annotated[int, Query(ge=0, le=MAX_SAFE_INTEGER, description="entity id to continue after (`next_after`)")] = 0,
        limit: Annotated[int, Query(ge=1, le=STATE_READ_LIMIT)] = 100,
        layout: Annotated[Literal["entities", "sections"], Query(description=LAYOUT)] = "entities",
        tick: TickQuery = None,
    ) -> Response:
        """The world's published entities and their components, in id order (world state is shared:
        docs/ledger.md, isolation), read from its stored chunks (docs/storage.md, "Reading state"):
        at its tick head, or as it was at `tick` (docs/storage.md, "State at a tick")."""
        page = await authority.read_state(world_id, after, limit, component, entity_id, tick)
        view = StateView if layout == "entities" else StateSectionsView
        return Response(view.body(page), media_type="application/json")

    @app.get("/worlds/{world_id}/components", response_model=ComponentList, responses=error_responses(WORLD_PATH))
    async def world_components(world_id: WorldIdPath, actor: ActorCtx = viewer) -> ComponentList:
        """The component types the world recorded, with the schema admission validates their data against."""
        return ComponentList.model_validate(await authority.components(world_id))

    @app.post("/worlds/{world_id}:fork", status_code=201, response_model=WorldView, responses=error_responses(FORK_WORLD))
    async def fork_world(world_id: WorldIdPath, body: ForkWorldRequest, actor: ActorCtx = admin,
                         _: None = admitting) -> WorldView:  # fmt: skip
        """A new world made of this one as it was at `at_tick` (docs/ledger.md, "Forks"); admin."""
        op = body.operation(world_id)
        dispatcher.authorize_as(actor, op)  # then the handler's own ledger call, whose row is the answer
        return WorldView.of(await fork_world_row(authority, op, actor))

    @app.delete("/worlds/{world_id}", response_model=DestroyedWorld, responses=error_responses(DESTROY_WORLD))
    async def destroy_world(world_id: WorldIdPath, actor: ActorCtx = admin, _: None = admitting) -> DestroyedWorld:
        cancelled = await dispatcher.apply_as(actor, DestroyWorld(world_id=world_id))
        return DestroyedWorld(world_id=world_id, cancelled=cancelled)

    @app.post("/worlds/{world_id}/retry", response_model=WorldView, responses=error_responses(RETRY_WORLD))
    async def retry_world(world_id: WorldIdPath, actor: ActorCtx = operator, _: None = admitting) -> WorldView:
        """Operator only. Retry a STALLED world now, once its cause is fixed: its failed attempts
        start again from 0, so the runner waiting out their backoff retries at once (within a
        second), and the audit table gets `world_retry_requested`. A world that is not stalled is
        left as it is. Answers the world (docs/ledger.md, "World health")."""
        return WorldView.of(await authority.retry_world(world_id, actor=actor.principal))

    # -- commands --
    async def find_command(world_id: str, command_id: str, actor: ActorCtx, principal: str | None,
                           trusted: bool) -> CommandRow:  # fmt: skip
        """The command `command_id` the actor means: of the scope it names, else its own; an
        analyst naming no scope and having none of that id means the one principal's that has one
        (`ambiguous_command` when several do). CommandNotFoundError when there is none."""
        scope = readable_scope(actor, principal, trusted)
        row = await authority.command(world_id, command_id, scope=actor.principal if scope is None else scope)
        if row is None and scope is None:
            row = await authority.command(world_id, command_id, scope=None)
        if row is None:
            raise CommandNotFoundError(f"world {world_id!r} has no command {command_id!r} of this principal")
        return row

    async def find_commands(world_id: str, command_ids: list[str], actor: ActorCtx, principal: str | None,
                            trusted: bool) -> list[CommandRow]:  # fmt: skip
        """`find_command` for many ids, in admission order: one read of the scope the actor means;
        an analyst naming no scope reads each id it has none of its own as `find_command` does."""
        scope = readable_scope(actor, principal, trusted)
        rows = await authority.commands_by_id(world_id, command_ids, scope=actor.principal if scope is None else scope)
        if scope is None:
            own = {row["command_id"] for row in rows}
            others = await asyncio.gather(*(authority.command(world_id, command_id, scope=None)
                                            for command_id in dict.fromkeys(command_ids) if command_id not in own))  # fmt: skip
            rows = sorted([*rows, *(row for row in others if row is not None)], key=lambda row: row["sequence"])
        return rows

    @app.post("/worlds/{world_id}/commands", status_code=202, response_model=CommandAccepted,
              responses=error_responses(WORLD_PATH, SUBMITTING))
    async def submit(world_id: WorldIdPath, body: SubmitCommand, actor: ActorCtx = player, _: None = admitting,
                     idempotency_key: IdempotencyKey = None) -> CommandAccepted:  # fmt: skip
        return CommandAccepted.of(*await admit_one(world_id, body, actor, idempotency_key))

    @app.post("/worlds/{world_id}/commands:batch", status_code=202, response_model=BatchAccepted,
              responses=error_responses(WORLD_PATH, SUBMITTING))
    async def submit_batch(world_id: WorldIdPath, body: SubmitBatchRequest, actor: ActorCtx = player,
                           _: None = admitting, idempotency_key: IdempotencyKey = None) -> BatchAccepted:  # fmt: skip
        """All or nothing. Without their own `command_id`, items are keyed `<Idempotency-Key>.<index>`;
        spawns in a batch are admitted as plain spawns (their entity id is assigned when applied)."""
        items = [
            translate(world_id, request, idempotency_key=None if request.command_id or not idempotency_key
                      else f"{idempotency_key}.{index}")
            for index, request in enumerate(body.commands)
        ]  # fmt: skip
        identities = await dispatcher.defer_batch_as(actor, items)
        return BatchAccepted(commands=[CommandAccepted.of(identity) for identity in identities])

    @app.get("/worlds/{world_id}/commands/{command_id}", response_model=CommandView, responses=error_responses(READ_COMMAND))
    async def command_status(world_id: WorldIdPath, command_id: CommandIdPath, actor: ActorCtx = viewer,
                             principal: PrincipalQuery = None, trusted: TrustedQuery = False) -> CommandView:  # fmt: skip
        """The caller's own command with this id; an analyst may name another principal's (or the
        trusted scope), and naming none reads the one principal's that has it (`find_command`)."""
        return CommandView.of(await find_command(world_id, command_id, actor, principal, trusted))

    @app.post("/worlds/{world_id}/commands:outcomes", response_model=OutcomesPage, responses=error_responses(READ_OUTCOMES))
    async def command_outcomes(world_id: WorldIdPath, body: OutcomesRequest, actor: ActorCtx = viewer,
                               principal: PrincipalQuery = None, trusted: TrustedQuery = False) -> OutcomesPage:  # fmt: skip
        """Where many commands stand, in one read: the caller's own commands among these ids (an
        analyst may name another principal's, or the trusted scope, and naming none reads each id
        it has none of as the one principal's that has one), exactly as
        `GET .../commands/{command_id}` reads each (`find_commands`). A read: safe to repeat,
        changes nothing."""
        rows = await find_commands(world_id, body.command_ids, actor, principal, trusted)
        found = {row["command_id"] for row in rows}
        missing = [command_id for command_id in dict.fromkeys(body.command_ids) if command_id not in found]
        return OutcomesPage(commands=[CommandOutcome.of(row) for row in rows], missing=missing)

    @app.get("/worlds/{world_id}/commands", response_model=HistoryPage, responses=error_responses(WORLD_PATH))
    async def history(
        world_id: WorldIdPath,
        actor: ActorCtx = viewer,
        status: CommandStatus | None = None,
        principal: PrincipalQuery = None,
        trusted: TrustedQuery = False,
        after: Annotated[int, Query(ge=0, le=MAX_SAFE_INTEGER, description="sequence to continue after")] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_BATCH)] = 100,
    ) -> HistoryPage:
        """The caller's own commands; an analyst sees every principal's (or one, with `principal`)."""
        rows = await authority.history(
            world_id, status.value if status else None, after, limit, scope=readable_scope(actor, principal, trusted)
        )
        commands = [CommandView.of(row) for row in rows]
        return HistoryPage(commands=commands, next_after=commands[-1].sequence if len(commands) == limit else None)

    @app.post("/worlds/{world_id}/dead-letters/{command_id}/redrive", status_code=202, response_model=RedriveAccepted,
              responses=error_responses(REDRIVE))
    async def redrive(world_id: WorldIdPath, command_id: CommandIdPath, actor: ActorCtx = operator,
                      _: None = admitting, principal: PrincipalQuery = None, trusted: TrustedQuery = False,
                      idempotency_key: IdempotencyKey = None) -> RedriveAccepted:  # fmt: skip
        """Operators (and admins). A new command redriving the dead letter `command_id` (the one
        `find_command` finds): same operation and payload, a fresh attempt budget, due at the next
        tick; the dead record stays terminal. The `Idempotency-Key` names the new command (default
        `<command_id>.redrive`); the same key again answers the same command."""
        dead = await find_command(world_id, command_id, actor, principal, trusted)
        redriven = await authority.redrive(world_id, command_id, scope_of(dead["principal"]), idempotency_key,
                                           actor.principal)  # fmt: skip
        return RedriveAccepted(world_id=world_id, **redriven)

    @app.get("/worlds/{world_id}/audit", response_model=AuditPage, responses=error_responses(READ_AUDIT))
    async def audit_history(
        world_id: WorldIdPath,
        actor: ActorCtx = viewer,
        tick_from: Annotated[int | None, Query(ge=0, le=MAX_SAFE_INTEGER)] = None,
        tick_to: Annotated[int | None, Query(ge=0, le=MAX_SAFE_INTEGER)] = None,
        principal: Annotated[Name | None, Query()] = None,
        command_id: Annotated[str | None, Query(pattern=COMMAND_ID_PATTERN.pattern)] = None,
        status: CommandStatus | None = None,
        after: Annotated[int, Query(ge=0, le=MAX_SAFE_INTEGER, description="event sequence to continue after")] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_BATCH)] = 100,
    ) -> AuditPage:
        """GetAuditHistory: the audit projection (may lag the ledger), not the ledger itself."""
        query = GetAuditHistory(world_id=world_id, tick_from=tick_from, tick_to=tick_to, principal=principal,
                                command_id=command_id, status=status, after_event_seq=after, limit=limit)  # fmt: skip
        events = await dispatcher.apply_as(actor, query)
        return AuditPage(events=events, next_after=events[-1].event_seq if len(events) == limit else None)

    # -- the runner protocol --
    async def call_ledger(method: str, world_id: str | None, arguments: dict[str, Any]) -> JSONResponse:
        try:
            return JSONResponse(await authority.rpc(method, ledger_arguments(method, world_id, arguments)))
        except CommandError:
            raise
        except (LookupError, TypeError, ValueError) as exc:
            # well-typed arguments whose values the ledger cannot use: bad input, not a server fault
            raise InvalidRequestError(f"{method} cannot use these arguments: {error_text(exc)}") from exc

    @app.post("/worlds/{world_id}/ledger/{method}", responses=error_responses(LEDGER))
    async def world_ledger(world_id: WorldIdPath, method: str, arguments: LedgerArguments,
                           actor: ActorCtx = Depends(_ledger_actor)) -> JSONResponse:  # fmt: skip
        return await call_ledger(method, world_id, arguments)

    @app.post("/ledger/{method}", responses=error_responses(LEDGER))
    async def ledger(method: str, arguments: LedgerArguments, actor: ActorCtx = Depends(_ledger_actor)) -> JSONResponse:
        return await call_ledger(method, None, arguments)

    return app
