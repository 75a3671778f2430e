"""What the crash test's processes share: the components, the simulated outage, and the feed plan.

The plan is a pure function of the seed, so the feeder can replay it from the start after every
restart (fixed command ids) and the test can tell exactly which commands must be in the ledger.
Entity targets of later commands are named by the spawn command that reserved them; the feeder
resolves them from the reservations, which replays return unchanged.

Dead frequencies are kept rare: each retryable failure stops that tick's drain.

`Poison` is the component of tests/crash/test_guarantees.py's poison command: materializing it
kills the runner process (SIGKILL, uncatchable, like a segfault) while the flag file named by
$CRASH_POISON_FLAG exists.
"""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path
from typing import Any

from pydantic import ValidationInfo, field_validator

from archetype.world import Component
from archetype.world.components import admission_context

WORLD_ID = "crash-world"
FLAKY_FREQUENCIES = range(1000, 2000)  # the service fails once per runner process, then answers
DEAD_FREQUENCIES = range(2000, 3000)  # the service never answers: retried until dead-lettered
MISSING_ENTITY = 900_000_000  # far beyond any id a run can reserve


class Outage:
    """The simulated calibration service is only consulted while a runner materializes commands."""

    active = False
    failed_once: set[int] = set()


class Tag(Component):
    n: int


class Marker(Component):
    label: str


class Beacon(Component):
    frequency: int

    @field_validator("frequency")
    @classmethod
    def _calibrate(cls, value: int) -> int:
        if Outage.active and (value in DEAD_FREQUENCIES or (value in FLAKY_FREQUENCIES and value not in Outage.failed_once)):
            Outage.failed_once.add(value)
            raise ConnectionError(f"calibration service unavailable for {value}")
        return value


POISON_FLAG_ENV = "CRASH_POISON_FLAG"


class Poison(Component):
    label: str

    @field_validator("label")
    @classmethod
    def _kill_the_runner(cls, value: str, info: ValidationInfo) -> str:
        flag = os.environ.get(POISON_FLAG_ENV)
        if info.context != admission_context() and flag and Path(flag).exists():
            os.kill(os.getpid(), signal.SIGKILL)
        return value


def _components(rng: random.Random, index: int) -> list[dict[str, Any]]:
    components: list[dict[str, Any]] = [{"type": "Tag", "n": index}]
    roll = rng.random()
    if roll < 0.08:
        components.append({"type": "Beacon", "frequency": rng.choice(FLAKY_FREQUENCIES)})
    elif roll < 0.1:
        components.append({"type": "Beacon", "frequency": rng.choice(DEAD_FREQUENCIES)})
    elif roll < 0.3:
        components.append({"type": "Beacon", "frequency": rng.randrange(1, 1000)})
    return components


def _target(rng: random.Random, spawns: list[str]) -> dict[str, Any]:
    if not spawns or rng.random() < 0.1:
        return {"missing": MISSING_ENTITY + rng.randrange(1000)}
    return {"spawn": rng.choice(spawns[-40:])}  # mostly recent entities, so many are alive


def _mutation(rng: random.Random, index: int, spawns: list[str]) -> dict[str, Any]:
    roll = rng.random()
    if roll < 0.2:
        return {"op": "spawn", "components": _components(rng, index)}
    if roll < 0.55:
        return {"op": "update", "target": _target(rng, spawns), "components": _components(rng, index)[:1]
                if rng.random() < 0.7 else [{"type": "Beacon", "frequency": rng.randrange(1, 2200)}]}  # fmt: skip
    if roll < 0.7:
        return {"op": "despawn", "target": _target(rng, spawns)}
    if roll < 0.85:
        return {"op": "add", "target": _target(rng, spawns), "components": [{"type": "Marker", "label": f"m{index}"}]}
    return {"op": "remove", "target": _target(rng, spawns), "types": ["Marker"]}


def _options(rng: random.Random, index: int) -> dict[str, int]:
    return {"tick": index // 4 + rng.randrange(0, 8), "priority": rng.randrange(-2, 3), "max_attempts": rng.randrange(3, 8)}


def feed_plan(seed: int, items: int) -> list[dict[str, Any]]:
    """The feed: single commands, durable spawns with reservations, and batches (all-or-nothing)."""
    rng = random.Random(seed)
    plan: list[dict[str, Any]] = []
    spawns: list[str] = []
    for index in range(items):
        command_id = f"c{index}"
        roll = rng.random()
        if roll < 0.3:
            plan.append({"kind": "spawn", "command_id": command_id, "components": _components(rng, index),
                         "options": _options(rng, index)})  # fmt: skip
            spawns.append(command_id)
        elif roll < 0.75:
            plan.append({"kind": "single", "command_id": command_id, **_mutation(rng, index, spawns),
                         "options": _options(rng, index)})  # fmt: skip
        else:
            members = [
                {"command_id": f"{command_id}.{j}", **_mutation(rng, index, spawns), "options": _options(rng, index)}
                for j in range(rng.randrange(2, 25))
            ]
            plan.append({"kind": "batch", "command_id": command_id, "members": members})
    return plan


def plan_command_ids(plan: list[dict[str, Any]]) -> set[str]:
    ids = set()
    for item in plan:
        if item["kind"] == "batch":
            ids.update(m["command_id"] for m in item["members"])
        else:
            ids.add(item["command_id"])
    return ids


COMPONENT_TYPES: dict[str, type[Component]] = {"Tag": Tag, "Marker": Marker, "Beacon": Beacon, "Poison": Poison}


def build_component(spec: dict[str, Any]) -> Component:
    fields = {k: v for k, v in spec.items() if k != "type"}
    return COMPONENT_TYPES[spec["type"]](**fields)
