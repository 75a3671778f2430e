"""`archetype.Client` and `archetype.AsyncClient`: the public HTTP routes from Python (CPython only: httpx).

Both run the same calls: each call below is written once, as a generator that yields the HTTP
requests (and the pauses between retries) it needs and returns its answer; `Client` drives it
with a blocking `httpx.Client`, `AsyncClient` with an `httpx.AsyncClient`.

Every request is safe to repeat, so every request is retried the same way: a submission always
carries an idempotency key (one is made when the caller gives none), and the retry sends the
same key, so a command whose answer was lost is answered again as a replay, never admitted
twice. Retried: a failed connection or an answer that never came, a 5xx other than the permanent
ones, and a 429 that carries `Retry-After` (a rate limiter asking to come back); never any other
4xx, so a `quota_exceeded` (no `Retry-After`: the quota of that tick is spent) is raised at once.
Errors are the typed `CommandError` classes named by the answer's stable code
(`archetype.commands.errors`, `archetype.api.errors`).

Commands are typed: `spawn`, `update`, `add_components`, `remove_components` and `despawn` take
component instances and classes (their names and fingerprints are the classes'), `defer` and
`defer_batch` the family models (`archetype.world`) with `DurableOptions`, as the dispatcher does
in process; each answers the admitted command's `CommandAccepted`, which `wait` and `wait_all` take.
`wait_all` reads where many commands stand a page of 1,000 at a time (`POST .../commands:outcomes`),
not one request per command. The JSON the routes take (`submit`, `submit_batch`) stays accepted.

Reads never take a world's writer: state, history and command status are the viewer routes,
which read the published state and the ledger beside the server's own runner
(`Runtime.open_remote` is a runner: it acquires the writer, and the server's runner then gets
`stale_writer`). `state` and `iter_state` read the state filtered by component types and entity
ids, page by page; `iter_state` holds one page at a time, however large the world.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import AsyncIterator, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from archetype.api.models import (
    BatchAccepted,
    CommandAccepted,
    CommandOutcome,
    CommandView,
    DestroyedWorld,
    OutcomesPage,
    RedriveAccepted,
    WorldView,
)
from archetype.client_state import ComponentFilter, EntityState, StatePage, StateQuery, WorldState
from archetype.commands.audit_history import AuditEvent
from archetype.commands.errors import AuditUnavailableError, CommandNotFoundError, LedgerSchemaError
from archetype.commands.http_translator import Mutation, SubmitCommandRequest, request_of
from archetype.commands.options import DurableOptions
from archetype.commands.scheduler import CommandStatus, CommandSummary, DeferredItem
from archetype.commands.state_pages import STATE_READ_LIMIT
from archetype.http_client import LIMITS
from archetype.remote import DEFAULT_TIMEOUT_S, raise_for_error
from archetype.world.components import Component
from archetype.world.operations import AddComponents, Despawn, RemoveComponents, Spawn, Update
from archetype.world.tick_mode import TickMode

__all__ = ["AsyncClient", "Client", "EntityState", "RetryPolicy", "WaitTimeoutError", "WorldState"]

T = TypeVar("T")
PAGE = 500
STATE_PAGE = 5_000  # entities per state request: 5,000 three-component entities are about 0.3 MB as sections
OUTCOMES_PAGE = 1_000  # command ids per outcomes request (the route's most)
# 5xx answers that a retry cannot change: the catalog is newer than the server, the server has no audit projection
PERMANENT_5XX = frozenset({LedgerSchemaError.code, AuditUnavailableError.code})
Command = SubmitCommandRequest | Mapping[str, Any]
# A command `defer_batch` takes: a family model (admitted with the batch's options) or one with its own.
Deferred = Mutation | DeferredItem
# What `wait` and `wait_all` take: a command id, or the answer that admitted it.
CommandRef = str | CommandAccepted
ASAP = DurableOptions(tick=0)  # a tick that has passed: the first tick the world runs


@dataclass(frozen=True)
class RetryPolicy:
    """`attempts` tries in all; the n-th pause is `backoff_s * 2**n` (at most `max_backoff_s`), with
    jitter, so clients that failed together do not come back together. A `Retry-After` of at most
    `max_retry_after_s` is waited as given; a longer one is not waited for (the error is raised)."""

    attempts: int = 5
    backoff_s: float = 0.1
    max_backoff_s: float = 5.0
    max_retry_after_s: float = 60.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"a retry policy makes at least one attempt, not {self.attempts}")

    def backoff(self, retry: int) -> float:
        return min(self.max_backoff_s, self.backoff_s * 2**retry) * random.uniform(0.5, 1.0)


class WaitTimeoutError(TimeoutError):
    """`wait()` or `wait_all()` ran out of time; `command` is the (first) unsettled command as last
    read, `commands` every unsettled one."""

    def __init__(self, command: CommandSummary, timeout: float, commands: Sequence[CommandSummary] = ()) -> None:
        others = f" (and {len(commands) - 1} more)" if len(commands) > 1 else ""
        super().__init__(f"command {command.command_id!r}{others} is still {command.status.value} after {timeout} s")
        self.command = command
        self.commands = list(commands) or [command]


@dataclass(frozen=True)
class _Request:
    method: str
    path: str
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Pause:
    seconds: float


Call = Generator[_Request | _Pause, Any, T]


def new_key() -> str:
    return f"c-{uuid.uuid4().hex}"


def _body(command: Command) -> dict[str, Any]:
    if isinstance(command, SubmitCommandRequest):
        return command.model_dump(mode="json", exclude_none=True)
    return dict(command)


def _batch(commands: Iterable[Deferred], options: DurableOptions | None) -> tuple[str, list[SubmitCommandRequest]]:
    """The world and the requests of a batch of family models (ValueError across worlds)."""
    items = [c if isinstance(c, DeferredItem) else DeferredItem(op=c, options=options or ASAP) for c in commands]
    worlds = {item.op.world_id for item in items}
    if len(worlds) != 1:
        raise ValueError(f"a batch is 1..1000 commands of one world, not of {sorted(worlds) or 'none'}")
    return worlds.pop(), [request_of(item.op, item.options, command_id=item.command_id) for item in items]


def _command_id(world_id: str, command: CommandRef) -> str:
    if isinstance(command, str):
        return command
    if command.world_id != world_id:
        raise ValueError(f"command {command.command_id!r} is of world {command.world_id!r}, not {world_id!r}")
    return command.command_id


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return max(0.0, float(response.headers["Retry-After"]))
    except (KeyError, ValueError):
        return None  # absent, or an HTTP date: not worth a clock comparison, raise the error


class _Calls:
    """The calls, written once. Each yields `_Request`s (getting the response, or a transport error
    thrown in) and `_Pause`s, and returns its answer."""

    def __init__(self, retry: RetryPolicy) -> None:
        self.retry = retry

    def _pause_before_retry(self, response: httpx.Response, retry: int) -> float | None:
        if response.is_success:
            return None
        if response.status_code == 429:
            after = _retry_after(response)
            return after if after is not None and after <= self.retry.max_retry_after_s else None
        if response.status_code >= 500:
            try:
                code = response.json().get("code")
            except ValueError:
                code = None  # a proxy's page, not the server's answer: worth another try
            if code in PERMANENT_5XX:
                return None
            after = _retry_after(response)  # a 503 may say when to come back; longer than allowed: back off as usual
            return after if after is not None and after <= self.retry.max_retry_after_s else self.retry.backoff(retry)
        return None

    def send(self, request: _Request) -> Call[Any]:
        """The JSON answer of `request`, retried as the module says; the typed error of its last answer."""
        for retry in range(self.retry.attempts):
            last = retry == self.retry.attempts - 1
            try:
                response: httpx.Response = yield request
            except httpx.TransportError:
                if last:
                    raise
                yield _Pause(self.retry.backoff(retry))
                continue
            pause = None if last else self._pause_before_retry(response, retry)
            if pause is None:
                raise_for_error(response)
                return response.json()
            yield _Pause(pause)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def pages(self, path: str, key: str, params: Mapping[str, Any]) -> Call[list[dict[str, Any]]]:
        rows: list[dict[str, Any]] = []
        after = 0
        while True:
            page = yield from self.send(_Request("GET", path, params={**params, "after": after, "limit": PAGE}))
            rows.extend(page[key])
            if page["next_after"] is None:
                return rows
            after = page["next_after"]

    def submit(self, world_id: str, command: Command, idempotency_key: str | None) -> Call[CommandAccepted]:
        body = _body(command)
        key = idempotency_key or body.get("command_id") or new_key()
        request = _Request("POST", f"/worlds/{world_id}/commands", json=body, headers={"Idempotency-Key": key})
        return CommandAccepted.model_validate((yield from self.send(request)))

    def submit_batch(self, world_id: str, commands: Iterable[Command], idempotency_key: str | None
                     ) -> Call[list[CommandAccepted]]:  # fmt: skip
        body = {"commands": [_body(command) for command in commands]}
        request = _Request("POST", f"/worlds/{world_id}/commands:batch", json=body,
                           headers={"Idempotency-Key": idempotency_key or new_key()})  # fmt: skip
        return BatchAccepted.model_validate((yield from self.send(request))).commands

    def command(self, world_id: str, command_id: str, principal: str | None) -> Call[CommandView]:
        params = {"principal": principal} if principal else {}
        answer = yield from self.send(_Request("GET", f"/worlds/{world_id}/commands/{command_id}", params=params))
        return CommandView.model_validate(answer)

    def redrive(self, world_id: str, command_id: str, principal: str | None, trusted: bool,
                idempotency_key: str | None) -> Call[RedriveAccepted]:  # fmt: skip
        # Without a key the server names the new command `<command_id>.redrive`, so a retry replays as well.
        params: dict[str, Any] = {"principal": principal} if principal else {}
        if trusted:
            params["trusted"] = "true"
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        path = f"/worlds/{world_id}/dead-letters/{command_id}/redrive"
        return RedriveAccepted.model_validate((yield from self.send(_Request("POST", path, params=params, headers=headers))))

    def wait(self, world_id: str, command_id: str, principal: str | None, timeout: float,
             poll_s: float, max_poll_s: float) -> Call[CommandView]:  # fmt: skip
        deadline = time.monotonic() + timeout
        while True:
            record = yield from self.command(world_id, command_id, principal)
            if record.status.terminal:
                return record
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeoutError(record, timeout)
            yield _Pause(min(poll_s, left))
            poll_s = min(max_poll_s, poll_s * 1.5)

    def wait_all(self, world_id: str, command_ids: list[str], principal: str | None, timeout: float,
                 poll_s: float, max_poll_s: float) -> Call[list[CommandOutcome]]:  # fmt: skip
        deadline = time.monotonic() + timeout
        params = {"principal": principal} if principal else {}
        wanted = list(dict.fromkeys(command_ids))
        settled: dict[str, CommandOutcome] = {}
        while True:
            open_ = [command_id for command_id in wanted if command_id not in settled]
            last: dict[str, CommandOutcome] = {}
            for start in range(0, len(open_), OUTCOMES_PAGE):
                body = {"command_ids": open_[start : start + OUTCOMES_PAGE]}
                answer = yield from self.send(_Request("POST", f"/worlds/{world_id}/commands:outcomes", params=params, json=body))
                page = OutcomesPage.model_validate(answer)
                if page.missing:
                    raise CommandNotFoundError(f"world {world_id!r} has no command {', '.join(map(repr, page.missing[:5]))}"
                                               f"{' ...' if len(page.missing) > 5 else ''} of this principal")  # fmt: skip
                for outcome in page.commands:
                    (settled if outcome.status.terminal else last)[outcome.command_id] = outcome
            if len(settled) == len(wanted):
                return [settled[command_id] for command_id in command_ids]
            left = deadline - time.monotonic()
            if left <= 0:
                unsettled = [last[command_id] for command_id in wanted if command_id in last]
                raise WaitTimeoutError(unsettled[0], timeout, unsettled)
            yield _Pause(min(poll_s, left))
            poll_s = min(max_poll_s, poll_s * 1.5)

    def history(self, world_id: str, status: CommandStatus | str | None, principal: str | None
                ) -> Call[list[CommandView]]:  # fmt: skip
        params = {"status": CommandStatus(status).value} if status else {}
        if principal:
            params["principal"] = principal
        rows = yield from self.pages(f"/worlds/{world_id}/commands", "commands", params)
        return [CommandView.model_validate(row) for row in rows]

    def audit(self, world_id: str, filters: Mapping[str, Any]) -> Call[list[AuditEvent]]:
        params = {name: value for name, value in filters.items() if value is not None}
        if "status" in params:
            params["status"] = CommandStatus(params["status"]).value
        rows = yield from self.pages(f"/worlds/{world_id}/audit", "events", params)
        return [AuditEvent.model_validate(row) for row in rows]

    def state_page(self, world_id: str, query: Mapping[str, Any], after: int, limit: int) -> Call[StatePage]:
        params = {**query, "after": after, "limit": limit, "layout": "sections"}
        return StatePage.of((yield from self.send(_Request("GET", f"/worlds/{world_id}/state", params=params))))

    def state(self, world_id: str, query: StateQuery, limit: int) -> Call[WorldState]:
        tick_head: int | None = None
        entities: list[EntityState] = []
        for params in query.queries():
            after = 0
            while True:
                page = yield from self.state_page(world_id, params, after, limit)
                tick_head = page.tick_head if tick_head is None else tick_head
                entities += page.entities
                if page.next_after is None:
                    break
                after = page.next_after
        assert tick_head is not None, "a state read makes at least one request"
        return WorldState(tick_head=tick_head, entities=entities)

    def components(self, world_id: str) -> Call[list[dict[str, Any]]]:
        return (yield from self.send(_Request("GET", f"/worlds/{world_id}/components")))["components"]

    def worlds(self) -> Call[list[WorldView]]:
        return [WorldView.model_validate(world) for world in (yield from self.send(_Request("GET", "/worlds")))["worlds"]]

    def world(self, world_id: str) -> Call[WorldView]:
        return WorldView.model_validate((yield from self.send(_Request("GET", f"/worlds/{world_id}"))))

    def create_world(self, name: str, world_id: str | None, tick_mode: TickMode | None,
                     tick_interval_ms: int | None) -> Call[WorldView]:  # fmt: skip
        # an identical retry answers the same world, so a retried create is safe
        body: dict[str, Any] = {"name": name, "world_id": world_id}
        body |= {key: value for key, value in (("tick_mode", tick_mode), ("tick_interval_ms", tick_interval_ms))
                 if value is not None}  # unsaid: the server's defaults (docs/ledger.md, "Tick modes")  # fmt: skip
        return WorldView.model_validate((yield from self.send(_Request("POST", "/worlds", json=body))))

    def fork_world(self, world_id: str, at_tick: int, name: str, fork_world_id: str | None,
                   with_open_commands: bool) -> Call[WorldView]:  # fmt: skip
        # the fork's id is made here, once, so that a retried fork answers the same world
        body = {"at_tick": at_tick, "name": name, "world_id": fork_world_id or uuid.uuid4().hex,
                "with_open_commands": with_open_commands}  # fmt: skip
        return WorldView.model_validate((yield from self.send(_Request("POST", f"/worlds/{world_id}:fork", json=body))))

    def destroy_world(self, world_id: str) -> Call[DestroyedWorld]:
        # re-running destroy finishes it; a retry after a lost answer reports nothing left to cancel
        return DestroyedWorld.model_validate((yield from self.send(_Request("DELETE", f"/worlds/{world_id}"))))

    def retry_world(self, world_id: str) -> Call[WorldView]:
        # asking twice is asking once, so a retried request is safe
        return WorldView.model_validate((yield from self.send(_Request("POST", f"/worlds/{world_id}/retry"))))


def _limit(page_size: int) -> int:
    if not 1 <= page_size <= STATE_READ_LIMIT:
        raise ValueError(f"page_size is 1..{STATE_READ_LIMIT}, not {page_size}")
    return page_size


def _headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class Client:
    """The HTTP API of `archetype serve` or the Worker, blocking.

    >>> with Client("http://127.0.0.1:8787", token="s3cret") as client:  # doctest: +SKIP
    ...     accepted = client.submit("arena", {"type": "despawn", "tick": 0, "entity_id": 1})
    ...     client.wait("arena", accepted.command_id).status
    """

    def __init__(self, url: str, *, token: str, timeout: float = DEFAULT_TIMEOUT_S, retry: RetryPolicy | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:  # fmt: skip
        self.url = url.rstrip("/")
        self._calls = _Calls(retry or RetryPolicy())
        self._http = httpx.Client(base_url=self.url, headers=_headers(token), timeout=timeout, limits=LIMITS,
                                  transport=transport)

    def _run(self, call: Call[T]) -> T:
        step = next(call)
        while True:
            try:
                if isinstance(step, _Pause):
                    time.sleep(step.seconds)
                    step = call.send(None)
                    continue
                try:
                    response = self._http.request(step.method, step.path, params=step.params, json=step.json,
                                                  headers=step.headers)  # fmt: skip
                except httpx.TransportError as exc:
                    step = call.throw(exc)
                    continue
                step = call.send(response)
            except StopIteration as done:
                return done.value

    def submit(self, world_id: str, command: Command, *, idempotency_key: str | None = None) -> CommandAccepted:
        """Admit one command (a `SubmitCommandRequest` or its JSON). Without a key or a `command_id`
        one is made; every retry sends the same one. A replay answers `replayed=True`."""
        return self._run(self._calls.submit(world_id, command, idempotency_key))

    def submit_batch(self, world_id: str, commands: Iterable[Command], *,
                     idempotency_key: str | None = None) -> list[CommandAccepted]:  # fmt: skip
        """Admit 1..1000 commands, all or nothing; an item without `command_id` is `<key>.<index>`."""
        return self._run(self._calls.submit_batch(world_id, commands, idempotency_key))

    # -- typed commands: component instances and classes, family models, DurableOptions --
    def defer(self, op: Mutation, options: DurableOptions | None = None, *, command_id: str | None = None) -> CommandAccepted:
        """Admit one family model (`Spawn`, `Update`, `AddComponents`, `RemoveComponents`,
        `Despawn`) into its world with `options` (default: tick 0, the first tick the world runs);
        `command_id` is its idempotency key (one is made without it). A spawn's answer has its
        reserved `entity_id`."""
        return self._run(self._calls.submit(op.world_id, request_of(op, options or ASAP, command_id=command_id), None))

    def defer_batch(self, commands: Iterable[Deferred], *, options: DurableOptions | None = None,
                    idempotency_key: str | None = None) -> list[CommandAccepted]:  # fmt: skip
        """Admit 1..1000 family models of one world, all or nothing: each with `options` (default
        tick 0), or a `DeferredItem` with its own options and command id. An item without its own id
        is `<key>.<index>`, so a retried batch replays item by item; a spawn's id is assigned when
        it is applied."""
        world_id, requests = _batch(commands, options)
        return self._run(self._calls.submit_batch(world_id, requests, idempotency_key))

    def spawn(self, world_id: str, components: Iterable[Component], *, options: DurableOptions | None = None,
              command_id: str | None = None) -> CommandAccepted:  # fmt: skip
        """Spawn an entity of these components; the answer has its reserved `entity_id`."""
        return self.defer(Spawn(world_id=world_id, components=tuple(components)), options, command_id=command_id)

    def update(self, world_id: str, entity_id: int, components: Iterable[Component], *,
               options: DurableOptions | None = None, command_id: str | None = None) -> CommandAccepted:  # fmt: skip
        """Replace these components of an entity (each by its class)."""
        op = Update(world_id=world_id, entity_id=entity_id, components=tuple(components))
        return self.defer(op, options, command_id=command_id)

    def add_components(self, world_id: str, entity_id: int, components: Iterable[Component], *,
                       options: DurableOptions | None = None, command_id: str | None = None) -> CommandAccepted:  # fmt: skip
        op = AddComponents(world_id=world_id, entity_id=entity_id, components=tuple(components))
        return self.defer(op, options, command_id=command_id)

    def remove_components(self, world_id: str, entity_id: int, component_types: Iterable[type[Component]], *,
                          options: DurableOptions | None = None, command_id: str | None = None) -> CommandAccepted:  # fmt: skip
        """Remove the components of these classes from an entity."""
        op = RemoveComponents(world_id=world_id, entity_id=entity_id, component_types=tuple(component_types))
        return self.defer(op, options, command_id=command_id)

    def despawn(self, world_id: str, entity_id: int, *, options: DurableOptions | None = None,
                command_id: str | None = None) -> CommandAccepted:  # fmt: skip
        return self.defer(Despawn(world_id=world_id, entity_id=entity_id), options, command_id=command_id)

    def command(self, world_id: str, command_id: str, *, principal: str | None = None) -> CommandView:
        return self._run(self._calls.command(world_id, command_id, principal))

    def wait(self, world_id: str, command: CommandRef, *, principal: str | None = None, timeout: float = 30.0,
             poll_s: float = 0.05, max_poll_s: float = 1.0) -> CommandView:  # fmt: skip
        """The command (its id, or the answer that admitted it) once it settled (APPLIED,
        REJECTED, DEAD_LETTER or CANCELLED), polled with a growing pause; `WaitTimeoutError` after
        `timeout` seconds."""
        command_id = _command_id(world_id, command)
        return self._run(self._calls.wait(world_id, command_id, principal, timeout, poll_s, max_poll_s))

    def wait_all(self, world_id: str, commands: Iterable[CommandRef], *, principal: str | None = None,
                 timeout: float = 30.0, poll_s: float = 0.05, max_poll_s: float = 1.0) -> list[CommandOutcome]:  # fmt: skip
        """Every command (ids, or the answers that admitted them) once settled, in the order given,
        polled with a growing pause, one request per 1,000 still unsettled each time;
        `WaitTimeoutError` after `timeout` seconds (`commands`: the unsettled ones),
        `CommandNotFoundError` for an id that names none of the caller's commands."""
        command_ids = [_command_id(world_id, command) for command in commands]
        return self._run(self._calls.wait_all(world_id, command_ids, principal, timeout, poll_s, max_poll_s))

    def history(self, world_id: str, *, status: CommandStatus | str | None = None,
                principal: str | None = None) -> list[CommandView]:  # fmt: skip
        """The commands you may read in admission order (yours; an analyst's, operator's or admin's: everyone's)."""
        return self._run(self._calls.history(world_id, status, principal))

    def dead_letters(self, world_id: str) -> list[CommandView]:
        return self.history(world_id, status=CommandStatus.DEAD_LETTER)

    def redrive(self, world_id: str, command_id: str, *, principal: str | None = None, trusted: bool = False,
                idempotency_key: str | None = None) -> RedriveAccepted:  # fmt: skip
        """Redrive a dead letter (operator): a new command linked to it, with a fresh attempt budget."""
        return self._run(self._calls.redrive(world_id, command_id, principal, trusted, idempotency_key))

    def audit(self, world_id: str, *, command_id: str | None = None, principal: str | None = None,
              status: CommandStatus | str | None = None, tick_from: int | None = None,
              tick_to: int | None = None) -> list[AuditEvent]:  # fmt: skip
        """The audit projection's events (they may lag the ledger); `AuditUnavailableError` on the Worker."""
        filters = dict(command_id=command_id, principal=principal, status=status, tick_from=tick_from, tick_to=tick_to)
        return self._run(self._calls.audit(world_id, filters))

    def state(self, world_id: str, *, components: Iterable[ComponentFilter] | None = None,
              entity_ids: Iterable[int] | None = None, page_size: int = STATE_PAGE, tick: int | None = None) -> WorldState:  # fmt: skip
        """The world's published entities in id order, read page by page: with `components`, those
        that have a component of every one of these types (classes, `<name>:<fingerprint>`, or a
        name), with only those components; with `entity_ids`, those entities; with `tick`, as the
        world published them at that tick (a tick of its retention window, else
        `TickNotRetainedError`), every page at that tick."""
        return self._run(self._calls.state(world_id, StateQuery.of(components, entity_ids, tick), _limit(page_size)))

    def iter_state(self, world_id: str, *, components: Iterable[ComponentFilter] | None = None,
                   entity_ids: Iterable[int] | None = None, page_size: int = STATE_PAGE,
                   tick: int | None = None) -> Iterator[EntityState]:  # fmt: skip
        """`state`'s entities one at a time, a page of `page_size` in memory at once: for a world
        too large to hold whole. Each page is read when the one before is used up."""
        for query in StateQuery.of(components, entity_ids, tick).queries():
            after: int | None = 0
            while after is not None:
                page = self._run(self._calls.state_page(world_id, query, after, _limit(page_size)))
                yield from page.entities
                after = page.next_after

    def components(self, world_id: str) -> list[dict[str, Any]]:
        """The component types the world records (name, fingerprint, JSON Schema)."""
        return self._run(self._calls.components(world_id))

    def worlds(self) -> list[WorldView]:
        return self._run(self._calls.worlds())

    def world(self, world_id: str) -> WorldView:
        return self._run(self._calls.world(world_id))

    def create_world(self, name: str, *, world_id: str | None = None, tick_mode: TickMode | None = None,
                     tick_interval_ms: int | None = None) -> WorldView:  # fmt: skip
        """A new world: lockstep ticks of 100 ms unless `tick_mode` / `tick_interval_ms` say otherwise."""
        return self._run(self._calls.create_world(name, world_id, tick_mode, tick_interval_ms))

    def fork_world(self, world_id: str, at_tick: int, name: str, *, fork_world_id: str | None = None,
                   with_open_commands: bool = False) -> WorldView:  # fmt: skip
        """A new world made of `world_id` as it was at `at_tick` (admin; docs/ledger.md, "Forks"):
        `with_open_commands` also copies the commands it had scheduled after that tick."""
        return self._run(self._calls.fork_world(world_id, at_tick, name, fork_world_id, with_open_commands))

    def destroy_world(self, world_id: str) -> DestroyedWorld:
        return self._run(self._calls.destroy_world(world_id))

    def retry_world(self, world_id: str) -> WorldView:
        """Retry a STALLED world now, its cause fixed (operator): the runner ends its backoff within
        a second. A world that is not stalled is left as it is. Answers the world."""
        return self._run(self._calls.retry_world(world_id))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient:
    """`Client`'s calls for asyncio code: the same methods, awaited."""

    def __init__(self, url: str, *, token: str, timeout: float = DEFAULT_TIMEOUT_S, retry: RetryPolicy | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:  # fmt: skip
        self.url = url.rstrip("/")
        self._calls = _Calls(retry or RetryPolicy())
        self._http = httpx.AsyncClient(base_url=self.url, headers=_headers(token), timeout=timeout, limits=LIMITS,
                                       transport=transport)

    async def _run(self, call: Call[T]) -> T:
        step = next(call)
        while True:
            try:
                if isinstance(step, _Pause):
                    await asyncio.sleep(step.seconds)
                    step = call.send(None)
                    continue
                try:
                    response = await self._http.request(step.method, step.path, params=step.params, json=step.json,
                                                        headers=step.headers)  # fmt: skip
                except httpx.TransportError as exc:
                    step = call.throw(exc)
                    continue
                step = call.send(response)
            except StopIteration as done:
                return done.value

    async def submit(self, world_id: str, command: Command, *, idempotency_key: str | None = None) -> CommandAccepted:
        return await self._run(self._calls.submit(world_id, command, idempotency_key))

    async def submit_batch(self, world_id: str, commands: Iterable[Command], *,
                           idempotency_key: str | None = None) -> list[CommandAccepted]:  # fmt: skip
        return await self._run(self._calls.submit_batch(world_id, commands, idempotency_key))

    async def defer(self, op: Mutation, options: DurableOptions | None = None, *,
                    command_id: str | None = None) -> CommandAccepted:  # fmt: skip
        return await self._run(self._calls.submit(op.world_id, request_of(op, options or ASAP, command_id=command_id), None))

    async def defer_batch(self, commands: Iterable[Deferred], *, options: DurableOptions | None = None,
                          idempotency_key: str | None = None) -> list[CommandAccepted]:  # fmt: skip
        world_id, requests = _batch(commands, options)
        return await self._run(self._calls.submit_batch(world_id, requests, idempotency_key))

    async def spawn(self, world_id: str, components: Iterable[Component], *, options: DurableOptions | None = None,
                    command_id: str | None = None) -> CommandAccepted:  # fmt: skip
        return await self.defer(Spawn(world_id=world_id, components=tuple(components)), options, command_id=command_id)

    async def update(self, world_id: str, entity_id: int, components: Iterable[Component], *,
                     options: DurableOptions | None = None, command_id: str | None = None) -> CommandAccepted:  # fmt: skip
        op = Update(world_id=world_id, entity_id=entity_id, components=tuple(components))
        return await self.defer(op, options, command_id=command_id)

    async def add_components(self, world_id: str, entity_id: int, components: Iterable[Component], *,
                             options: DurableOptions | None = None, command_id: str | None = None) -> CommandAccepted:  # fmt: skip
        op = AddComponents(world_id=world_id, entity_id=entity_id, components=tuple(components))
        return await self.defer(op, options, command_id=command_id)

    async def remove_components(self, world_id: str, entity_id: int, component_types: Iterable[type[Component]], *,
                                options: DurableOptions | None = None, command_id: str | None = None) -> CommandAccepted:  # fmt: skip
        op = RemoveComponents(world_id=world_id, entity_id=entity_id, component_types=tuple(component_types))
        return await self.defer(op, options, command_id=command_id)

    async def despawn(self, world_id: str, entity_id: int, *, options: DurableOptions | None = None,
                      command_id: str | None = None) -> CommandAccepted:  # fmt: skip
        return await self.defer(Despawn(world_id=world_id, entity_id=entity_id), options, command_id=command_id)

    async def command(self, world_id: str, command_id: str, *, principal: str | None = None) -> CommandView:
        return await self._run(self._calls.command(world_id, command_id, principal))

    async def wait(self, world_id: str, command: CommandRef, *, principal: str | None = None, timeout: float = 30.0,
                   poll_s: float = 0.05, max_poll_s: float = 1.0) -> CommandView:  # fmt: skip
        command_id = _command_id(world_id, command)
        return await self._run(self._calls.wait(world_id, command_id, principal, timeout, poll_s, max_poll_s))

    async def wait_all(self, world_id: str, commands: Iterable[CommandRef], *, principal: str | None = None,
                       timeout: float = 30.0, poll_s: float = 0.05, max_poll_s: float = 1.0) -> list[CommandOutcome]:  # fmt: skip
        command_ids = [_command_id(world_id, command) for command in commands]
        return await self._run(self._calls.wait_all(world_id, command_ids, principal, timeout, poll_s, max_poll_s))

    async def history(self, world_id: str, *, status: CommandStatus | str | None = None,
                      principal: str | None = None) -> list[CommandView]:  # fmt: skip
        return await self._run(self._calls.history(world_id, status, principal))

    async def dead_letters(self, world_id: str) -> list[CommandView]:
        return await self.history(world_id, status=CommandStatus.DEAD_LETTER)

    async def redrive(self, world_id: str, command_id: str, *, principal: str | None = None, trusted: bool = False,
                      idempotency_key: str | None = None) -> RedriveAccepted:  # fmt: skip
        return await self._run(self._calls.redrive(world_id, command_id, principal, trusted, idempotency_key))

    async def audit(self, world_id: str, *, command_id: str | None = None, principal: str | None = None,
                    status: CommandStatus | str | None = None, tick_from: int | None = None,
                    tick_to: int | None = None) -> list[AuditEvent]:  # fmt: skip
        filters = dict(command_id=command_id, principal=principal, status=status, tick_from=tick_from, tick_to=tick_to)
        return await self._run(self._calls.audit(world_id, filters))

    async def state(self, world_id: str, *, components: Iterable[ComponentFilter] | None = None,
                    entity_ids: Iterable[int] | None = None, page_size: int = STATE_PAGE,
                    tick: int | None = None) -> WorldState:  # fmt: skip
        return await self._run(self._calls.state(world_id, StateQuery.of(components, entity_ids, tick), _limit(page_size)))

    async def iter_state(self, world_id: str, *, components: Iterable[ComponentFilter] | None = None,
                         entity_ids: Iterable[int] | None = None, page_size: int = STATE_PAGE,
                         tick: int | None = None) -> AsyncIterator[EntityState]:  # fmt: skip
        for query in StateQuery.of(components, entity_ids, tick).queries():
            after: int | None = 0
            while after is not None:
                page = await self._run(self._calls.state_page(world_id, query, after, _limit(page_size)))
                for entity in page.entities:
                    yield entity
                after = page.next_after

    async def components(self, world_id: str) -> list[dict[str, Any]]:
        return await self._run(self._calls.components(world_id))

    async def worlds(self) -> list[WorldView]:
        return await self._run(self._calls.worlds())

    async def world(self, world_id: str) -> WorldView:
        return await self._run(self._calls.world(world_id))

    async def create_world(self, name: str, *, world_id: str | None = None, tick_mode: TickMode | None = None,
                           tick_interval_ms: int | None = None) -> WorldView:  # fmt: skip
        return await self._run(self._calls.create_world(name, world_id, tick_mode, tick_interval_ms))

    async def fork_world(self, world_id: str, at_tick: int, name: str, *, fork_world_id: str | None = None,
                         with_open_commands: bool = False) -> WorldView:  # fmt: skip
        return await self._run(self._calls.fork_world(world_id, at_tick, name, fork_world_id, with_open_commands))

    async def destroy_world(self, world_id: str) -> DestroyedWorld:
        return await self._run(self._calls.destroy_world(world_id))

    async def retry_world(self, world_id: str) -> WorldView:
        return await self._run(self._calls.retry_world(world_id))

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
