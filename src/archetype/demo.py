"""The main job of the README: one world, durable commands of every outcome, printed as they
settle, then projected into the local Iceberg audit table and read back with GetAuditHistory."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import cast

import click
from pydantic import field_validator

from archetype.commands import DurableOptions, GetAuditHistory
from archetype.runtime import Runtime
from archetype.world import AsyncWorld, Component, CreateWorld, Despawn, QueryComponents, Spawn, Step, Update


class Position(Component):
    x: float
    y: float


class Velocity(Component):
    dx: float
    dy: float


_OUTAGES: dict[float, int] = {}  # frequency -> calls the calibration service still fails


class Beacon(Component):
    """A component whose validation asks a (simulated) calibration service that may be down."""

    frequency: float

    @field_validator("frequency")
    @classmethod
    def _calibrate(cls, value: float) -> float:
        left = _OUTAGES.get(value, 0)
        if left:
            _OUTAGES[value] = left - 1
            raise ConnectionError(f"calibration service unavailable for {value} Hz")
        return value


def _move(world: AsyncWorld, tick: int, entity_id: int, components: tuple[Component, ...]) -> None:
    """A processor: Position += Velocity every tick."""
    position, velocity = cast(tuple[Position, Velocity], components)  # it is added for (Position, Velocity)
    world.update(entity_id, [position.model_copy(update={"x": position.x + velocity.dx, "y": position.y + velocity.dy})])


async def run_demo(data: Path | None, ticks: int) -> None:
    data = data or Path(tempfile.mkdtemp(prefix="archetype-demo-"))
    click.echo(f"storage: {data}")
    async with await Runtime.open_local(data) as rt:
        world_id = await rt.dispatcher.apply(CreateWorld(name="demo"))
        ship = Spawn.from_components(world_id=world_id, components=[Position(x=0, y=0), Velocity(dx=1, dy=0.5)])
        spawned = await rt.dispatcher.defer_spawn(ship, DurableOptions(tick=0), command_id="spawn-ship")
        replay = await rt.dispatcher.defer_spawn(ship, DurableOptions(tick=0), command_id="spawn-ship")
        same = replay.command == spawned.command.model_copy(update={"replayed": True})
        click.echo(f"spawn-ship reserved entity {spawned.entity_id}; replay returns the same identity: {same}")
        entity = spawned.entity_id
        await rt.dispatcher.defer(Update(world_id=world_id, entity_id=entity, components=[Position(x=10, y=10)]),
                                  DurableOptions(tick=1), command_id="teleport")  # fmt: skip
        await rt.dispatcher.defer(Despawn(world_id=world_id, entity_id=9999), DurableOptions(tick=1), command_id="despawn-ghost")
        await rt.dispatcher.defer(Spawn(world_id=world_id, components=[Beacon(frequency=433.0)]),
                                  DurableOptions(tick=2, max_attempts=3), command_id="beacon-flaky")  # fmt: skip
        await rt.dispatcher.defer(Spawn(world_id=world_id, components=[Beacon(frequency=868.0)]),
                                  DurableOptions(tick=2, max_attempts=2), command_id="beacon-broken")  # fmt: skip
        _OUTAGES.update({433.0: 1, 868.0: 99})  # 433 Hz recovers after one outage; 868 Hz never does
        world = await rt.worlds.get(world_id)
        world.add_processor(_move, Position, Velocity)
        for _ in range(ticks):
            applied = await rt.dispatcher.apply(Step(world_id=world_id))
            positions = await rt.dispatcher.apply(QueryComponents(world_id=world_id, component_types=[Position]))
            click.echo(f"tick {world.tick}: applied {applied}; positions {[(e, c[0].x, c[0].y) for e, c in positions]}")

        click.echo("\nledger:")
        for record in await rt.scheduler.history(world_id):
            click.echo(
                f"  #{record.sequence} {record.command_id:<14} {record.operation:<15} tick {record.scheduled_tick} "
                f"{record.status.value:<11} attempts {record.attempts}/{record.max_attempts} "
                f"applied_tick={record.applied_tick} {record.last_error or ''}"
            )
        click.echo("\noutbox:")
        for event in await rt.authority.read_outbox(world_id=world_id, limit=1000):
            click.echo(f"  {event['event_id']:<40} {event['command_id']:<14} {event['event_type']:<16} -> {event['status']}")

        projected = await rt.audit.project_once()
        click.echo(f"\naudit: projected {sum(projected.values())} events into the Iceberg table under {data / 'audit'}")
        for event in await rt.dispatcher.apply(GetAuditHistory(world_id=world_id, command_id="beacon-broken")):
            click.echo(f"  tick {event.tick} {event.command_id:<14} {event.event_type:<16} -> {event.status.value}")
        lag = await rt.audit.lag()
        click.echo(f"  outbox left to project: {sum(w['pending'] for w in lag)}")
