from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from archetype.api import create_app
from archetype.commands.authority import Authority
from archetype.commands.port import ManualClock
from durable_world import DurableObjectAuthority
from local_catalog import CATALOG_FILE, open_local_authority
from tests.support.durable_object_standin import world_namespace
from worker.entry import build_app

TOKENS = {
    "t-admin": {"principal": "root", "roles": ["admin"]},
    "t-operator": {"principal": "runner", "roles": ["operator"]},
    "t-player": {"principal": "pat", "roles": ["player"]},
    "t-player2": {"principal": "quinn", "roles": ["player"]},
    "t-viewer": {"principal": "vic", "roles": ["viewer"]},
    "t-nobody": {"principal": "nobody", "roles": []},
    "t-analyst": {"principal": "ana", "roles": ["analyst"]},
    "t-projector": {"principal": "iceberg", "roles": ["projector"]},
}
QUOTA = 5
MAX_BODY = 64 * 1024


def auth(token: str, **headers: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **headers}


ADMIN, OPERATOR, PLAYER, PLAYER2, VIEWER, NOBODY, ANALYST, PROJECTOR = (auth(t) for t in TOKENS)


@asynccontextmanager
async def edge_app(kind: str, directory: Path, clock: ManualClock, local_app: Callable[[Authority], Any] | None = None,
                   tokens: dict[str, Any] = TOKENS) -> AsyncIterator[tuple[Authority, Any]]:  # fmt: skip
    """(authority, app) of one edge over a fresh store: the Worker's app with `tokens` over Durable
    Objects on the stand-in (`kind` "worker", in `directory/objects`), else `local_app` (default:
    the shared app with `tokens`) over a local catalog in `directory/data`. Closed on exit."""
    if kind == "worker":
        namespace = world_namespace(directory / "objects", clock)
        namespace.env.ARCHETYPE_TOKENS = json.dumps(tokens)
        try:
            yield DurableObjectAuthority(namespace), build_app(namespace.env)
        finally:
            namespace.close()
        return
    authority = open_local_authority(directory / "data", clock=clock)
    try:
        yield authority, (local_app or (lambda local: create_app(local, tokens=tokens)))(authority)
    finally:
        await authority.close()


@pytest.fixture
async def authority(tmp_path, clock):
    authority = open_local_authority(tmp_path / "data", clock=clock)
    yield authority
    await authority.close()


@pytest.fixture
def app(authority):
    return create_app(authority, tokens=TOKENS, quota=QUOTA, max_body_bytes=MAX_BODY)


@pytest.fixture
async def client(app):
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as client:
        yield client


@pytest.fixture
async def world(client) -> str:
    response = await client.post("/worlds", json={"name": "arena", "world_id": "w1"}, headers=ADMIN)
    assert response.status_code == 201, response.text
    return "w1"


def persisted(directory) -> dict[str, object]:
    """Everything a request could have written: row counts and every counter of every world."""
    with sqlite3.connect(directory / CATALOG_FILE) as db:
        counts = {
            table: db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("worlds", "commands", "spawn_reservations", "outbox", "quota_usage", "ticks", "state_snapshots", "state_deltas")
        }
        worlds = db.execute("SELECT * FROM worlds ORDER BY world_id").fetchall()
        usage = db.execute("SELECT * FROM quota_usage ORDER BY 1, 2, 3").fetchall()
    return {"counts": counts, "worlds": worlds, "quota_usage": usage}


@pytest.fixture
def snapshot(tmp_path):
    return lambda: persisted(tmp_path / "data")
