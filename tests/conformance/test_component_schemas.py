"""Component schemas a world records, and admission's check of component data against them
without the Python classes (docs/components.md, "Component schemas"), on every authority."""

from __future__ import annotations

import json

import pytest
from pydantic import Field

from archetype import Permanent
from archetype.canonical import canonical_json, digest
from archetype.commands import (
    CommandConflictError,
    CommandError,
    InvalidComponentDataError,
    MigrationConflictError,
    StaleWriterError,
    UnknownComponentError,
    UnsupportedComponentSchemaError,
)
from archetype.commands.identity import command_digest
from archetype.commands.scheduler import schema_row
from archetype.world import Component, ComponentValue, Despawn, Spawn
from tests.component_modules.alpha import Health, Position, Velocity
from tests.component_modules.flaky import Probe
from tests.conformance.helpers import at, fail_next, outbox

FAKE = "f" * 64


def raw_spawn(world_id: str, command_id: str, *values: dict) -> dict:
    """An admission row as a runner-protocol client sends it: no Python class is involved."""
    payload = canonical_json({"operation": "spawn", "world_id": world_id, "components": list(values)})
    return {"command_id": command_id, "schema_version": 1, "scheduled_tick": 0, "priority": 0, "operation": "spawn",
            "payload": payload, "principal": None, "origin": "gateway", "max_attempts": 3,
            "reserved_entity_id": None, "request_digest": None}  # fmt: skip


def value(cls, **data) -> dict:
    return {"name": cls.__name__, "fingerprint": cls.component_fingerprint(), "data": data}


async def footprint(authority, world_id: str) -> tuple:
    info = await authority.world_info(world_id)
    return (
        info["next_sequence"],
        info["next_event_seq"],
        await authority.history(world_id),
        await outbox(authority, world_id),
    )


async def test_a_world_records_each_schema_once_and_lists_it(authority, world_id, clock):
    assert await authority.record_components(world_id, [schema_row(Position), schema_row(Health)]) == 2
    clock.advance(5)
    assert await authority.record_components(world_id, [schema_row(Position)]) == 0  # content-addressed: a no-op
    listed = await authority.components(world_id)
    assert listed["migrations"] == []
    assert [(c["name"], c["fingerprint"], c["superseded_by"]) for c in listed["components"]] == [
        ("Health", Health.component_fingerprint(), None), ("Position", Position.component_fingerprint(), None),
    ]  # fmt: skip
    assert listed["components"][1]["schema"] == schema_row(Position)["schema"]


def outside_the_subset() -> dict:
    schema = schema_row(Position)["schema"]
    schema = {**schema, "properties": {**schema["properties"], "position__x": {"not": {"type": "string"}}}}
    return {"name": "Position", "fingerprint": digest(schema), "schema": schema}


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        ({**schema_row(Position), "fingerprint": FAKE}, "fingerprint"),
        ({**schema_row(Position), "name": "Health"}, "names 'Position'"),
        (outside_the_subset(), r"position__x\.not: keyword not supported"),
    ],
    ids=["fingerprint-not-its-digest", "another-name", "keyword-outside-the-subset"],
)
async def test_a_schema_outside_the_validated_subset_is_refused(authority, world_id, record, reason):
    with pytest.raises(UnsupportedComponentSchemaError, match=reason):
        await authority.record_components(world_id, [record])
    assert (await authority.components(world_id))["components"] == []


async def test_admission_refuses_an_unrecorded_fingerprint_and_persists_nothing(authority, world_id):
    before = await footprint(authority, world_id)
    made_up = {"name": "Position", "fingerprint": FAKE, "data": {"x": 1, "y": 2}}
    with pytest.raises(
        UnknownComponentError, match=r"^\$\.components\[0\]: .*'Position' with fingerprint f{64}"
    ) as refused:
        await authority.admit(world_id, [raw_spawn(world_id, "c1", made_up)])
    assert refused.value.code == "unknown_component"
    assert await footprint(authority, world_id) == before


async def test_admission_refuses_data_that_does_not_fit_with_its_path(authority, world_id):
    await authority.record_components(world_id, [schema_row(Position), schema_row(Health)])
    before = await footprint(authority, world_id)
    cases = {
        "$.components[1].data.x: expected number, got string": [value(Health, hp=1), value(Position, x="abc", y=2)],
        "$.components[0].data.hp: expected integer, got number": [value(Health, hp=1.5)],
        "$.components[0].data: missing required field 'y'": [value(Position, x=1)],
        "$.components[0].data.z: Position has no field 'z'": [value(Position, x=1, y=2, z=3)],
        "$.components[0].data.hp: expected integer, got boolean": [value(Health, hp=True)],
    }
    for expected, values in cases.items():
        with pytest.raises(InvalidComponentDataError) as refused:
            await authority.admit(
                world_id, [raw_spawn(world_id, "ok", value(Health, hp=2)), raw_spawn(world_id, "c1", *values)]
            )
        assert refused.value.code == "invalid_component_data"
        assert refused.value.message.startswith(expected), refused.value.message
    assert await footprint(authority, world_id) == before  # the whole batch: all or nothing


async def test_data_that_fits_is_admitted_integral_floats_as_integers(authority, world_id):
    await authority.record_components(world_id, [schema_row(Position), schema_row(Health)])
    (admitted,) = await authority.admit(
        world_id, [raw_spawn(world_id, "c1", value(Health, hp=2.0), value(Position, x=1, y=2.5))]
    )
    assert admitted["sequence"] == 1 and not admitted["replayed"]


async def test_a_python_admission_records_its_classes_first(rt, authority, world_id):
    await rt.dispatcher.defer(Spawn(world_id=world_id, components=[Position(x=1, y=2)]), at(0), command_id="s")
    (recorded,) = (await authority.components(world_id))["components"]
    assert (recorded["name"], recorded["fingerprint"]) == ("Position", Position.component_fingerprint())


async def migrate(authority, world_id: str, epoch: int, entities=(), commands=()) -> dict:
    identity = {
        "name": "Position",
        "from_fingerprint": Health.component_fingerprint(),
        "to_fingerprint": Position.component_fingerprint(),
    }
    return await authority.migrate_components(world_id, epoch, identity, list(entities), list(commands))


async def test_a_migration_rewrites_state_and_open_payloads_and_is_recorded_with_an_event(
    rt, authority, world_id, clock
):
    """A stand-in migration (Health values become Position ones) exercised at the ledger seam."""
    await rt.dispatcher.apply(Spawn(world_id=world_id, components=[Health(hp=1)]))
    await rt.worlds.step(world_id)  # publishes entity 1 and records Health
    await rt.dispatcher.defer(Spawn(world_id=world_id, components=[Health(hp=2)]), at(5), command_id="later")
    await authority.record_components(world_id, [schema_row(Position)])
    epoch = (await authority.acquire_writer(world_id))["writer_epoch"]
    moved = canonical_json([value(Position, x=1.0, y=0.0)])
    payload = canonical_json(
        {"operation": "spawn", "world_id": world_id, "components": [value(Position, x=2.0, y=0.0)]}
    )
    with pytest.raises(MigrationConflictError, match="open commands"):  # it must cover the open command too
        await migrate(authority, world_id, epoch, [{"entity_id": 1, "components": moved}])
    with pytest.raises(StaleWriterError):
        await migrate(
            authority,
            world_id,
            epoch - 1,
            [{"entity_id": 1, "components": moved}],
            [{"sequence": 1, "payload": payload}],
        )
    events_before = await outbox(authority, world_id)
    assert [(e["command_id"], e["event_type"]) for e in events_before][-1] == ("later", "admitted")  # pending
    clock.advance(1_000)  # the rewrite is later than the admission
    result = await migrate(
        authority, world_id, epoch, [{"entity_id": 1, "components": moved}], [{"sequence": 1, "payload": payload}]
    )
    assert result["migrated"] and (result["migration"]["entities"], result["migration"]["commands"]) == (1, 1)
    state = await authority.load_state(world_id)
    assert [e["components"] for e in state["entities"]] == [moved]
    (rewritten,) = await authority.history(world_id)
    assert rewritten["payload"] == payload and rewritten["status"] == "PENDING"
    assert rt.scheduler.record(rewritten).problem is None  # its digest follows the new payload
    events = await outbox(authority, world_id)
    assert events[:-1] == events_before  # the rewrite changes no event, the pending `admitted` one included
    assert (events[-1]["event_type"], events[-1]["command_id"]) == (
        "schema_migrated",
        f"schema-migration/Position/{Health.component_fingerprint()}",
    )
    assert json.loads(events[-1]["payload"])["to_fingerprint"] == Position.component_fingerprint()
    listed = await authority.components(world_id)
    superseded = {c["name"]: c["superseded_by"] for c in listed["components"]}
    assert superseded == {"Health": Position.component_fingerprint(), "Position": None}
    assert [m["from_fingerprint"] for m in listed["migrations"]] == [Health.component_fingerprint()]
    again = await migrate(authority, world_id, epoch)  # the answer was lost: recognised, nothing rewritten
    assert not again["migrated"] and len(await outbox(authority, world_id)) == len(events)
    with pytest.raises(UnknownComponentError, match="was migrated to"):  # the old type is admitted no more
        await authority.admit(world_id, [raw_spawn(world_id, "old", value(Health, hp=3))])


async def test_a_migration_covers_the_chunked_state_snapshot_under_its_deltas(rt, authority, world_id):
    """The entities a migration must rewrite are those of the published state as load_state reads
    it (a snapshot's chunks overlaid by later deltas); the rewrites land as a delta over it."""
    await rt.dispatcher.apply(Spawn(world_id=world_id, components=[Health(hp=1)]))
    await rt.dispatcher.apply(Spawn(world_id=world_id, components=[Health(hp=2)]))
    await rt.dispatcher.apply(Spawn(world_id=world_id, components=[Health(hp=3)]))
    await rt.worlds.step(world_id)  # the first publication: a snapshot of entities 1..3
    await rt.dispatcher.apply(Despawn(world_id=world_id, entity_id=2))
    await rt.worlds.step(world_id)  # a delta: entity 2 despawned, still in the snapshot's chunk
    await authority.record_components(world_id, [schema_row(Position)])
    epoch = (await authority.acquire_writer(world_id))["writer_epoch"]
    moved = {e: canonical_json([value(Position, x=float(e), y=0.0)]) for e in (1, 2, 3)}
    with pytest.raises(MigrationConflictError, match=r"entities \[1, 3\] and open commands \[\]"):
        await migrate(authority, world_id, epoch, [{"entity_id": e, "components": moved[e]} for e in (1, 2, 3)])
    result = await migrate(authority, world_id, epoch, [{"entity_id": e, "components": moved[e]} for e in (3, 1)])
    assert result["migrated"] and result["migration"]["entities"] == 2
    state = await authority.load_state(world_id)
    assert [(e["entity_id"], e["components"]) for e in state["entities"]] == [(1, moved[1]), (3, moved[3])]
    page = await authority.load_state(world_id, after_entity_id=1, limit=1)
    assert [(e["entity_id"], e["components"]) for e in page["entities"]] == [(3, moved[3])]
    again = await migrate(authority, world_id, epoch)  # recognised: nothing rewritten twice
    assert not again["migrated"]


async def test_a_migrated_value_must_fit_the_new_schema(rt, authority, world_id):
    await rt.dispatcher.apply(Spawn(world_id=world_id, components=[Health(hp=1)]))
    await rt.worlds.step(world_id)
    await authority.record_components(world_id, [schema_row(Position)])
    epoch = (await authority.acquire_writer(world_id))["writer_epoch"]
    wrong = canonical_json([value(Position, x="one", y=0.0)])
    with pytest.raises(CommandError, match=r"\$\[0\]\.data\.x: expected number"):
        await migrate(authority, world_id, epoch, [{"entity_id": 1, "components": wrong}])
    assert (await authority.components(world_id))["migrations"] == []


async def test_a_published_entity_records_its_types(rt, authority, world_id):
    await rt.worlds.get(world_id)  # loaded while empty: nothing to record yet
    await rt.dispatcher.apply(Spawn(world_id=world_id, components=[Health(hp=1), Position(x=0, y=0)]))  # direct: no admission
    assert (await authority.components(world_id))["components"] == []
    await rt.worlds.step(world_id)
    listed = [(c["name"], c["fingerprint"]) for c in (await authority.components(world_id))["components"]]
    assert listed == [("Health", Health.component_fingerprint()), ("Position", Position.component_fingerprint())]


class Gauge(Component):
    """A schema with integers in it (bounds, defaults, lengths): they must cross every transport as integers."""

    level: int = Field(default=3, ge=1, le=9)
    ratio: float = 0.5
    tags: list[str] = Field(default_factory=list, max_length=2)


async def test_a_schema_with_integers_records_and_validates_on_every_authority(authority, world_id):
    assert await authority.record_components(world_id, [schema_row(Gauge)]) == 1
    (listed,) = (await authority.components(world_id))["components"]
    assert listed["schema"] == schema_row(Gauge)["schema"] and digest(listed["schema"]) == Gauge.component_fingerprint()
    await authority.admit(world_id, [raw_spawn(world_id, "ok", value(Gauge, level=9, tags=["a"]))])
    with pytest.raises(InvalidComponentDataError, match=r"^\$\.components\[0\]\.data\.level: 10 breaks maximum 9"):
        await authority.admit(world_id, [raw_spawn(world_id, "high", value(Gauge, level=10))])


# -- every path that makes an open command passes admission's component check -----------------
def spawn_of(world_id: str, *values: dict) -> Spawn:
    """A spawn built from wire values, as a client sends it."""
    return Spawn(world_id=world_id, components=[ComponentValue.model_validate(v) for v in values])


async def superseded_health(rt, authority, world_id: str) -> dict:
    """A world whose Health type a migration superseded (to Position), holding a dead letter that
    names Health (`old-dead`) and an open command that names Velocity (`velocity-open`)."""
    fail_next("old", Permanent("poisoned"))
    probe_value = {"name": "Probe", "fingerprint": Probe.component_fingerprint(), "data": {"label": "old"}}
    await rt.dispatcher.defer(spawn_of(world_id, value(Health, hp=1), probe_value), at(0), command_id="old-dead")
    await rt.dispatcher.defer(spawn_of(world_id, value(Velocity, dx=1.0, dy=0.0)), at(50), command_id="velocity-open")
    await rt.worlds.step(world_id)
    assert (await authority.command(world_id, "old-dead"))["status"] == "DEAD_LETTER"
    await authority.record_components(world_id, [schema_row(Position)])
    epoch = (await authority.acquire_writer(world_id))["writer_epoch"]
    assert (await migrate(authority, world_id, epoch))["migrated"]  # nothing open names Health: nothing to rewrite
    return {"epoch": epoch}


async def through_admit(rt, authority, world_id: str, setup: dict) -> None:
    await authority.admit(world_id, [raw_spawn(world_id, "fresh", value(Health, hp=2))])


async def through_a_spawn_reservation(rt, authority, world_id: str, setup: dict) -> None:
    await rt.dispatcher.defer_spawn(spawn_of(world_id, value(Health, hp=2)), at(0), command_id="fresh")


async def through_redrive(rt, authority, world_id: str, setup: dict) -> None:
    await authority.redrive(world_id, "old-dead")


async def through_a_migration(rt, authority, world_id: str, setup: dict) -> None:
    """Another migration (Velocity to Position) whose rewritten payload names the superseded Health."""
    (row,) = await authority.history(world_id, "PENDING")
    payload = canonical_json({"components": [value(Health, hp=1)], "operation": "spawn", "world_id": world_id})
    await authority.migrate_components(
        world_id, setup["epoch"],
        {"name": "Position", "from_fingerprint": Velocity.component_fingerprint(), "to_fingerprint": Position.component_fingerprint()},
        [], [{"sequence": row["sequence"], "payload": payload}],
    )  # fmt: skip


@pytest.mark.parametrize("path", [through_admit, through_a_spawn_reservation, through_redrive, through_a_migration],
                         ids=lambda path: path.__name__)  # fmt: skip
async def test_no_path_makes_an_open_command_of_a_superseded_type(rt, authority, world_id, path):
    """Admission's exact component check, wherever an open command comes from: an admission
    (trusted or not), a spawn's reservation, a redrive copying a dead letter's payload, a
    migration's rewrite. What a migration superseded is `unknown_component` naming the migration,
    and nothing is persisted (no row, no event, no entity id, no redrive mark)."""
    setup = await superseded_health(rt, authority, world_id)
    before = await footprint(authority, world_id)
    entities = (await authority.world_info(world_id))["next_entity_id"]
    with pytest.raises(UnknownComponentError, match=f"'Health' {Health.component_fingerprint()} was migrated to "
                                                    f"{Position.component_fingerprint()}") as refused:  # fmt: skip
        await path(rt, authority, world_id, setup)
    assert refused.value.code == "unknown_component"
    assert await footprint(authority, world_id) == before
    assert (await authority.world_info(world_id))["next_entity_id"] == entities
    assert (await authority.components(world_id))["migrations"][-1]["from_fingerprint"] == Health.component_fingerprint()


# -- a migration rewrites a command's payload, never its identity -----------------------------
async def test_an_identical_replay_is_recognised_across_a_migration(rt, make_runtime, authority, world_id):
    """The digest a command was admitted with is immutable (the spec): a migration rewrites the
    open payload (its new digest is `migrated_digest`, what materialization verifies), and the
    client's retry as it first sent it answers the existing identity; other content, the migrated
    form included, is a conflict. A spawn's retry gets its reserved entity back."""
    old = Spawn(world_id=world_id, components=[Health(hp=2)])
    admitted = await rt.dispatcher.defer(old, at(5), command_id="later")
    spawned = await rt.dispatcher.defer_spawn(Spawn(world_id=world_id, components=[Health(hp=3)]), at(5), command_id="sp")
    await authority.record_components(world_id, [schema_row(Position)])
    epoch = (await authority.acquire_writer(world_id))["writer_epoch"]
    rewritten = {}
    for row in await authority.history(world_id):
        components = [value(Position, x=float(json.loads(row["payload"])["components"][0]["data"]["hp"]), y=0.0)]
        rewritten[row["command_id"]] = canonical_json({**json.loads(row["payload"]), "components": components})
    await migrate(authority, world_id, epoch, [], [
        {"sequence": admitted.sequence, "payload": rewritten["later"]},
        {"sequence": spawned.command.sequence, "payload": rewritten["sp"]},
    ])  # fmt: skip
    row = await authority.command(world_id, "later")
    assert (row["payload"], row["digest"]) == (rewritten["later"], admitted.digest)
    assert row["migrated_digest"] == command_digest({**row, "digest": None}) != admitted.digest

    for runtime in (rt, make_runtime("runner-b")):  # from any process
        replay = await runtime.dispatcher.defer(old, at(5), command_id="later")
        assert (replay.sequence, replay.digest, replay.replayed) == (admitted.sequence, admitted.digest, True)
        again = await runtime.dispatcher.defer_spawn(Spawn(world_id=world_id, components=[Health(hp=3)]), at(5),
                                                     command_id="sp")  # fmt: skip
        assert (again.entity_id, again.command.sequence, again.command.replayed) == (spawned.entity_id, spawned.command.sequence, True)
    with pytest.raises(CommandConflictError):
        await rt.dispatcher.defer(Spawn(world_id=world_id, components=[Health(hp=9)]), at(5), command_id="later")
    with pytest.raises(CommandConflictError):  # the migrated form is not what the client sent
        await rt.dispatcher.defer(Spawn(world_id=world_id, components=[Position(x=2.0, y=0.0)]), at(5), command_id="later")
    with pytest.raises(UnknownComponentError):  # and a new command of the old type is refused, as before
        await rt.dispatcher.defer(old, at(5), command_id="new")

    runner = make_runtime("runner-c")
    for _ in range(6):
        await runner.worlds.step(world_id)
    assert {(await authority.command(world_id, c))["status"] for c in ("later", "sp")} == {"APPLIED"}
    world = await runner.worlds.get(world_id)
    assert sorted(p.x for _, (p,) in world.query(Position)) == [2.0, 3.0] and not list(world.query(Health))
