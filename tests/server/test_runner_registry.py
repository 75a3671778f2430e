"""A `WorldRunner` among cooperating runners follows the ledger's runner registry (docs/ledger.md,
*The runner registry*): the live registrations are what `host_of` splits the worlds among, and
when a runner leaves the list its idle worlds (no command, no processor) move to the survivors
whose share they became, read through `hosted_worlds` (that runner's worlds only)."""

from __future__ import annotations

import asyncio

from archetype.commands.port import ManualClock
from archetype.metrics import Metrics
from archetype.runtime import Runtime
from archetype.server import RunnerRegistry, WorldRunner, host_of
from archetype.world import CreateWorld
from local_catalog import open_local_authority

LEASE_MS = 5_000


async def test_a_dead_runners_idle_worlds_move_to_their_new_hosts(tmp_path):
    clock = ManualClock()
    catalog = open_local_authority(tmp_path, clock=clock)
    calls: list[str] = []
    rpc = catalog.rpc

    async def counted(method, arguments):
        calls.append(method)
        return await rpc(method, arguments)

    catalog.rpc = counted  # type: ignore[method-assign]
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

        assert calls.count("hosted_worlds") == 1 and "list_worlds" not in calls  # its worlds only, no walk
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
