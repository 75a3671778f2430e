"""A `WorldRunner` among cooperating runners follows the ledger's runner registry (docs/ledger.md,
*The runner registry*): the live registrations are what `host_of` splits the worlds among, and
when the list changes the idle worlds (no command, no processor) move to the runners whose share
they became, read through `hosted_worlds` (the other runners' worlds only), never loaded: a dead
runner's once their leases expired, a live one's once it gave them back."""

from __future__ import annotations

import asyncio

from archetype.commands.port import ManualClock
from archetype.metrics import Metrics
from archetype.runner_registry import RunnerRegistry, host_of
from archetype.runtime import Runtime
from archetype.world import CreateWorld
from archetype.world_runner import WorldRunner
from local_catalog import open_local_authority

LEASE_MS = 5_000


def counting_catalog(tmp_path, clock):
    """A local catalog that lists the ledger methods called on it, in order."""
    catalog = open_local_authority(tmp_path, clock=clock)
    calls: list[str] = []
    rpc = catalog.rpc

    async def counted(method, arguments):
        calls.append(method)
        return await rpc(method, arguments)

    catalog.rpc = counted  # type: ignore[method-assign]
    return catalog, calls


async def test_a_dead_runners_idle_worlds_move_to_their_new_hosts(tmp_path):
    clock = ManualClock()
    catalog, calls = counting_catalog(tmp_path, clock)
    rt = Runtime(catalog, owner="runner-a", audit=None, world_lease_ms=LEASE_MS)
    try:
        worlds = [f"idle-{i}" for i in range(12)]
        for world_id in worlds:
            await rt.dispatcher.apply(CreateWorld(name=world_id, world_id=world_id))
        dead = [w for w in worlds if host_of(w, ["runner-a", "runner-b", "runner-c"]) == "runner-b"]
        kept = [w for w in worlds if host_of(w, ["runner-a", "runner-b", "runner-c"]) == "runner-c"]
        assert dead and kept
        epochs = {w: (await catalog.claim_world(w, host_of(w, ["runner-a", "runner-b", "runner-c"]), LEASE_MS))["writer_epoch"]
                  for w in dead + kept}  # fmt: skip
        registry = RunnerRegistry(catalog, "runner-a", "host-a", LEASE_MS)
        await registry.join()
        await catalog.register_runner("runner-b", "host-b", LEASE_MS)
        await catalog.register_runner("runner-c", "host-c", LEASE_MS)
        runner = WorldRunner(rt, catalog, Metrics(), tick_rate=10, registry=registry, clock=clock)
        await runner.follow_runners()
        assert runner.live == ["runner-a", "runner-b", "runner-c"]

        clock.advance(LEASE_MS)  # runner-b stopped renewing: its registration and world leases expired
        await catalog.register_runner("runner-a", "host-a", LEASE_MS)
        await catalog.register_runner("runner-c", "host-c", LEASE_MS)
        calls.clear()
        await runner.follow_runners()
        assert runner.live == ["runner-a", "runner-c"]
        await asyncio.gather(*runner._adopting.values())

        assert calls.count("hosted_worlds") <= 2 and "list_worlds" not in calls  # the other runners' worlds only, no walk
        assert "load_state" not in calls  # moved, not loaded
        for world_id in dead:
            info = await catalog.world_info(world_id)
            survivor = host_of(world_id, ["runner-a", "runner-c"])
            if survivor == "runner-a":  # moved: its lease names runner-a, given back (free for its next command)
                assert (info["host_owner"], info["writer_epoch"]) == ("runner-a", epochs[world_id] + 1), info
                assert info["host_expires_at"] <= clock.now_ms()
            else:  # runner-c's share: runner-c moves it, not runner-a
                assert (info["host_owner"], info["writer_epoch"]) == ("runner-b", epochs[world_id]), info
        assert any(host_of(w, ["runner-a", "runner-c"]) == "runner-a" for w in dead)
        for world_id in kept:  # a live runner's worlds are not touched
            info = await catalog.world_info(world_id)
            assert (info["host_owner"], info["writer_epoch"]) == ("runner-c", epochs[world_id]), info
        assert not runner._adopting
    finally:
        await rt.close()


async def test_a_joining_runner_takes_its_share_of_a_live_runners_idle_worlds_at_once(tmp_path):
    clock = ManualClock()
    catalog, calls = counting_catalog(tmp_path, clock)
    rt_a = Runtime(catalog, owner="runner-a", audit=None, world_lease_ms=LEASE_MS)
    rt_b = Runtime(catalog, owner="runner-b", audit=None, world_lease_ms=LEASE_MS)
    try:
        worlds = [f"idle-{i}" for i in range(24)]
        for world_id in worlds:
            await rt_a.dispatcher.apply(CreateWorld(name=world_id, world_id=world_id))
        both = ["runner-a", "runner-b"]
        loaded, given_back, never = worlds[:10], worlds[10:-1], worlds[-1]  # runner-a hosts them, hosted once, never claimed
        shares = {w: host_of(w, both) for w in worlds}
        assert {shares[w] for w in loaded} == {shares[w] for w in given_back} == set(both)
        registry_a = RunnerRegistry(catalog, "runner-a", "host-a", LEASE_MS)
        await registry_a.join()
        runner_a = WorldRunner(rt_a, catalog, Metrics(), tick_rate=10, registry=registry_a, clock=clock)
        await runner_a.follow_runners()
        for world_id in loaded:
            await rt_a.worlds.get(world_id)
        for world_id in given_back:
            await catalog.release_world(world_id, "runner-a", (await catalog.claim_world(world_id, "runner-a", LEASE_MS))["writer_epoch"])
        epochs = {w: (await catalog.world_info(w))["writer_epoch"] for w in worlds}
        calls.clear()

        registry_b = RunnerRegistry(catalog, "runner-b", "host-b", LEASE_MS)
        await registry_b.join()
        runner_b = WorldRunner(rt_b, catalog, Metrics(), tick_rate=10, registry=registry_b, clock=clock)
        await runner_b.follow_runners()  # runner-b joins: it adopts its share of runner-a's free leases
        assert runner_b.live == both
        await asyncio.wait_for(asyncio.gather(*runner_b._adopting.values()), timeout=60)  # no lease had to expire

        async def hosts(world_id: str) -> tuple[str | None, int]:
            info = await catalog.world_info(world_id)
            return info["host_owner"], info["writer_epoch"] - epochs[world_id]

        for world_id in given_back:  # moved at once (one bump), or runner-a's share: untouched
            assert await hosts(world_id) == ((shares[world_id], 1) if shares[world_id] == "runner-b" else ("runner-a", 0))
        for world_id in loaded:  # runner-a hosts these: its own to hand over
            assert await hosts(world_id) == ("runner-a", 0)

        await runner_a.follow_runners()  # runner-a sees runner-b: it hands over what became its share
        await asyncio.wait_for(asyncio.gather(*runner_a._handing_over.values()), timeout=60)
        for world_id in loaded:
            expected = ("runner-b", 1) if shares[world_id] == "runner-b" else ("runner-a", 0)
            assert await hosts(world_id) == expected, world_id
        assert rt_a.worlds.loaded == sorted(w for w in loaded if shares[w] == "runner-a")
        assert (await catalog.world_info(never))["host_owner"] is None  # its first claim bumps the epoch anyway
        assert "load_state" not in calls and "list_worlds" not in calls  # moved, not loaded; no walk
        assert calls.count("hosted_worlds") == 2  # each runner read the other's worlds once
        assert not rt_b.worlds.loaded

        for world_id in (w for w in worlds if shares[w] == "runner-b" and w != never):  # their next load: no bump
            assert (await rt_b.worlds.get(world_id)).writer_epoch == epochs[world_id] + 1
    finally:
        await rt_a.close()
        await rt_b.close()


async def test_a_runner_whose_id_was_taken_over_steps_nothing_until_it_has_it_back(tmp_path):
    clock = ManualClock()
    catalog = open_local_authority(tmp_path, clock=clock)
    try:
        registry = RunnerRegistry(catalog, "runner-a", "host-a", LEASE_MS)
        await registry.join()
        clock.advance(LEASE_MS)  # it paused past its registration: another process took the id
        await catalog.register_runner("runner-a", "host-z", LEASE_MS)
        await registry.beat()
        assert not registry.held and await registry.live() == []  # world leases cannot tell the two apart
        clock.advance(LEASE_MS)  # the other one is gone: the id is this one's again
        await registry.beat()
        assert registry.held and await registry.live() == ["runner-a"]
    finally:
        await catalog.close()
