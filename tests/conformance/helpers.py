from __future__ import annotations

from archetype import Permanent
from archetype.commands import CommandStatus, DurableOptions
from archetype.world import ComponentValue, Spawn, Step
from tests.component_modules import flaky
from tests.component_modules.flaky import Probe


def probe(world_id: str, label: str) -> Spawn:
    """A spawn whose materialization fails on demand (see `fail_next`); built from the wire form so
    that construction does not run the component's validation (admission does, but the Probe
    fails only outside the admission context)."""
    value = ComponentValue(name="Probe", fingerprint=Probe.component_fingerprint(), data={"label": label})
    return Spawn(world_id=world_id, components=[value])


def fail_next(label: str, *exceptions: BaseException) -> None:
    flaky.FAILURES[label] = list(exceptions)


def at(tick: int, **options) -> DurableOptions:
    return DurableOptions(tick=tick, **options)


async def statuses(rt, world_id: str) -> dict[str, CommandStatus]:
    return {r.command_id: r.status for r in await rt.scheduler.history(world_id, limit=10_000)}


async def records(rt, world_id: str) -> dict:
    return {r.command_id: r for r in await rt.scheduler.history(world_id, limit=10_000)}


async def outbox(authority, world_id: str) -> list[dict]:
    return await authority.read_outbox(world_id=world_id, limit=10_000)


async def step(rt, world_id: str) -> int:
    return await rt.dispatcher.apply(Step(world_id=world_id))


async def acknowledge_all(authority, world_id: str) -> None:
    """The audit projector took every event so far: retention may prune what they settled."""
    mark = await authority.watermark(world_id=world_id)
    if mark["pending"]:
        await authority.acknowledge_outbox(world_id=world_id, up_to_seq=mark["committed_seq"])


async def manifests(authority, world_id: str) -> list[dict]:
    return await authority.manifests(world_id=world_id, limit=10_000)


async def labels(rt, world_id: str) -> set[str]:
    world = await rt.worlds.get(world_id)
    return {components[0].label for _, components in world.query(Probe)}


def applied(manifest: dict) -> list[str]:
    """The command ids a tick manifest applied, in manifest order."""
    return [s["command_id"] for s in manifest["settlements"] if s["outcome"] == "applied"]


def settled(manifest: dict) -> list[tuple[str, str]]:
    """(command id, outcome) of every settlement of a tick manifest, in manifest order."""
    return [(s["command_id"], s["outcome"]) for s in manifest["settlements"]]


async def failing_processor(rt, world_id: str, times: int) -> list:
    world = await rt.worlds.get(world_id)
    fails = [RuntimeError(f"processor bug #{i}") for i in reversed(range(times))]

    def processor(w, tick, entity_id, components):
        if fails:
            raise fails.pop()

    world.add_processor(processor, flaky.Probe)
    return fails


async def dead_letter(rt, world_id: str, command_id: str, actor=None) -> dict:
    fail_next(command_id, Permanent("poisoned"))
    if actor is None:
        await rt.dispatcher.defer(probe(world_id, command_id), at(0, max_attempts=2, priority=3), command_id=command_id)
    else:
        await rt.dispatcher.defer_as(actor, probe(world_id, command_id), at(0, max_attempts=2, priority=3), command_id=command_id)
    await step(rt, world_id)
    return await rt.authority.command(world_id, command_id, actor.principal if actor else "")
