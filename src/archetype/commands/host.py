"""WorldHost: the worlds one runtime is stepping, loaded from and published to its authority.

Loading a world acquires its writer (fencing every earlier writer), reads its published state at
the tick head and wires the world's materializer, publisher and entity-id source to the ledger.
A world whose writer was fenced or whose leases were taken over is dropped, never patched up:
the next use loads it afresh from the authority.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from archetype.commands.authority import Authority
from archetype.commands.errors import LeaseLostError, StaleWriterError, WorldClosingError
from archetype.commands.scheduler import AuthorityIdSource, CommandScheduler, LedgerPublisher
from archetype.world.commit import CommittedTickReceipt
from archetype.world.components import ComponentValue
from archetype.world.world import AsyncWorld

LOST_WRITER = (StaleWriterError, LeaseLostError, WorldClosingError)


class WorldHost:
    def __init__(self, authority: Authority, scheduler: CommandScheduler) -> None:
        self.authority = authority
        self.scheduler = scheduler
        self._worlds: dict[str, AsyncWorld] = {}
        self._loading: dict[str, asyncio.Lock] = {}  # per world: one load at a time, worlds in parallel
        self.on_load: list[Callable[[AsyncWorld], None]] = []

    async def get(self, world_id: str) -> AsyncWorld:
        world = self._worlds.get(world_id)
        if world is not None:
            return world
        async with self._loading.setdefault(world_id, asyncio.Lock()):
            if world_id not in self._worlds:
                self._worlds[world_id] = await self._load(world_id)
            return self._worlds[world_id]

    async def _load(self, world_id: str) -> AsyncWorld:
        info = await self.authority.acquire_writer(world_id)
        entities: dict[int, dict[str, Any]] = {}
        after = 0
        while True:
            page = await self.authority.load_state(world_id, after_entity_id=after)
            for entity in page["entities"]:
                values = [ComponentValue.model_validate(v) for v in json.loads(entity["components"])]
                entities[entity["entity_id"]] = {v.key: v.to_component() for v in values}
                after = entity["entity_id"]
            if not page["entities"]:
                break
        world = AsyncWorld(
            world_id,
            tick=info["tick_head"],
            entities=entities,
            writer_epoch=info["writer_epoch"],
            publisher=LedgerPublisher(self.authority, self.scheduler),
            id_source=AuthorityIdSource(self.authority, world_id),
        )
        world.materializer = self.scheduler.materialize
        for callback in self.on_load:
            callback(world)
        return world

    def drop(self, world_id: str) -> None:
        self._worlds.pop(world_id, None)

    async def step(self, world_id: str, tick: int | None = None) -> CommittedTickReceipt:
        world = await self.get(world_id)
        try:
            return await world.step(tick)
        except LOST_WRITER:
            self.drop(world_id)
            raise

    @property
    def loaded(self) -> list[str]:
        return sorted(self._worlds)
