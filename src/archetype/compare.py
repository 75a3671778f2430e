"""Two worlds side by side at a tick: which entities one has that the other has not, which
components differ, and which commands ended differently (docs/guide/vectorised.md, "What if").

The usual pair is a world and its fork (`ForkWorld`): run the fork forward with other commands,
then compare both at a later tick. Reads go through an `Authority` (`Runtime.authority` in
process, or `HttpAuthority` for an operator), at a tick of both worlds' retention windows, so the
worlds may run on while they are read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from archetype.commands.authority import Authority
from archetype.commands.state_pages import entity_texts

Entities = dict[int, dict[str, Any]]
"""A world's state: entity id -> {component name: its data}."""


@dataclass(frozen=True)
class StateDiff:
    added: list[int]  # entities the second world has and the first has not
    removed: list[int]  # entities the first world has and the second has not
    changed: dict[int, list[str]]  # entities both have -> the names of the components that differ


@dataclass(frozen=True)
class WorldDiff:
    tick: int
    state: StateDiff
    outcomes: dict[str, tuple[str | None, str | None]]  # command id -> (first's status, second's), where they differ


async def state_at(authority: Authority, world_id: str, tick: int) -> Entities:
    """Every entity of the world as it published it at `tick` (every page of `read_state`)."""
    found: Entities = {}
    after: int | None = 0
    while after is not None:
        page = await authority.read_state(world_id, after, 10_000, None, None, tick)
        for entity_id, text in entity_texts(page["sections"]):
            found[entity_id] = {c["name"]: c["data"] for c in json.loads(text)}
        after = page["next_after"]
    return found


def diff_states(first: Entities, second: Entities) -> StateDiff:
    changed = {}
    for entity_id in sorted(first.keys() & second.keys()):
        a, b = first[entity_id], second[entity_id]
        names = sorted(name for name in a.keys() | b.keys() if a.get(name) != b.get(name))
        if names:
            changed[entity_id] = names
    return StateDiff(added=sorted(second.keys() - first.keys()), removed=sorted(first.keys() - second.keys()), changed=changed)


async def outcomes_between(authority: Authority, world_id: str, since: int, tick: int) -> dict[str, str]:
    """Command id -> status of the world's retained commands settled after tick `since`, up to
    `tick`, every principal's (an id used by two principals names the later one)."""
    found: dict[str, str] = {}
    after = 0
    while rows := await authority.history(world_id, None, after, 1_000):
        found.update((r["command_id"], r["status"]) for r in rows
                     if r["applied_tick"] is not None and since < r["applied_tick"] <= tick)  # fmt: skip
        after = rows[-1]["sequence"]
    return found


async def compare_worlds(authority: Authority, first: str, second: str, tick: int, since: int = -1) -> WorldDiff:
    """The two worlds' states at `tick`, and the commands settled after `since` (for a fork and
    its source, the fork's tick: what came before is the source's own history) up to `tick` that
    ended differently, or in one world only."""
    state = diff_states(await state_at(authority, first, tick), await state_at(authority, second, tick))
    a, b = await outcomes_between(authority, first, since, tick), await outcomes_between(authority, second, since, tick)
    outcomes = {command_id: (a.get(command_id), b.get(command_id)) for command_id in sorted(a.keys() | b.keys())
                if a.get(command_id) != b.get(command_id)}  # fmt: skip
    return WorldDiff(tick, state, outcomes)
