"""The remote `Authority`: each call goes to the Durable Object of its world.

Runs in the Worker (Pyodide). The namespace binding maps a world id to its object with
`idFromName`, so a world's ledger lives in exactly one object, wherever it is called from.
Listing worlds goes through the world directory (durable_world.directory), and so does the
runner registry: one for the namespace, in the directory's object. The due-time index
(`pending_worlds`) and `hosted_worlds` ask every listed world's object, so at the edge they cost a
call per world. A fork (`fork_world`) is a new object, copied page by page from the source's
(`_fork`, docs/ledger.md "Forks on the Durable Object").
"""

from __future__ import annotations

import asyncio
from typing import Any

from archetype.commands.authority import Authority
from archetype.commands.errors import (
    InvalidCommandError,
    UnregisteredOperationError,
    WorldForkingError,
    WorldNotFoundError,
)
from archetype.commands.ledger import CATALOG_METHODS, LEDGER_METHODS
from archetype.commands.ledger_rows import WorldRow
from durable_world.directory import DIRECTORY
from durable_world.envelope import unwrap
from durable_world.ffi import to_py

REGISTRY_METHODS = frozenset({"register_runner", "leave_runner", "live_runners"})
EVERY_WORLD_METHODS = frozenset({"pending_worlds", "hosted_worlds"})  # reads over all worlds: each object answers its own


class DurableObjectAuthority(Authority):
    def __init__(self, namespace: Any) -> None:
        self._namespace = namespace

    def _stub(self, name: str) -> Any:
        return self._namespace.get(self._namespace.idFromName(name))

    async def rpc(self, method: str, args: dict[str, Any]) -> Any:
        if method not in LEDGER_METHODS and method not in CATALOG_METHODS:
            raise UnregisteredOperationError(f"{method!r} is not a ledger method")
        if method == "list_worlds":
            return await self._listed_worlds()
        if method in EVERY_WORLD_METHODS:
            return await self._from_every_world(method, args)
        if method in REGISTRY_METHODS:
            return unwrap(to_py(await getattr(self._stub(DIRECTORY), method)(args)))
        if not isinstance(args.get("world_id"), str):
            raise InvalidCommandError(f"{method} needs the world_id that names its Durable Object")
        if method == "fork_world":
            return await self._fork(args)
        if method == "create_world":  # listed before it exists: the directory never misses a world
            unwrap(to_py(await self._stub(DIRECTORY).directory_register({"world_id": args["world_id"]})))
        return unwrap(to_py(await getattr(self._stub(args["world_id"]), method)(args)))

    async def _on_object(self, method: str, **args: Any) -> Any:
        """`method` on the object of the world its arguments name (`world_id`)."""
        return unwrap(to_py(await getattr(self._stub(args["world_id"]), method)(args)))

    async def _fork(self, args: dict[str, Any]) -> WorldRow:
        """Fork a world into a new object: the source's object fixes the plan (with its
        `world_forked` event), the fork's records it and copies it page by page, each page with its
        progress, then activates it. Any step may fail or the objects restart: the same call again
        resumes at the first page not written (and answers an active fork as it is)."""
        fork_id, source_id = args["world_id"], args.get("source_world_id")
        if not isinstance(source_id, str):
            raise InvalidCommandError("fork_world needs the source_world_id that names its Durable Object")
        identity = {"source_world_id": source_id, "at_tick": args.get("at_tick"), "name": args.get("name")}
        begun = await self._on_object("fork_begin", world_id=fork_id, **identity)
        if not begun["started"]:
            plan = await self._on_object("fork_plan", world_id=source_id, fork_world_id=fork_id, at_tick=args.get("at_tick"),
                                    name=args.get("name"), with_open_commands=args.get("with_open_commands", False),
                                    actor=args.get("actor"))  # fmt: skip
            begun = await self._on_object("fork_begin", world_id=fork_id, **identity, plan=plan)
        if begun["world"] is None:
            cursor = begun["cursor"]
            while cursor is not None:
                page = await self._on_object("fork_page", world_id=source_id, fork_world_id=fork_id, cursor=cursor)
                cursor = await self._on_object("fork_write", world_id=fork_id, page=page)
            # listed before it is a world, as a created one is: the directory never misses a world
            unwrap(to_py(await self._stub(DIRECTORY).directory_register({"world_id": fork_id})))
            begun["world"] = await self._on_object("fork_activate", world_id=fork_id)
        await self._on_object("fork_release", world_id=source_id, fork_world_id=fork_id)
        row: WorldRow = begun["world"]
        return row

    async def _listed_worlds(self) -> list[WorldRow]:
        """Every world the directory names, each row from the world's own object (in world id order)."""
        rows: list[WorldRow] = []
        after = ""
        while ids := unwrap(to_py(await self._stub(DIRECTORY).directory_world_ids({"after": after}))):
            rows.extend(row for row in await asyncio.gather(*map(self._world_row, ids)) if row is not None)
            after = ids[-1]
        return rows

    async def _from_every_world(self, method: str, args: dict[str, Any]) -> list[Any]:
        """Every listed world object's answer to `method` (a read of that object's own world), in world id order."""

        async def answer(world_id: str) -> list[Any]:
            rows: list[Any] = unwrap(to_py(await getattr(self._stub(world_id), method)(args)))
            return rows

        found = await asyncio.gather(*(answer(world["world_id"]) for world in await self._listed_worlds()))
        return [row for rows in found for row in rows]

    async def _world_row(self, world_id: str) -> WorldRow | None:
        try:
            row: WorldRow = unwrap(to_py(await self._stub(world_id).world_info({"world_id": world_id})))
        except (WorldNotFoundError, WorldForkingError):  # registered, but its creation failed or its copy is unfinished
            return None
        return row
