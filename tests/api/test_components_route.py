"""`GET /worlds/{id}/components`, and component data refused over HTTP with its path, before
anything is persisted: answers validate against the published OpenAPI document."""

from __future__ import annotations

import pytest

from archetype.commands.scheduler import schema_row
from archetype.world import components as loaded_classes
from tests.api.conftest import PLAYER, VIEWER
from tests.api.test_openapi import check
from tests.api.test_routes import value
from tests.component_modules.alpha import Health, Position

SUBMIT = "/worlds/{world_id}/commands"


def spawn(*values: dict, tick: int = 0) -> dict:
    return {"type": "spawn", "tick": tick, "components": list(values)}


async def test_the_components_a_world_recorded_are_listed(client, world):
    empty = await client.get(f"/worlds/{world}/components", headers=VIEWER)
    check(empty, "/worlds/{world_id}/components")
    assert empty.json() == {"components": [], "migrations": []}
    admitted = await client.post(f"/worlds/{world}/commands", json=spawn(value(Position(x=1, y=2))), headers=PLAYER)
    assert admitted.status_code == 202, admitted.text  # admission recorded the class the command names
    listed = await client.get(f"/worlds/{world}/components", headers=VIEWER)
    check(listed, "/worlds/{world_id}/components")
    (component,) = listed.json()["components"]
    assert component == {**schema_row(Position), "recorded_at": component["recorded_at"], "superseded_by": None}
    for answer in (
        await client.get("/worlds/ghost/components", headers=VIEWER),
        await client.get(f"/worlds/{world}/components"),
    ):
        check(answer, "/worlds/{world_id}/components")
        assert answer.status_code in (401, 404)


@pytest.mark.parametrize("class_loaded", [True, False], ids=["runner-with-classes", "edge-without-classes"])
async def test_bad_component_data_is_a_422_with_its_path_and_persists_nothing(
    client, world, snapshot, monkeypatch, class_loaded
):
    # a runner recorded both types; the edge (here: this app with the classes unloaded) has neither class
    await client.post(
        f"/worlds/{world}/commands", json=spawn(value(Position(x=1, y=2)), value(Health(hp=1))), headers=PLAYER
    )
    if not class_loaded:
        for cls in (Position, Health):
            monkeypatch.delitem(loaded_classes._LOADED, (cls.__name__, cls.component_fingerprint()))
    before = snapshot()
    bad = {**value(Position(x=1, y=2)), "data": {"x": "abc", "y": 2}}
    for body, code, path in [
        (spawn(value(Health(hp=1)), bad), "invalid_component_data", "$.components[1].data.x: "),
        (spawn({**bad, "fingerprint": "0" * 64}), "unknown_component", "$.components[0]: "),
        ({"commands": [spawn(value(Health(hp=3))), spawn(bad)]}, "invalid_component_data", "$.components[0].data.x: "),
    ]:
        route = SUBMIT + (":batch" if "commands" in body else "")
        answer = await client.post(route.format(world_id=world), json=body, headers=PLAYER)
        check(answer, route)
        assert (answer.status_code, answer.json()["code"]) == (422, code), answer.text
        assert answer.json()["message"].startswith(path), answer.json()["message"]
    assert snapshot() == before  # no command, no reservation, no event, no counter moved
