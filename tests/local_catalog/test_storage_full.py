"""A catalog that cannot grow (SQLite's `max_page_count`: what a full disk is to a database whose
file has a little room left): whatever must grow it is refused with the typed, retryable
StorageUnavailableError, the world that cannot publish is STALLED with that reason in its health
(small writes still fit), and it recovers by itself once the catalog may grow again
(docs/ledger.md, "World health"; docs/errors.md, `storage_unavailable`)."""

from __future__ import annotations

import json

import httpx
import pytest

from archetype.api import create_app
from archetype.commands import DurableOptions
from archetype.commands.errors import StorageUnavailableError
from archetype.commands.port import SystemClock
from archetype.runtime import Runtime
from archetype.world import CreateWorld, Spawn, Step, TickOutcomeUnknownError, Update
from local_catalog import open_local_authority
from tests.component_modules.alpha import Health
from tests.component_modules.bulky import Note

ROOM_PAGES = 4  # what the catalog may still grow by: room for a failure's record, not for a note


async def test_a_catalog_that_cannot_grow_stalls_the_world_with_the_reason_until_it_can(tmp_path, clock):
    authority = open_local_authority(tmp_path, clock=clock)
    async with Runtime(authority, owner="runner-a", lease_ms=1_000) as rt:
        world_id = await rt.dispatcher.apply(CreateWorld(name="full", world_id="full"))
        note = Spawn(world_id=world_id, components=[Note(text="n" * 200_000), Health(hp=1)])
        entities = [(await rt.dispatcher.defer_spawn(note, DurableOptions(tick=0))).entity_id for _ in range(6)]
        await rt.dispatcher.apply(Step(world_id=world_id))  # a snapshot of 1.2 MB
        # a small command whose tick writes one large entity again: a delta of its own rows
        heal = Update(world_id=world_id, entity_id=entities[0], components=[Health(hp=2)])
        await rt.dispatcher.defer(heal, DurableOptions(tick=1), command_id="heal")
        catalog = authority._port._conn  # the writer thread is idle between calls
        catalog.execute("VACUUM")  # no free pages left inside the file: growing is the only room
        pages = catalog.execute("PRAGMA page_count").fetchone()[0]
        catalog.execute(f"PRAGMA max_page_count = {pages + ROOM_PAGES}")

        with pytest.raises(StorageUnavailableError):  # an admission that must grow it: typed, nothing written
            await rt.dispatcher.defer(note, DurableOptions(tick=0), command_id="another")
        for _ in range(2):
            with pytest.raises(TickOutcomeUnknownError, match="StorageUnavailableError"):
                await rt.dispatcher.apply(Step(world_id=world_id))  # the entity's state chunk does not fit
        info = await authority.world_info(world_id)
        assert (info["health"], info["failed_attempts"]) == ("STALLED", 2)
        assert "StorageUnavailableError: the storage cannot write" in info["health_error"]
        assert await authority.command(world_id, "another") is None

        catalog.execute("PRAGMA max_page_count = 1073741823")
        await rt.dispatcher.apply(Step(world_id=world_id))  # the prepared tick, published as it was
        info = await authority.world_info(world_id)
        assert (info["health"], info["tick_head"]) == ("ACTIVE", 1)
        assert (await authority.command(world_id, "heal"))["status"] == "APPLIED"
        events = [e for e in await authority.read_outbox(world_id, limit=100) if e["command_id"] == ""]
        assert [e["event_type"] for e in events] == ["world_stalled", "world_recovered"]
        assert json.loads(events[0]["payload"])["error"] == json.loads(events[1]["payload"])["error"] != ""


async def test_health_says_the_catalog_refuses_writes_until_one_succeeds(tmp_path, clock):
    """A catalog full to its last page (`max_page_count`: a full disk to SQLite): `/health` answers
    `degraded` with the typed reason from the first refused write on, a read leaving it so, until a
    write succeeds again; the process still answers."""
    authority = open_local_authority(tmp_path, clock=clock)
    app = create_app(authority, tokens={"t-admin": {"principal": "root", "roles": ["admin"]}},
                     storage_fault=authority.storage_fault)  # fmt: skip
    admin = {"Authorization": "Bearer t-admin"}
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as http:
            assert (await http.get("/health")).json() == {"status": "ok"}
            catalog = authority._port._conn  # the writer thread is idle between calls
            catalog.execute("VACUUM")
            catalog.execute(f"PRAGMA max_page_count = {catalog.execute('PRAGMA page_count').fetchone()[0]}")
            before = SystemClock().now_ms()  # the port's clock: the ledger's is not its own
            for n in range(1_000):  # worlds until the last page is full
                created = await http.post("/worlds", json={"name": "n" * 200, "world_id": f"w{n}"}, headers=admin)
                if created.status_code != 201:
                    break
            assert (created.status_code, created.json()["code"]) == (503, "storage_unavailable")
            for _ in range(2):  # a read changes nothing
                health = await http.get("/health")
                assert health.status_code == 200
                assert health.json()["status"] == "degraded"
                reason = health.json()["reason"]
                assert reason["code"] == "storage_unavailable" and "the storage cannot write" in reason["message"]
                assert reason["since"] >= before
                assert (await http.get("/worlds/w0", headers=admin)).status_code == 200
            catalog.execute("PRAGMA max_page_count = 1073741823")
            assert (await http.post("/worlds", json={"name": "room", "world_id": "again"}, headers=admin)).status_code == 201
            assert (await http.get("/health")).json() == {"status": "ok"}
    finally:
        await authority.close()
