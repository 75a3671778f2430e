"""The typed client against a real `archetype serve`, through the proxy that loses answers: commands
from component instances and classes (and family models, in batches) keep their idempotency keys
across retries, `wait_all` reads outcomes a page of 1,000 per request, and `state` / `iter_state`
read the filtered state page by page. The request counts of `wait_all` are pinned exactly against
a scripted server too."""

from __future__ import annotations

import base64
import json
import math
import struct

import httpx
import pytest

from archetype import AsyncClient, Client
from archetype.client import EntityState, RetryPolicy, WaitTimeoutError
from archetype.client_state import _Column
from archetype.commands import DurableOptions
from archetype.commands.errors import CommandNotFoundError, TickNotRetainedError, UnknownComponentError
from archetype.commands.scheduler import CommandStatus, DeferredItem
from archetype.world import Despawn, Spawn, Update
from tests.client.proxy import Fault, FaultyProxy
from tests.component_modules.alpha import Health, Position, Velocity
from tests.support.serve import serving

pytestmark = pytest.mark.timeout(120)
FAST = RetryPolicy(attempts=4, backoff_s=0.01)
ROUND = 1_000  # commands in one policy round


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("serve")) as (_, url):
        with Client(url, token="t-admin") as admin:
            admin.create_world("sim", world_id="sim")
        yield url


@pytest.fixture
def proxy(server):
    with FaultyProxy(server) as proxy:
        yield proxy


def requests_to(proxy: FaultyProxy, path: str) -> list[str]:
    return [line for line, _ in proxy.seen if path in line.split()[1]]


def test_typed_commands_survive_lost_answers_and_settle(proxy):
    proxy.faults += [Fault("/commands "), Fault("/commands:outcomes")]  # a spawn's answer and a read's are lost
    with Client(proxy.url, token="t-player", retry=FAST) as client:
        spawned = client.spawn("sim", [Position(x=1.0, y=2.0)], command_id="typed-spawn")
        assert spawned.replayed and spawned.entity_id  # admitted once; the retry was answered as a replay
        entity = spawned.entity_id
        steps = [
            client.add_components("sim", entity, [Velocity(dx=0.0, dy=0.5)], options=DurableOptions(tick=0)),
            client.update("sim", entity, [Position(x=10.0, y=20.0)], options=DurableOptions(tick=0, priority=1)),
        ]
        outcomes = client.wait_all("sim", [spawned, *steps], timeout=30)
        assert [o.status for o in outcomes] == [CommandStatus.APPLIED] * 3
        assert [o.command_id for o in outcomes] == [spawned.command_id, *(s.command_id for s in steps)]
        state = client.state("sim", entity_ids=[entity])
        (moving,) = state.entities
        assert Velocity in moving and moving[Velocity] == Velocity(dx=0.0, dy=0.5)
        removed = client.remove_components("sim", entity, [Velocity])
        assert client.wait("sim", removed, timeout=30).status is CommandStatus.APPLIED
        (still,) = client.state("sim", entity_ids=[entity]).entities
        assert Velocity not in still and still.get(Velocity) is None and still[Position].x >= 10.0
        gone = client.despawn("sim", entity)
        assert client.wait("sim", gone.command_id, timeout=30).status is CommandStatus.APPLIED
        assert client.state("sim", entity_ids=[entity]).entities == []
        history = {c.command_id: c for c in client.history("sim")}
        assert history["typed-spawn"].operation == "spawn_reserved" and len(requests_to(proxy, "typed-spawn")) == 0


def test_a_policy_round_of_1000_commands_costs_a_few_requests(proxy):
    with Client(proxy.url, token="t-player", retry=FAST) as client:
        seed = client.spawn("sim", [Position(x=0.0, y=0.0)])
        client.wait("sim", seed, timeout=30)
        proxy.seen.clear()
        proxy.faults.append(Fault("/commands:batch"))  # the round's answer is lost once: retried with its key
        round_ = [Update(world_id="sim", entity_id=seed.entity_id, components=[Position(x=float(i), y=1.0)])
                  for i in range(ROUND)]  # fmt: skip
        tick = client.world("sim").tick_head + 1  # a tick of its own: the quota is 1,000 commands per tick
        accepted = client.defer_batch(round_, options=DurableOptions(tick=tick), idempotency_key="round-1")
        assert [a.command_id for a in accepted] == [f"round-1.{i}" for i in range(ROUND)] and all(a.replayed for a in accepted)
        outcomes = client.wait_all("sim", accepted, timeout=60)
    assert {o.status for o in outcomes} == {CommandStatus.APPLIED}
    batches, polls = requests_to(proxy, "/commands:batch"), requests_to(proxy, "/commands:outcomes")
    assert len(batches) == 2 and len(proxy.seen) == 1 + len(batches) + len(polls)  # and the world read
    assert len(polls) < 50, f"{len(polls)} outcome reads for one round"  # one per poll, never one per command


def test_wait_all_names_what_it_cannot_find_and_what_did_not_settle(server):
    with Client(server, token="t-player") as client:
        later = client.despawn("sim", 1, options=DurableOptions(tick=10**9))
        with pytest.raises(WaitTimeoutError) as timeout:
            client.wait_all("sim", [later, later.command_id], timeout=0.3)
        assert [c.command_id for c in timeout.value.commands] == [later.command_id]
        assert timeout.value.command.status is CommandStatus.PENDING
        with pytest.raises(CommandNotFoundError):
            client.wait_all("sim", [later.command_id, "never-submitted"], timeout=5)
    with Client(server, token="t-player2") as other, pytest.raises(CommandNotFoundError):
        other.wait_all("sim", [later.command_id], timeout=5)  # another principal's: as if it did not exist


def test_a_batch_takes_items_with_their_own_options_and_ids_and_one_world(server):
    with Client(server, token="t-player") as client:
        items = [DeferredItem(op=Despawn(world_id="sim", entity_id=5), options=DurableOptions(tick=10**8, priority=3),
                              command_id="own-id"), Despawn(world_id="sim", entity_id=6)]  # fmt: skip
        first, second = client.defer_batch(items, options=DurableOptions(tick=10**8), idempotency_key="mixed")
        assert (first.command_id, second.command_id) == ("own-id", "mixed.1")
        assert client.command("sim", "own-id").priority == 3
        with pytest.raises(ValueError, match="one world"):
            client.defer_batch([Despawn(world_id="sim", entity_id=5), Despawn(world_id="elsewhere", entity_id=5)])
        with pytest.raises(ValueError):
            client.wait("elsewhere", first)  # an answer names its world


async def test_state_filtered_and_paged_while_the_world_ticks(server):
    async with AsyncClient(server, token="t-player") as client:
        spawns = [Spawn(world_id="sim", components=[Position(x=float(i), y=0.0)] + ([Velocity(dx=1.0, dy=0.0)] if i % 2 else []))
                  for i in range(40)]  # fmt: skip
        await client.wait_all("sim", await client.defer_batch(spawns), timeout=30)
        everything = await client.state("sim")
        ids = [e.entity_id for e in everything.entities]
        assert ids == sorted(ids) and len(ids) >= 40
        with_velocity = await client.state("sim", components=[Velocity, Position])
        assert with_velocity.entities and all(Velocity in e and Position in e for e in with_velocity.entities)
        assert {e.entity_id for e in with_velocity.entities} < set(ids)
        paged = [e async for e in client.iter_state("sim", components=["Position"], page_size=7)]
        # entities are only added meanwhile (the world ticks: positions move, no entity goes)
        assert [e.entity_id for e in paged][: len(ids)] == [e.entity_id for e in everything.entities if Position in e]
        assert all([c.name for c in e.components] == ["Position"] for e in paged)
        only = await client.state("sim", entity_ids=ids[:3], components=[Position])
        assert [e.entity_id for e in only.entities] == ids[:3]
        assert all([c.name for c in e.components] == ["Position"] for e in only.entities)
        with pytest.raises(UnknownComponentError):
            await client.state("sim", components=[Health])  # no Health was ever recorded in this world
        with pytest.raises(ValueError):
            await client.state("sim", entity_ids=[])


def test_state_at_a_tick_reads_the_world_as_it_was_then(server):
    with Client(server, token="t-player") as client:
        spawned = client.spawn("sim", [Position(x=1.0, y=1.0)], command_id="then-spawn")
        born = client.wait("sim", spawned, timeout=30).applied_tick
        moved = client.wait("sim", client.update("sim", spawned.entity_id, [Position(x=2.0, y=2.0)]), timeout=30).applied_tick
        assert born is not None and moved is not None and moved > born
        at = {tick: client.state("sim", entity_ids=[spawned.entity_id], tick=tick) for tick in (born - 1, born, moved)}
        assert at[born - 1].entities == [] and at[born].tick_head == born
        assert [e[Position] for tick in (born, moved) for e in at[tick].entities] == [Position(x=1.0, y=1.0), Position(x=2.0, y=2.0)]
        paged = list(client.iter_state("sim", components=[Position], page_size=3, tick=born))
        assert [e.entity_id for e in paged] == [e.entity_id for e in client.state("sim", components=[Position], tick=born).entities]
        with pytest.raises(TickNotRetainedError):
            client.state("sim", tick=10**12)


def test_a_fork_whose_answer_was_lost_is_made_once(proxy):
    proxy.faults.append(Fault(":fork"))
    with Client(proxy.url, token="t-admin", retry=FAST) as admin:
        head = admin.world("sim").tick_head
        fork = admin.fork_world("sim", head, "what if")
        assert (fork.tick_head, fork.name) == (head, "what if")
        assert [w.world_id for w in admin.worlds() if w.name == "what if"] == [fork.world_id]  # the retry made no second
        assert len(requests_to(proxy, ":fork")) == 2
        source = [(e.entity_id, e.components) for e in admin.state("sim", tick=head).entities]
        assert [(e.entity_id, e.components) for e in admin.state(fork.world_id, tick=head).entities] == source


async def test_the_async_client_reads_a_tick_too(server):
    async with AsyncClient(server, token="t-viewer") as client:
        head = (await client.state("sim")).tick_head
        assert (await client.state("sim", tick=head)).tick_head == head
        assert [e.entity_id async for e in client.iter_state("sim", tick=head)] == [
            e.entity_id for e in (await client.state("sim", tick=head)).entities
        ]
        with pytest.raises(TickNotRetainedError):
            await client.state("sim", tick=10**12)


def test_wait_all_reads_a_page_of_1000_per_request_and_only_the_unsettled():
    """Against a scripted server: 2,500 commands, each settled on its id's third read; every
    request is counted."""
    reads: dict[str, int] = {}
    bodies: list[list[str]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        ids = json.loads(request.content)["command_ids"]
        bodies.append(ids)
        commands = []
        for n, command_id in enumerate(ids):
            reads[command_id] = reads.get(command_id, 0) + 1
            status = "APPLIED" if reads[command_id] >= 3 else "PENDING"
            commands.append({"command_id": command_id, "world_id": "w", "sequence": n + 1, "operation": "despawn",
                             "status": status, "scheduled_tick": 0, "priority": 0, "attempts": 0, "max_attempts": 3,
                             "applied_tick": 0 if status == "APPLIED" else None, "last_error": None, "principal": "p",
                             "origin": "gateway", "reserved_entity_id": None, "created_at": 0, "updated_at": 0})  # fmt: skip
        return httpx.Response(200, json={"commands": commands, "missing": []})

    wanted = [f"c{n}" for n in range(2_500)]
    with Client("http://scripted", token="t", transport=httpx.MockTransport(answer)) as client:
        outcomes = client.wait_all("w", wanted, poll_s=0.001, timeout=30)
    assert [o.command_id for o in outcomes] == wanted and {o.status for o in outcomes} == {CommandStatus.APPLIED}
    assert [len(ids) for ids in bodies] == [1_000, 1_000, 500] * 3  # three reads of three pages
    assert all(count == 3 for count in reads.values())


def test_an_entity_state_reads_its_components_by_class():
    fingerprint = Position.component_fingerprint()
    as_rows = {"name": "Position", "fingerprint": fingerprint, "rows": [{"x": 0.0, "y": 0.0}, {"x": 1.5, "y": -0.0}]}
    as_columns = {"name": "Position", "fingerprint": fingerprint,
                  "columns": {"x": {"f8": base64.b64encode(struct.pack("<2d", 0.0, 1.5)).decode()},
                              "y": {"f8": base64.b64encode(struct.pack("<2d", 0.0, -0.0)).decode()}}}  # fmt: skip
    assert _Column(as_columns).data(1) == _Column(as_rows).data(1) and math.copysign(1, _Column(as_columns).data(1)["y"]) == -1
    entity = EntityState(7, [_Column(as_columns)], 1)
    assert entity.get(Position) == Position(x=1.5, y=-0.0) and entity[Position].y == -0.0
    assert entity.get(Velocity) is None and Velocity not in entity and Position in entity
    with pytest.raises(KeyError):
        entity[Health]
    assert [c.key for c in entity.components] == [f"Position:{fingerprint}"]
