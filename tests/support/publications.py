"""What a world publishes, as the tests that compare it across authorities and interpreters read it."""

from __future__ import annotations

from typing import Any


def record_publications(world: Any) -> list[Any]:
    """Every tick `world` publishes from now on, as its publisher is handed it (a prepared tick:
    its `chunks`, whether it is a `snapshot`), appended to the list this returns; each is still
    published."""
    sent: list[Any] = []
    publish = world.publisher.publish

    async def recorded(prepared: Any) -> None:
        sent.append(prepared)
        await publish(prepared)

    world.publisher.publish = recorded
    return sent
