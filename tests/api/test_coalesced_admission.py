"""Single-command submissions that arrive in one turn of the event loop reach the ledger in one call
(archetype.commands.coalesced), and each is answered exactly as it would have been alone: the same
status, headers and bytes, the same rows in the ledger, the same admission metrics."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from archetype.api import create_app
from archetype.commands.port import ManualClock
from archetype.metrics import Metrics, ObservedAuthority
from local_catalog import open_local_authority
from local_catalog.writer import WriterThreadAuthority
from tests.api.conftest import QUOTA, TOKENS, auth
from tests.api.test_routes import value
from tests.component_modules.alpha import Position

COMMANDS = "/worlds/w1/commands"


def despawn(
    key: str, *, token: str = "t-player", entity_id: int = 1, tick: int = 0
) -> tuple[str, dict[str, Any], dict[str, str]]:
    return COMMANDS, {"type": "despawn", "tick": tick, "entity_id": entity_id}, auth(token, **{"Idempotency-Key": key})


# What one turn brings: two players' and an admin's submissions interleaved, new ones, a replay of
# a key admitted before the turn, a key sent twice in the turn, a conflict with a key admitted before,
# one player's quota overflowing at tick 9 while the other's is not, a body the family model
# refuses, another world's, a world that does not exist, and a spawn (which reserves its entity
# first, on a path of its own).
TURN = [
    despawn("k1"),
    despawn("seen"),  # a replay
    despawn("q1", token="t-player2"),
    despawn("k2"),
    despawn("twice"), despawn("twice"),
    despawn("clash", entity_id=2),  # admitted before with other content: 409
    *(despawn(f"t{i}", tick=9) for i in range(QUOTA + 1)),  # the last over pat's quota of tick 9
    despawn("q2", token="t-player2", tick=9),
    despawn("root1", token="t-admin", tick=9),  # no quota
    despawn("neg", entity_id=-1),  # refused by validation
    ("/worlds/w2/commands", *despawn("other")[1:]),
    ("/worlds/nowhere/commands", *despawn("lost")[1:]),
    despawn("k3", tick=1),
    (COMMANDS, {"type": "spawn", "tick": 1, "components": [value(Position(x=0, y=0))]}, auth("t-player", **{"Idempotency-Key": "ship"})),
]  # fmt: skip


async def _answers(directory: Any, *, together: bool) -> tuple[list[tuple[Any, ...]], list[Any], dict[str, float], int]:
    """(each request's status, headers and body; the ledger's rows; the admission metrics; writer calls in the turn)."""
    catalog = open_local_authority(directory, clock=ManualClock())
    assert isinstance(catalog, WriterThreadAuthority)
    metrics = Metrics()
    app = create_app(ObservedAuthority(catalog, metrics), tokens=TOKENS, quota=QUOTA)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as client:
            for world in ("w1", "w2"):
                created = await client.post("/worlds", json={"name": world, "world_id": world}, headers=auth("t-admin"))
                assert created.status_code == 201
            for key, entity_id in (("seen", 1), ("clash", 1)):
                assert (await client.post(*despawn(key, entity_id=entity_id)[:1], json=despawn(key, entity_id=entity_id)[1],
                                          headers=despawn(key)[2])).status_code == 202  # fmt: skip
            calls = catalog.calls
            if together:
                responses = await asyncio.gather(
                    *(client.post(path, json=body, headers=headers) for path, body, headers in TURN)
                )
            else:
                responses = [await client.post(path, json=body, headers=headers) for path, body, headers in TURN]
            calls = catalog.calls - calls
            rows = [await catalog.history(world, limit=100, scope=None) for world in ("w1", "w2")]
    finally:
        await catalog.close()
    counted = {sample.labels["outcome"]: sample.value for family in metrics.admissions.collect() for sample in family.samples
               if sample.name.endswith("_total")}  # fmt: skip
    return [(r.status_code, r.headers.raw, r.content) for r in responses], rows, counted, calls


async def test_submissions_in_one_turn_are_answered_each_as_alone(tmp_path):
    together, together_rows, together_counted, together_calls = await _answers(tmp_path / "together", together=True)
    alone, alone_rows, alone_counted, alone_calls = await _answers(tmp_path / "alone", together=False)
    assert together == alone
    assert together_rows == alone_rows
    assert together_counted == alone_counted
    statuses = [answer[0] for answer in alone]
    assert statuses.count(409) == statuses.count(429) == statuses.count(404) == statuses.count(422) == 1
    assert alone_counted == {
        "admitted": len(TURN) - 4,
        "replayed": 2,
        "conflict": 1,
        "quota_exceeded": 1,
    }  # 2 before the turn
    # Alone, each admission is a call to the writer thread. Together, pat's admissions that arrived
    # one after another at w1 are one call each run: k1 and seen's (one call, not two), and k2's to
    # t5's (one, not ten: refused as a batch, then each alone within that call).
    assert alone_calls - together_calls == 1 + 9
