"""Scenarios the Pyodide tests run inside the real interpreter (through tests/pyodide/host.py).

The functions of the first part use only the project's Python, so a test runs each of them on
both interpreters and compares the JSON answers byte for byte; the FFI part touches `js` and
`pyodide` and runs on Pyodide only.
"""

from __future__ import annotations

import math
import tempfile
from typing import Any

from tests.component_modules.alpha import Health, Position
from tests.support.publications import record_publications

# -- the core, on either interpreter -----------------------------------------------------------


def canonical_samples() -> list[Any]:
    """Canonical JSON and digests of awkward values, and the refusals of non-canonical ones."""
    from archetype.canonical import NonCanonicalValueError, canonical_json, digest

    values = [
        {"b": 1, "a": [True, None, "é☃\U0001f600"], "c": {"z": -0.0, "y": 0.1, "x": 1e300}},
        [2**53 - 1, -(2**53 - 1), 5e-324, 1.0, 123456789.125],
        {"nested": [[[{"deep": "\u0000\u001f\"\\"}]]]},
        2**53,
        math.nan,
        {1: "int key"},
        (1, 2),
    ]
    answers: list[Any] = []
    for value in values:
        try:
            answers.append([canonical_json(value), digest(value)])
        except NonCanonicalValueError as exc:
            answers.append(["refused", str(exc)])
    return answers


def components_and_registry() -> dict[str, Any]:
    """Component identities (schema fingerprints), wire values and the operation registry."""
    from archetype.commands.families import default_registry
    from archetype.world import ComponentTypeRef, ComponentValue, Spawn

    spawn = Spawn.from_components(world_id="w-1", components=[Position(x=1.5, y=-0.0), Health(hp=3)])
    return {
        "refs": [ComponentTypeRef.from_type(t).model_dump(mode="json") for t in (Position, Health)],
        "value": ComponentValue.from_component(Position(x=0.1, y=2**40)).model_dump(mode="json"),
        "spawn": spawn.model_dump(mode="json"),
        "operations": sorted(str(spec.name) for spec in default_registry()),
    }


async def ledger_cycle() -> dict[str, Any]:
    """The embedded authority on this interpreter's sqlite3: admit (and a replay) -> step -> APPLIED."""
    from archetype.commands import DurableOptions
    from archetype.commands.port import ManualClock
    from archetype.runtime import Runtime
    from archetype.world import CreateWorld, QueryComponents, Spawn, Step, Update
    from local_catalog import open_local_authority

    with tempfile.TemporaryDirectory() as directory:
        rt = Runtime(open_local_authority(directory, clock=ManualClock()), owner="runner", lease_ms=1_000)
        try:
            world_id = await rt.dispatcher.apply(CreateWorld(name="arena", world_id="w-arena"))
            spawn = Spawn.from_components(world_id=world_id, components=[Position(x=0, y=0), Health(hp=10)])
            first = await rt.dispatcher.defer_spawn(spawn, DurableOptions(tick=0), command_id="spawn-1")
            again = await rt.dispatcher.defer_spawn(spawn, DurableOptions(tick=0), command_id="spawn-1")
            await rt.dispatcher.defer(
                Update(world_id=world_id, entity_id=first.entity_id, components=[Health(hp=7)]),
                DurableOptions(tick=1), command_id="hurt",
            )  # fmt: skip
            applied = [await rt.dispatcher.apply(Step(world_id=world_id)) for _ in range(2)]
            history = await rt.scheduler.history(world_id)
            rows = await rt.dispatcher.apply(QueryComponents(world_id=world_id, component_types=[Health]))
        finally:
            await rt.close()
    return {
        "entity": first.entity_id,
        "replayed": [first.command.replayed, again.command.replayed],
        "applied_per_step": applied,
        "history": [(r.command_id, str(r.status.value), r.attempts, r.applied_tick) for r in history],
        "health": repr(rows),
    }


async def columnar_state() -> dict[str, Any]:
    """A world of numeric and data components published as columnar chunks (a snapshot, then a
    delta with a despawn) on this interpreter's sqlite3, and the state `load_state` answers."""
    from archetype.commands.port import ManualClock
    from archetype.runtime import Runtime
    from archetype.world import CreateWorld
    from local_catalog import open_local_authority
    from tests.component_modules.mixed import Tag

    with tempfile.TemporaryDirectory() as directory:
        rt = Runtime(open_local_authority(directory, clock=ManualClock()), owner="runner", lease_ms=1_000)
        try:
            world_id = await rt.dispatcher.apply(CreateWorld(name="columns", world_id="w-columns"))
            world = await rt.worlds.get(world_id)
            sent = record_publications(world)
            await world.ensure_entity_ids(20)
            async with world.lock:
                ids = world.atomically(lambda: [world.spawn(
                    [Position(x=i / 7, y=-0.0)] + ([Health(hp=2**53 - 1 - i)] if i % 2 else [])
                    + ([Tag(label=f"t{i}\u00e9", weight=1e-300 * i)] if i % 3 == 0 else [])
                ) for i in range(12)])  # fmt: skip
            await world.step()
            async with world.lock:
                world.atomically(lambda: (world.despawn(ids[4]), world.update(ids[3], [Health(hp=-3)])))
            await world.step()
            state = await rt.authority.load_state(world_id=world_id, after_entity_id=0, limit=100)
        finally:
            await rt.close()
    return {"chunks": [chunk for prepared in sent for chunk in prepared.chunks], "entities": state["entities"]}


async def column_delta_state() -> dict[str, Any]:
    """A world whose batch processor overrides its Position column (an ObjectColumn: no numpy
    here) publishes column deltas (partial sections, ids as runs) over a snapshot, on this
    interpreter's sqlite3; what `load_state` answers after each tick."""
    from archetype.commands.port import ManualClock
    from archetype.runtime import Runtime
    from archetype.world import CreateWorld
    from archetype.world.components import type_key
    from archetype.world.state import ObjectColumn
    from local_catalog import open_local_authority

    def drift(world: Any, tick: int) -> None:
        key = type_key(Position)
        for table in world.state.tables(frozenset([key])):
            column = world.state.column(table, key)
            moved = [column.value(row) for row in range(len(table))]
            world.state.override(table, key, ObjectColumn([Position(x=p.x + 0.5, y=-p.y) for p in moved]))

    loaded = []
    with tempfile.TemporaryDirectory() as directory:
        rt = Runtime(open_local_authority(directory, clock=ManualClock()), owner="runner", lease_ms=1_000)
        try:
            world_id = await rt.dispatcher.apply(CreateWorld(name="deltas", world_id="w-deltas"))
            world = await rt.worlds.get(world_id)
            sent = record_publications(world)
            await world.ensure_entity_ids(20)
            async with world.lock:
                world.atomically(lambda: [world.spawn([Position(x=i / 7, y=-0.0), Health(hp=i)]) for i in range(12)])
            await world.step()
            world.add_batch_processor(drift, Position)
            for _ in range(3):
                await world.step()
                loaded.append((await rt.authority.load_state(world_id=world_id, after_entity_id=0, limit=100))["entities"])
        finally:
            await rt.close()
    return {"chunks": [chunk for prepared in sent for chunk in prepared.chunks], "states": loaded}


# -- Pyodide only ------------------------------------------------------------------------------


def interpreter() -> dict[str, Any]:
    import sys

    import pydantic_core._pydantic_core as native

    return {"platform": sys.platform, "version": list(sys.version_info[:3]), "pydantic_core": native.__file__}


def _current():
    from tests.pyodide import harness

    return harness.current


async def rpc_argument_shapes(world_id: str) -> dict[str, Any]:
    """The object's RPC methods called with each shape an argument can reach them in: a JS object
    (JsProxy), the dict the SDK's python_from_rpc makes, JS undefined and JS null, and none at all."""
    import json

    import js
    from pyodide.ffi import jsnull

    obj = _current().namespace.instance(world_id)
    created = await obj.create_world(js.JSON.parse(json.dumps({"name": "ffi", "world_id": world_id})))
    info = await obj.world_info({"world_id": world_id})
    missing = [await obj.world_info(value) for value in (js.undefined, jsnull, None)] + [await obj.world_info()]
    return {
        "created": created,
        "info": info,
        "missing": [(answer["ok"], answer["error"]["code"]) for answer in missing],
        "types": [type(info["result"][key]).__name__ for key in ("tick_head", "created_at", "name")],
    }


def _storage_rows_as_one_binding(self, sql, params=()):
    # the mistake: the parameter list handed over as ONE binding instead of spread into exec()
    return [tuple(row) for row in self._sql.exec(sql, params).raw().toArray()]


def _model_instead_of_json(result):
    # the mistake: a pydantic model where the RPC result must be plain JSON data
    from pydantic import BaseModel

    class Reply(BaseModel):
        ok: bool
        result: Any

    return Reply(ok=True, result=result)


# name -> (module, attribute, replacement); None patches nothing and hands the authority the raw
# JS namespace instead of the SDK-wrapped env binding, so its Python dict of arguments reaches the
# JS stub as a PyProxy (the mistake of passing a Python dict where the runtime expects a JS object).
MISTAKES = {
    "sql_bindings_as_one_list": ("durable_world.port", "DurableObjectSqlPort.execute", _storage_rows_as_one_binding),
    "rpc_result_is_a_model": ("durable_world.world_object", "success", _model_instead_of_json),
    "python_dict_to_a_js_stub": None,
}


async def with_mistake(mistake: str | None, world_id: str) -> dict[str, Any]:
    """Run the object's alarm (audit delivery to the JS Queue) and one ledger call from the Worker
    through the namespace stub, with one FFI mistake patched in (or none): what reached the queue,
    what the alarm logged, what the call raised. The harness must make every mistake visible."""
    import importlib
    import logging
    from unittest import mock

    import workers_runtime

    from durable_world import DurableObjectAuthority
    from tests.pyodide import harness
    from worker.entry import Default

    errors: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            errors.append(f"{record.exc_info[1]!r}" if record.exc_info else record.getMessage())

    patches = []
    if MISTAKES.get(mistake) is not None:
        module, attribute, replacement = MISTAKES[mistake]
        owner_name, _, name = attribute.rpartition(".")
        owner = importlib.import_module(module)
        patches.append(mock.patch.object(getattr(owner, owner_name) if owner_name else owner, name, replacement))
    deployment = _current()
    worker = Default(workers_runtime.ExecutionContext.new(), deployment.env)  # its env is the SDK's wrapper
    namespace = deployment.namespace if mistake == "python_dict_to_a_js_stub" else worker.env.WORLDS
    logger = logging.getLogger("durable_world.world_object")
    handler = Capture()
    logger.addHandler(handler)
    call_error = None
    with mock.patch.object(logger, "propagate", False):
        for patch in patches:
            patch.start()
        try:
            harness.evict(world_id)  # a fresh instance, built with the mistake in place
            try:
                await harness.run_alarm(world_id)
            except Exception as exc:  # the alarm handler itself failed (the runtime would retry it)
                errors.append(f"{type(exc).__name__}: {exc}")
            try:
                await DurableObjectAuthority(namespace).history(world_id)
            except Exception as exc:
                call_error = f"{type(exc).__name__}: {exc}"
        finally:
            for patch in patches:
                patch.stop()
            logger.removeHandler(handler)
    return {
        "sent": harness.queue_messages(),
        "alarm_errors": errors,
        "alarm_rearmed": harness.alarm_time(world_id) is not None,
        "call_error": call_error,
    }


def storage_values(world_id: str) -> dict[str, Any]:
    """Values through the object's SqlPort and the JS `ctx.storage.sql`: numbers come back as JS
    doubles (integral ones as Python ints), NULL as None, inside and outside transactionSync."""
    obj = _current().namespace.instance(world_id)
    port = obj.ledger._port
    query = "SELECT 1, 2.5, ?, ?, NULL, 'text', -0.0"
    row = port.execute(query, [2**53 - 1, None])[0]
    in_transaction = port.transaction(lambda: port.execute(query, [2**53 - 1, None]))[0]
    try:
        port.transaction(lambda: (port.execute("CREATE TABLE scratch (x)"), 1 / 0))
    except ZeroDivisionError:
        rolled_back = port.execute("SELECT count(*) FROM sqlite_master WHERE name = 'scratch'")[0][0] == 0
    return {
        "row": [repr(value) for value in row],
        "same_in_transaction": in_transaction == row,
        "rolled_back": rolled_back,
    }
