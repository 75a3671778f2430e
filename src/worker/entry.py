"""The Worker's main module (wrangler.toml `main`): HTTP at the edge -> the shared HTTP app ->
the Durable Object of each world.

Env bindings (wrangler.toml): WORLDS, the Durable Object namespace of `WorldObject`; AUDIT_QUEUE,
the Queue the objects' alarms send audit events to; ARCHETYPE_TOKENS, a secret holding the bearer
token table (`{"<token>": {"principal": ..., "roles": [...]}}`).

`WorldObject` is defined here because the runtime looks a Durable Object class up by name among
the main module's exports; this one carries the user's modules the bundle was staged with
(worker.modules), so edge-hosted worlds step with their processors.
"""

from __future__ import annotations

import sys
from typing import Any

from archetype.api import TokenTable, create_app
from archetype.api.auth import TOKENS_ENV
from durable_world import DurableObjectAuthority, logs
from durable_world import WorldObject as _WorldObject
from worker.modules import MODULES

try:
    from workers import WorkerEntrypoint
except ImportError:  # CPython: the same constructor shape, for tests

    class WorkerEntrypoint:  # type: ignore[no-redef]
        def __init__(self, ctx: Any, env: Any) -> None:
            self.ctx = ctx
            self.env = env


__all__ = ["Default", "WorldObject", "build_app"]

if sys.platform == "emscripten":  # on the runtime; CPython importers (tests, tools) keep their own logging
    logs.configure()  # the Worker's and the objects' logs as one JSON line each (durable_world.logs)

NAMESPACE_BINDING = "WORLDS"

_app: Any = None


class WorldObject(_WorldObject):
    MODULES = MODULES


def build_app(env: Any) -> Any:
    """The HTTP app over the Durable Object authority that `env`'s bindings reach."""
    tokens = TokenTable.from_json(getattr(env, TOKENS_ENV, None) or "{}")
    return create_app(DurableObjectAuthority(getattr(env, NAMESPACE_BINDING)), tokens=tokens)


class Default(WorkerEntrypoint):  # type: ignore[misc]  # `workers` exists only on workerd: Any here
    async def fetch(self, request: Any) -> Any:
        import asgi  # the ASGI bridge workerd provides to Python Workers

        # One app per isolate: bindings and secrets are fixed for an isolate's life (changing a
        # secret deploys a new version), and building the app parses the token table.
        global _app
        if _app is None:
            _app = build_app(self.env)
        return await asgi.fetch(_app, request, self.env)
