"""The world directory at the edge: which world ids exist, so the Worker can list worlds.

A Durable Object namespace cannot be enumerated, and each world lives in its own object, so one
object of the same namespace, named `DIRECTORY` (a name no world id can take: world ids start
with a letter or a digit), keeps the ids. A world is registered *before* its object creates it,
so the directory never misses a world; it may name an id whose creation then failed, so a
listing asks each world's own object for its row (the truth) and leaves out ids it does not know.
"""

from __future__ import annotations

from typing import Any

from archetype.commands.port import SqlPort

DIRECTORY = ":directory"
LIST_LIMIT = 1_000

CREATE_TABLE = "CREATE TABLE IF NOT EXISTS world_directory (world_id TEXT PRIMARY KEY, registered_at INTEGER NOT NULL)"
REGISTER = "INSERT INTO world_directory (world_id, registered_at) VALUES (?, ?) ON CONFLICT (world_id) DO NOTHING"
PAGE = "SELECT world_id FROM world_directory WHERE world_id > ? ORDER BY world_id LIMIT ?"


class WorldDirectory:
    """The directory's table, over the directory object's own SQL storage."""

    def __init__(self, port: SqlPort) -> None:
        self._port = port
        port.transaction(lambda: port.execute(CREATE_TABLE))

    def register(self, world_id: str, now_ms: int) -> None:
        self._port.transaction(lambda: self._port.execute(REGISTER, (world_id, now_ms)))

    def world_ids(self, after: str = "", limit: int = LIST_LIMIT) -> list[str]:
        rows: list[Any] = self._port.transaction(lambda: self._port.execute(PAGE, (after, min(limit, LIST_LIMIT))))
        return [row[0] for row in rows]
