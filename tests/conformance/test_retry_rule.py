"""The retry rule (docs/ledger.md, "Materialization and settlement"): no settlement is decided
against state that is not published with it; a tick that fails before it is prepared is
discarded whole and run again, in ledger order; anything a materialization raises is classified."""

import asyncio

import pytest

from archetype.canonical import NonCanonicalValueError
from archetype.world import ComponentValue, Spawn
from archetype.world.world import PreTick
from tests.component_modules import flaky
from tests.component_modules.alpha import Health
from tests.component_modules.flaky import Gauge
from tests.conformance.authorities import LEDGERS
from tests.conformance.helpers import applied, at, fail_next, manifests, outbox, probe, records, settled, step
from tests.support.faults import AuthoritySeam

AUTHORITIES = LEDGERS  # its reason: docs/testing.md, "Which authorities"


def gauge(world_id: str, label: str, reading: int = 1) -> Spawn:
    value = ComponentValue(name="Gauge", fingerprint=Gauge.component_fingerprint(), data={"label": label, "reading": reading})
    return Spawn(world_id=world_id, components=[value])


async def events_of(authority, world_id, command_id):
    return [e["event_type"] for e in await outbox(authority, world_id) if e["command_id"] == command_id]


@pytest.mark.parametrize("failure", [ValueError("bad"), ConnectionError("down")], ids=["rejected", "retryable"])
async def test_a_failure_settled_in_a_tick_that_never_publishes_is_never_written(rt, make_runtime, world_id, authority, failure):
    fail_next("doomed", failure)
    await rt.dispatcher.defer(probe(world_id, "doomed"), at(0), command_id="doomed")
    world = await rt.worlds.get(world_id)
    await rt.scheduler.materialize(world, 0)  # the failure is staged ... and the runner dies before publishing
    row = await authority.command(world_id, "doomed")
    assert (row["status"], row["attempts"], row["last_error"]) == ("LEASED", 0, None)
    assert await events_of(authority, world_id, "doomed") == ["admitted"]

    assert await step(make_runtime("runner-a"), world_id) == 1  # decided again against published state: fine now
    row = await authority.command(world_id, "doomed")
    assert (row["status"], row["attempts"]) == ("APPLIED", 1)
    assert await events_of(authority, world_id, "doomed") == ["admitted", "applied"]


async def test_a_tick_failing_after_materialization_is_discarded_and_rerun_in_order(rt, world_id, authority):
    for label in ("b", "c"):
        await rt.dispatcher.defer(probe(world_id, label), at(0, priority=5), command_id=label)
    world = await rt.worlds.get(world_id)
    fails = [RuntimeError("processor bug")]

    def processor(w, tick, entity_id, components):
        if fails:
            raise fails.pop()

    world.add_processor(processor, flaky.Probe)
    with pytest.raises(RuntimeError):
        await step(rt, world_id)
    assert world.query(flaky.Probe) == []  # nothing of the failed tick is left in the world
    await rt.dispatcher.defer(probe(world_id, "a"), at(0, priority=0), command_id="a")  # sorts before b and c
    assert await step(rt, world_id) == 3
    (manifest,) = await manifests(authority, world_id)
    assert applied(manifest) == ["a", "b", "c"]
    assert {k: (r.status, r.attempts) for k, r in (await records(rt, world_id)).items()} == {
        "a": ("APPLIED", 1), "b": ("APPLIED", 1), "c": ("APPLIED", 1),
    }  # fmt: skip


@pytest.mark.parametrize("where", ["lease", "guard"])
async def test_a_tick_whose_authority_stops_answering_mid_drain_is_rerun_in_order(rt, make_runtime, world_id, authority, clock, where):
    await rt.dispatcher.defer(probe(world_id, "b"), at(0, priority=5), command_id="b")
    await rt.dispatcher.defer(probe(world_id, "c"), at(0, priority=5), command_id="c")
    if where == "guard":  # make the commands suspect, so the drain calls guard
        await rt.scheduler.materialize(await rt.worlds.get(world_id), 0)
        rt = make_runtime("runner-a")
    world = await rt.worlds.get(world_id)
    calls = []

    def down_once(method, arguments):
        if method == where and not calls:
            calls.append(method)
            raise ConnectionResetError(f"{method}: connection reset")

    rt.scheduler.authority = AuthoritySeam(authority, before=down_once)
    with pytest.raises(ConnectionResetError):
        await world.step()
    await rt.dispatcher.defer(probe(world_id, "a"), at(0, priority=0), command_id="a")
    assert await world.step() and world.tick == 0
    assert applied((await manifests(authority, world_id))[0]) == ["a", "b", "c"]


async def test_a_cancellation_mid_drain_discards_the_tick_and_charges_nothing(rt, world_id, authority):
    fail_next("b", asyncio.CancelledError())
    for label, priority in (("a", 0), ("b", 1), ("c", 2)):
        await rt.dispatcher.defer(probe(world_id, label), at(0, priority=priority), command_id=label)
    with pytest.raises(asyncio.CancelledError):
        await step(rt, world_id)
    assert await step(rt, world_id) == 3
    assert applied((await manifests(authority, world_id))[0]) == ["a", "b", "c"]
    assert {r.attempts for r in (await records(rt, world_id)).values()} == {1}


async def test_a_command_whose_live_value_is_not_canonical_is_rejected_and_the_world_keeps_stepping(rt, world_id, authority):
    await rt.dispatcher.defer(gauge(world_id, "huge"), at(0), command_id="huge")
    await rt.dispatcher.defer(gauge(world_id, "fine"), at(0), command_id="fine")
    flaky.INFLATE["huge"] = 2**60  # from now on the model coerces its reading beyond the safe range
    assert await step(rt, world_id) == 1
    result = await records(rt, world_id)
    assert result["huge"].status == "REJECTED" and "NonCanonicalValueError" in result["huge"].last_error
    assert result["fine"].status == "APPLIED"
    await rt.dispatcher.defer(gauge(world_id, "later"), at(1), command_id="later")
    assert await step(rt, world_id) == 1  # nothing wedged: no command left LEASED, the next tick publishes
    assert (await records(rt, world_id))["later"].status == "APPLIED"


async def test_a_processor_writing_a_non_canonical_value_fails_its_tick_and_leaves_the_world_steppable(rt, world_id, authority):
    await rt.dispatcher.defer(Spawn(world_id=world_id, components=[Health(hp=1)]), at(0), command_id="s")
    world = await rt.worlds.get(world_id)

    def overflow(w, tick, entity_id, components):
        w.update(entity_id, [Health.model_construct(hp=2**60)])

    world.add_processor(overflow, Health)
    for _ in range(2):  # the tick fails the same way each time, and leaves nothing behind
        with pytest.raises(NonCanonicalValueError):
            await step(rt, world_id)
        # (the failed tick is recorded and its leases given back: docs/ledger.md, "World health")
        assert world.query(Health) == [] and (await records(rt, world_id))["s"].status == "PENDING"
    world._processors.clear()
    assert await step(rt, world_id) == 1
    assert settled((await manifests(authority, world_id))[0]) == [("s", "applied")]


async def test_a_failed_hook_leaves_direct_mutations_for_the_next_tick(rt, world_id, authority):
    world = await rt.worlds.get(world_id)
    entity = await rt.dispatcher.apply(Spawn(world_id=world_id, components=[Health(hp=3)]))
    fails = [RuntimeError("hook down")]
    world.add_hook(PreTick, lambda w, e: fails and (_ for _ in ()).throw(fails.pop()))
    with pytest.raises(RuntimeError):
        await step(rt, world_id)
    assert world.get(entity)[Health].hp == 3  # the direct spawn survived the discarded tick
    await step(rt, world_id)
    assert (await manifests(authority, world_id))[0]["written_runs"] == [[entity, entity]]
