"""Prometheus metrics and structured request logs of `archetype serve` (CPython only:
prometheus-client). docs/metrics.md lists every series.

Each number has one source, so nothing is counted twice:
- command transitions (applied, rejected, retried, dead-lettered, cancelled, admitted) are the
  outbox events the audit projector acknowledges, counted once each at acknowledgement;
- admission outcomes (admitted, replayed, conflict, quota, closing) are the ledger's answers to
  `admit` / `reserve_spawn`; lease takeovers are the leased rows the ledger marks `suspect`;
  all three are read off `ObservedAuthority`, the one authority the server's runtime, HTTP app
  and projector share;
- ticks are timed around each world's `Step` in the runner loop; HTTP latency by a middleware.

Cardinality is bounded: `route` is the route's template (never the raw path), and only the first
`world_limit` worlds seen active get a `world` label of their own; the others are summed under
`world="_other"`. A destroyed world's series are removed and its slot freed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fastapi import Depends, Response
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from archetype.api.app import HttpApp
from archetype.api.auth import require
from archetype.commands.authority import Authority
from archetype.commands.errors import CommandConflictError, CommandError, QuotaExceededError, WorldClosingError
from archetype.commands.ledger_rows import AdmissionRow, Admitted, Quota
from archetype.commands.options import Role

OTHER_WORLDS = "_other"
UNMATCHED_ROUTE = "unmatched"
ADMISSION_REFUSALS = {CommandConflictError: "conflict", QuotaExceededError: "quota_exceeded", WorldClosingError: "world_closing"}
TICK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
access_log = logging.getLogger("archetype.http")


class WorldLabels:
    """The `world` label of a world id: its own for the first `limit` worlds, else `_other`."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._own: set[str] = set()

    def __call__(self, world_id: str) -> str:
        if world_id in self._own:
            return world_id
        if len(self._own) < self.limit:
            self._own.add(world_id)
            return world_id
        return OTHER_WORLDS

    def forget(self, world_id: str) -> bool:
        """Free a destroyed world's slot; True when it had one."""
        if world_id in self._own:
            self._own.remove(world_id)
            return True
        return False


class Metrics:
    # The series `serve`'s stepping process keeps (archetype.stepper): the ticks, the command
    # transitions and audit lag its projector sees, the takeovers its leases find. Its HTTP
    # process keeps the rest and relays these.
    STEPPER_SERIES = ("events", "takeovers", "ticks", "tick_seconds", "tick_lag", "audit_lag", "stalled", "stalls")

    def __init__(self, world_limit: int = 50) -> None:
        self.registry = CollectorRegistry()
        self.world = WorldLabels(world_limit)
        r = self.registry
        self.admissions = Counter("archetype_admissions", "Admission answers of the ledger, by outcome.", ["outcome"], registry=r)
        self._admission_outcomes: dict[str, Callable[[], None]] = {}  # each outcome's inc, looked up once (as HttpMetrics')
        self.events = Counter("archetype_command_events", "Command transitions: outbox events acknowledged by the audit projector.",
                              ["event"], registry=r)  # fmt: skip
        self.takeovers = Counter("archetype_lease_takeovers", "Leased commands taken over from a runner session that stopped.",
                                 registry=r)  # fmt: skip
        self.ticks = Counter("archetype_ticks", "Ticks stepped (rate() of it is the tick rate).", ["world", "outcome"], registry=r)
        self.tick_seconds = Histogram("archetype_tick_duration_seconds", "Time to step one tick of one world.", ["world"],
                                      buckets=TICK_BUCKETS, registry=r)  # fmt: skip
        self.tick_lag = Gauge("archetype_tick_lag_seconds", "A lockstep world: how late its last tick published after it was due.",
                              ["world"], registry=r)  # fmt: skip
        self.audit_lag = Gauge("archetype_audit_lag_events", "Outbox events not yet projected into the audit table.",
                               ["world"], registry=r)  # fmt: skip
        self.stalled = Gauge("archetype_worlds_stalled", "Worlds whose ticks fail before they are prepared (health STALLED).",
                             registry=r)  # fmt: skip
        self.stalls = Counter("archetype_world_stalls", "Stalls begun: a world's first failed tick or load since it last "
                              "published, counted by the runner (also when its storage could not record it).", registry=r)  # fmt: skip
        self._lagging: set[str] = set()  # world labels whose audit lag was last set above 0
        self._stalled: set[str] = set()
        self.http_seconds = Histogram("archetype_http_request_duration_seconds", "HTTP request latency.",
                                      ["method", "route", "status"], registry=r)  # fmt: skip
        self._relayed: Callable[[], bytes] = bytes

    def count_admission(self, outcome: str) -> None:
        inc = self._admission_outcomes.get(outcome)
        if inc is None:
            inc = self._admission_outcomes[outcome] = self.admissions.labels(outcome).inc
        inc()

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry) + self._relayed(), CONTENT_TYPE_LATEST

    def stepper_exposition(self) -> bytes:
        """The stepping process's series alone, in the text format, for the HTTP process to relay."""
        only = CollectorRegistry()
        for name in self.STEPPER_SERIES:
            only.register(getattr(self, name))
        return generate_latest(only)

    def relay(self, latest: Callable[[], bytes]) -> None:
        """Expose `latest()`, the stepping process's last exposition, in place of this process's
        own (never updated) copies of its series: the text format allows families in any order,
        and the two sets share no name."""
        for name in self.STEPPER_SERIES:
            self.registry.unregister(getattr(self, name))
        self._relayed = latest

    # -- the runner loop --
    def observe_worlds(self, worlds: Sequence[Mapping[str, Any]]) -> None:
        """Every world's row: audit lag per world (summed for `_other`), the stalled ones; a
        destroyed world's series go."""
        for world in worlds:
            if world["status"] == "DESTROYED" and self.world.forget(world["world_id"]):
                self._lagging.discard(world["world_id"])
                for metric, labels in ((self.tick_seconds, ()), (self.tick_lag, ()), (self.audit_lag, ()), (self.ticks, ("ok",)),
                                       (self.ticks, ("failed",))):  # fmt: skip
                    with contextlib.suppress(KeyError):  # a series it never had
                        metric.remove(world["world_id"], *labels)
        self._stalled.clear()
        self._observe([{**w, "pending": w["next_event_seq"] - 1 - w["projected_seq"]} for w in worlds], every_label=True)

    def observe_backlog(self, worlds: Sequence[Mapping[str, Any]]) -> None:
        """The worlds with audit events pending (each with `pending`, `status` and `health`):
        every other world's lag is 0, and its health is as last seen (a health change appends an
        event, so a world whose health changed is among these)."""
        self._observe(worlds, every_label=False)

    def _observe(self, worlds: Sequence[Mapping[str, Any]], *, every_label: bool) -> None:
        lag: dict[str, int] = dict.fromkeys(self._lagging, 0)
        for world in worlds:
            if world["status"] == "DESTROYED":
                self._stalled.discard(world["world_id"])
                continue
            label = self.world(world["world_id"])
            lag[label] = lag.get(label, 0) + world["pending"]
            if world["health"] == "STALLED":
                self._stalled.add(world["world_id"])
            else:
                self._stalled.discard(world["world_id"])
        for label, pending in lag.items():
            if pending or every_label or label in self._lagging:
                self.audit_lag.labels(label).set(pending)
        self._lagging = {label for label, pending in lag.items() if pending}
        self.stalled.set(len(self._stalled))

    def observe_tick(self, world_id: str, seconds: float, ok: bool) -> None:
        label = self.world(world_id)
        self.ticks.labels(label, "ok" if ok else "failed").inc()
        self.tick_seconds.labels(label).observe(seconds)

    def observe_lag(self, world_id: str, seconds: float) -> None:
        """A lockstep world's lag after its tick (`_other`: the last such world's to tick)."""
        self.tick_lag.labels(self.world(world_id)).set(seconds)


class ObservedAuthority(Authority):
    """`inner`, with the ledger's answers counted into `metrics` on the way back."""

    def __init__(self, inner: Authority, metrics: Metrics) -> None:
        self.inner = inner
        self.metrics = metrics
        self._unacknowledged: dict[str, dict[int, str]] = {}  # world -> event_seq -> event_type, read not yet acked

    async def rpc(self, method: str, arguments: dict[str, Any]) -> Any:
        try:
            result = await self.inner.rpc(method, arguments)
        except tuple(ADMISSION_REFUSALS) as exc:
            if method in ("admit", "reserve_spawn"):
                self._count_admission(exc)
            raise
        if method == "admit":
            for admitted in result:
                self._count_admission(admitted)
        elif method == "list_worlds":  # the runner lists them every sweep (the projector reads its backlog): lag rides along
            self.metrics.observe_worlds(result)
        elif method == "lease":
            self.metrics.takeovers.inc(sum(1 for row in result if row["suspect"]))
        elif method == "read_outbox_columns":
            pending = self._unacknowledged.setdefault(arguments["world_id"], {})
            pending.update(zip(result["event_seq"], result["event_type"], strict=True))
        elif method == "acknowledge_outbox":
            pending = self._unacknowledged.get(arguments["world_id"], {})
            for seq in [seq for seq in pending if seq <= arguments["up_to_seq"]]:
                self.metrics.events.labels(pending.pop(seq)).inc()
        return result

    async def admit_each(self, world_id: str, commands: list[AdmissionRow], quota: Quota | None = None) -> list[Admitted | Exception]:
        answers = await self.inner.admit_each(world_id, commands, quota)
        for answer in answers:  # counted as `rpc` counts each command's admission alone
            self._count_admission(answer)
        return answers

    def _count_admission(self, answer: Admitted | Exception) -> None:
        if not isinstance(answer, Exception):
            self.metrics.count_admission("replayed" if answer["replayed"] else "admitted")
        elif isinstance(answer, CommandError) and type(answer) in ADMISSION_REFUSALS:
            self.metrics.count_admission(ADMISSION_REFUSALS[type(answer)])

    async def close(self) -> None:
        await self.inner.close()


class HttpMetrics:
    """ASGI middleware: latency by method, route template and status; with `log_requests`, one
    JSON log line per request."""

    def __init__(self, app: Any, metrics: Metrics, log_requests: bool = False) -> None:
        self.app = app
        self.metrics = metrics
        self.log_requests = log_requests
        # each label set's observe, looked up once: `labels()` validates and locks on every call
        self._observe: dict[tuple[str, str, int], Callable[[float], None]] = {}

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the client gets if the app raises before answering

        async def sending(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self.observe(scope["method"], scope["path"], getattr(scope.get("route"), "path", UNMATCHED_ROUTE), status,
                         time.perf_counter() - started)  # fmt: skip

    def observe(self, method: str, path: str, route: str, status: int, seconds: float) -> None:
        """A request answered: here, or on serve's hot path (archetype.api.hot.HotPath)."""
        key = (method, route, status)
        observe = self._observe.get(key)
        if observe is None:
            observe = self._observe[key] = self.metrics.http_seconds.labels(method, route, str(status)).observe
        observe(seconds)
        if self.log_requests:
            access_log.info("request", extra={"fields": {"method": method, "path": path, "route": route, "status": status,
                                                         "duration_ms": round(seconds * 1000, 3)}})  # fmt: skip

    def on_hot_path(self, path: Any) -> None:  # archetype.api.hot.HotPath: its requests are timed here too
        path.observers.append(self.observe)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and a record's `fields`."""

    def format(self, record: logging.LogRecord) -> str:
        line = {"ts": round(record.created, 3), "level": record.levelname.lower(), "logger": record.name,
                "message": record.getMessage(), **getattr(record, "fields", {})}  # fmt: skip
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line)


def configure_logging(level: str, log_format: str) -> None:
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    if log_format == "json":
        access_log.setLevel(logging.INFO)  # requested: one line per request, whatever the level


def mount_metrics(app: HttpApp, metrics: Metrics, *, log_requests: bool) -> None:
    """`GET /metrics` (the Prometheus text format; a viewer token, like every read) and the HTTP middleware."""

    @app.get("/metrics", include_in_schema=False, dependencies=[Depends(require(Role.viewer))])
    async def exposition() -> Response:
        body, content_type = metrics.exposition()
        return Response(body, media_type=content_type)

    app.front(HttpMetrics, metrics=metrics, log_requests=log_requests)  # ahead of every other layer: it times them all
