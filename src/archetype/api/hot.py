"""The hot routes without the framework's per-request machinery: `POST /worlds/{id}/commands`
(single-command admission), `POST /worlds` (world creation) and `GET /health`.

FastAPI's routing and dependency solving cost more CPU per admission than the admission itself
(route matching over every route, a dependency graph solved per request, the body parsed a
second time), and its middleware a tenth of the rest; on `archetype serve`'s one event loop that
CPU is what caps HTTP admission and what `/health` queues behind. This ASGI layer is a front
layer of the app (`HttpApp.front`), behind `BodyLimit` (which has already read the body, checked
its headers and parsed it strictly) and ahead of the whole framework, and answers a request of
these routes itself only when every check the framework would make passes: a known bearer token
with the role, the admission gate open, a world id and Idempotency-Key of the declared patterns,
a JSON content type and a body that validates. Anything else goes to the framework unchanged,
which gives every refusal its usual answer. The work and the answer are the route's own (its
`handler`, the same serialisation as the route's `response_model`, the app's answer to an
unexpected exception), so the bytes are the same either way (tests/api/test_hot_routes.py holds
the two paths to identical answers).

`archetype serve` answers the two POST routes a step earlier still, in its HTTP protocol without
ASGI (`HotPath`, archetype.http_protocol), with these same checks and this same work.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from fastapi.security.utils import get_authorization_scheme_param
from pydantic import BaseModel, ValidationError

from archetype.api.auth import TokenTable
from archetype.api.errors import UnauthenticatedError, error_response, validation_error
from archetype.api.limits import HEADERS, PARSED_BODY, parsed_as_json, strict_json
from archetype.api.models import Health
from archetype.commands.errors import CommandError
from archetype.commands.identity import COMMAND_ID_PATTERN
from archetype.commands.options import ActorCtx, Role
from archetype.world.operations import WORLD_ID_PATTERN

HEALTH_ROUTE = "/health"
_HEALTH_OK = Health(status="ok").model_dump_json(exclude_none=True).encode()
JSON_TYPE = (b"content-type", b"application/json")
# Actors of the bearer tokens seen, by Authorization header value: a lookup otherwise parses the
# header, hashes the token and checks the roles on every request. Bounded (cleared when full), so
# that clients sending ever new tokens cannot grow it; unknown tokens are never kept.
ACTORS_KEPT = 1024
# (world id from the path or None, the body, the actor, the Idempotency-Key or None) -> the answer:
# the route's response model, or its JSON already written
Handler = Callable[[Any, Any, ActorCtx, "str | None"], Awaitable[BaseModel | bytes]]


@dataclass(frozen=True)
class HotRoute:
    """A framework route HotRoutes may answer: its template, what its dependencies demand and its
    success status; `handler` is the route's own work."""

    template: str
    pattern: re.Pattern[str]  # of the decoded path
    url: re.Pattern[bytes]  # of a request's raw target: the same, where a match has no query and no %-escape
    role: Role
    body: type[BaseModel]
    status: int
    handler: Handler
    keyed: bool  # the route takes an Idempotency-Key header (checked against its pattern)


def hot_route(template: str, role: Role, body: type[BaseModel], status: int, handler: Handler, *, keyed: bool) -> HotRoute:
    pattern = re.compile(re.escape(template).replace(re.escape("{world_id}"), "(" + WORLD_ID_PATTERN.strip("^$") + ")"))
    return HotRoute(template, pattern, re.compile(pattern.pattern.encode()), role, body, status, handler, keyed)


class Answer(NamedTuple):
    """An answer as a Starlette Response holds it (a JSONResponse is one too: same attributes)."""

    status_code: int
    raw_headers: list[tuple[bytes, bytes]]
    body: bytes


def json_answer(status: int, content: bytes) -> Answer:
    """What a `response_model` route's Response holds for these bytes (the same headers, in the same
    order), without building a Response object per answer."""
    return Answer(status, [(b"content-length", str(len(content)).encode("latin-1")), JSON_TYPE], content)


async def send_answer(send: Any, answer: Answer) -> None:
    """The two messages a Starlette Response without a background task sends."""
    await send({"type": "http.response.start", "status": answer.status_code, "headers": answer.raw_headers})
    await send({"type": "http.response.body", "body": answer.body})


class Admissible(NamedTuple):
    """A hot route's request that passed every check its framework route makes."""

    actor: ActorCtx
    body: BaseModel
    key: str | None


class HotRoutes:
    def __init__(self, app: Any, *, state: Any, routes: Callable[[], list[Any]], hot: Sequence[HotRoute],
                 on_error: Callable[[str, str, Exception], Any]) -> None:  # fmt: skip
        self.app = app
        self.on_error = on_error  # the app's answer to an exception nothing expected (the framework's error page is behind)
        self.state = state  # the application's state: its token table and admission gate
        self._routes = routes
        self._route: dict[tuple[str, str], Any] = {}
        self.hot = hot
        self._actors: dict[tuple[bytes, Role], ActorCtx] = {}
        self._actors_of: TokenTable | None = None  # the table `_actors` was read from

    def route(self, method: str, path: str) -> Any:
        """The framework's route object (the metrics label requests by its template)."""
        key = (method, path)
        if key not in self._route:
            self._route[key] = next(r for r in self._routes() if getattr(r, "path", None) == path
                                    and method in getattr(r, "methods", ()))  # fmt: skip
        return self._route[key]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            healthy = self.healthy() if scope["method"] == "GET" and scope["path"] == HEALTH_ROUTE else None
            if healthy is not None:
                scope["route"] = self.route("GET", HEALTH_ROUTE)
                await send_answer(send, healthy)
                return
            if scope["method"] == "POST" and PARSED_BODY in scope:  # BodyLimit read the whole body and parsed it
                for hot in self.hot:
                    match = hot.pattern.fullmatch(scope["path"])
                    if match is not None:
                        if await self._answer(hot, scope, receive, send, match.group(1) if match.groups() else None):
                            return
                        break
        await self.app(scope, receive, send)

    async def _answer(self, hot: HotRoute, scope: dict[str, Any], receive: Any, send: Any, world_id: str | None) -> bool:
        """Answer the request when the framework would reach the route; else leave it to the
        framework (the body unread: BodyLimit replays it)."""
        admissible = self.admissible(hot, scope[HEADERS], scope[PARSED_BODY])
        if admissible is None:
            return False
        scope["route"] = self.route("POST", hot.template)
        scope["path_params"] = {} if world_id is None else {"world_id": world_id}
        answer, raised = await self.answer(hot, world_id, admissible, scope["path"])
        await send_answer(send, answer)
        if raised is not None:  # answered as the framework's error page would, then raised on for the server to log
            raise raised
        return True

    def healthy(self) -> Answer | None:
        """`/health`'s answer when all is well (the framework's route says what is not)."""
        if self.state.admission.open and self.state.storage_fault() is None:
            return json_answer(200, _HEALTH_OK)
        return None

    def admissible(self, hot: HotRoute, headers: dict[bytes, bytes], value: Any) -> Admissible | None:
        """The request's actor, body and Idempotency-Key when every check of the framework's route
        passes (`headers` each sent once, `value` the body as the strict parser read it), else None."""
        actor = self._actor(headers.get(b"authorization"), hot.role)
        key = headers.get(b"idempotency-key") if hot.keyed else None
        content_type = headers.get(b"content-type")
        if actor is None or not self.state.admission.open or not content_type or not parsed_as_json(content_type):
            return None
        if key is not None and not COMMAND_ID_PATTERN.fullmatch(key.decode("latin-1")):
            return None
        try:
            body = hot.body.__pydantic_validator__.validate_python(value)  # model_validate without its Python frame
        except Exception:  # whatever refuses it, the framework answers it as it always does
            return None
        return Admissible(actor, body, None if key is None else key.decode("latin-1"))

    async def answer(self, hot: HotRoute, world_id: str | None, admissible: Admissible, path: str) -> tuple[Answer, Exception | None]:
        """The route's answer, and the exception nothing expected (answered with the app's error
        page) for the server to log, if one was raised."""
        try:
            answer = await hot.handler(world_id, admissible.body, admissible.actor, admissible.key)
        except CommandError as exc:
            return error_response(exc), None  # type: ignore[return-value]  # a JSONResponse holds what an Answer does
        except ValidationError as exc:
            return error_response(validation_error(exc.errors())), None  # type: ignore[return-value]
        except Exception as exc:
            return self.on_error("POST", path, exc), exc
        return json_answer(hot.status, answer if isinstance(answer, bytes) else answer.__pydantic_serializer__.to_json(answer)), None

    def _actor(self, authorization: bytes | None, role: Role) -> ActorCtx | None:
        if authorization is None:
            return None
        tokens: TokenTable = self.state.tokens
        if tokens is not self._actors_of:
            self._actors, self._actors_of = {}, tokens
        actor = self._actors.get((authorization, role))
        if actor is not None:
            return actor
        scheme, token = get_authorization_scheme_param(authorization.decode("latin-1"))
        if scheme.lower() != "bearer" or not token:
            return None
        try:
            actor = tokens.authenticate(token)
        except UnauthenticatedError:
            return None
        if not actor.has(role):
            return None
        if len(self._actors) >= ACTORS_KEPT:
            self._actors.clear()
        self._actors[(authorization, role)] = actor
        return actor

    def on_hot_path(self, path: HotPath) -> None:
        path.routes = self


# (method, path, route template, status, seconds): a request answered, for whoever times them
Observer = Callable[[str, str, str, int, float], None]


class HotPath:
    """The hot routes' requests as `archetype serve`'s HTTP protocol answers them itself, without
    ASGI (archetype.http_protocol): what each front layer of the app does to such a request, told
    by the layer as it is added (its `on_hot_path`, called by `HttpApp.front`). A layer without
    one turns the hot path off (`HttpApp.hot_path` None): a request answered here would skip it."""

    def __init__(self) -> None:
        self.routes: HotRoutes | None = None
        self.max_bytes: int | None = None  # BodyLimit's limit (a hot route carries no state)
        self.observers: list[Observer] = []

    @property
    def ready(self) -> bool:
        """HotRoutes behind BodyLimit: the hot routes are answered ahead of the framework."""
        return self.routes is not None and self.max_bytes is not None

    def route(self, url: bytes) -> tuple[HotRoute, str | None] | None:
        """The hot POST route a request target names and its world id; None for any other target
        (a query or a %-escape included: the framework's path then is not the raw target)."""
        assert self.routes is not None
        for hot in self.routes.hot:
            match = hot.url.fullmatch(url)
            if match is not None:
                return hot, match.group(1).decode("ascii") if match.groups() else None
        return None

    def admissible(self, hot: HotRoute, headers: dict[bytes, bytes], body: bytes) -> Admissible | None:
        """BodyLimit's strict parse of the whole body, then HotRoutes' checks: None when either
        would hand the request on (then ASGI serves it, and answers it as ever)."""
        assert self.routes is not None
        value, refusal = strict_json(body)
        if refusal is not None or value is None:
            return None
        return self.routes.admissible(hot, headers, value)

    def observe(self, method: str, path: str, route: str, status: int, seconds: float) -> None:
        for observer in self.observers:
            observer(method, path, route, status, seconds)
