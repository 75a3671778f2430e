"""CoalescedAdmissions (archetype.commands.coalesced) against an authority that fails: what fails
the one call fails each admission it carried, as each call alone would have failed, and nobody
is left waiting. (tests/api/test_coalesced_admission.py holds the answers to admissions alone.)"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from archetype.commands import ActorCtx, DurableOptions, Role
from archetype.commands.authority import Authority
from archetype.commands.coalesced import CoalescedAdmissions
from archetype.commands.dispatcher import CommandDispatcher
from archetype.commands.errors import StorageUnavailableError
from archetype.commands.families import default_registry
from archetype.commands.scheduler import CommandScheduler, DeferredItem
from archetype.world import Despawn

PLAYER = ActorCtx(principal="pat", roles=frozenset({Role.player}))


class Failing(Authority):
    """Every admission call fails with `error`; records the commands of each call."""

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.calls: list[list[str]] = []

    async def rpc(self, method: str, arguments: dict[str, Any]) -> Any:
        raise AssertionError(f"{method} is not an admission call")

    async def admit(self, world_id: str, commands: list[Any], quota: int | None = None) -> Any:
        self.calls.append([command["command_id"] for command in commands])
        raise self.error

    async def admit_each(self, world_id: str, commands: list[Any], quota: int | None = None) -> Any:
        self.calls.append([command["command_id"] for command in commands])
        raise self.error


def coalesced(authority: Authority) -> CoalescedAdmissions:
    registry = default_registry()
    return CoalescedAdmissions(CommandDispatcher(registry, CommandScheduler(registry, authority), worlds=None))


def item(key: str) -> DeferredItem:
    return DeferredItem(op=Despawn(world_id="w1", entity_id=1), options=DurableOptions(tick=0), command_id=key)


@pytest.mark.parametrize("count", [1, 3])
async def test_a_failed_call_fails_each_admission_it_carried(count):
    authority = Failing(StorageUnavailableError("the disk is full"))
    admissions = coalesced(authority)
    answers = await asyncio.gather(
        *(admissions.admit_as(PLAYER, item(f"k{i}")) for i in range(count)), return_exceptions=True
    )
    assert authority.calls == [[f"k{i}" for i in range(count)]]  # one call
    assert [type(answer) for answer in answers] == [StorageUnavailableError] * count


class Hanging(Failing):
    """Every admission call waits for ever."""

    async def admit_each(self, world_id: str, commands: list[Any], quota: int | None = None) -> Any:
        self.calls.append([command["command_id"] for command in commands])
        await asyncio.Event().wait()


async def test_a_carry_cancelled_leaves_nobody_waiting():
    authority = Hanging(StorageUnavailableError("unused"))
    admissions = coalesced(authority)
    waiting = [asyncio.ensure_future(admissions.admit_as(PLAYER, item(f"k{i}"))) for i in range(2)]
    while not authority.calls:
        await asyncio.sleep(0)
    (carrying,) = admissions._carrying
    carrying.cancel()  # as a closing loop cancels what is left
    done, _ = await asyncio.wait(waiting, timeout=10)
    assert done == set(waiting) and all(future.cancelled() for future in waiting)
