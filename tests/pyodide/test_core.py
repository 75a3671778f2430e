"""The shared core on the real interpreter: each scenario (tests/pyodide/scenarios.py) runs in
Pyodide and in this CPython, and the two answers must be identical: the edge and the runners
compute the same canonical texts, digests, schema fingerprints and ledger records."""

from __future__ import annotations

import inspect
import json

import pytest

from tests.pyodide import scenarios

pytestmark = pytest.mark.timeout(120)


async def on_both(pyodide, name: str):
    here = getattr(scenarios, name)()
    if inspect.isawaitable(here):
        here = await here
    there = pyodide.call(f"tests.pyodide.scenarios:{name}")
    assert there == json.loads(json.dumps(here))
    return there


def test_the_interpreter_is_the_python_workers_one(pyodide):
    version = pyodide.call("tests.pyodide.scenarios:interpreter")
    assert version["platform"] == "emscripten" and version["version"][:2] == [3, 14]
    # pydantic's compiled core is the WebAssembly build from the locked wheel
    assert version["pydantic_core"].endswith("_pydantic_core.cpython-314-wasm32-emscripten.so")


async def test_canonical_json_and_digests_are_the_same_on_pyodide(pyodide):
    answers = await on_both(pyodide, "canonical_samples")
    assert [a[0] for a in answers].count("refused") == 3


async def test_component_identities_and_the_registry_are_the_same_on_pyodide(pyodide):
    answer = await on_both(pyodide, "components_and_registry")
    assert {"spawn", "despawn", "update", "add_components", "remove_components"} <= set(answer["operations"])


async def test_a_command_is_admitted_stepped_and_applied_on_pyodide_sqlite(pyodide):
    answer = await on_both(pyodide, "ledger_cycle")
    assert answer["replayed"] == [False, True]
    assert answer["applied_per_step"] == [1, 1]
    assert answer["history"] == [["spawn-1", "APPLIED", 1, 0], ["hurt", "APPLIED", 1, 1]]
    assert "Health(hp=7)" in answer["health"]


async def test_a_columnar_state_is_encoded_and_loaded_the_same_on_pyodide(pyodide):
    answer = await on_both(pyodide, "columnar_state")
    assert [chunk[:9] for chunk in answer["chunks"]] == ['{"first":'] * 2  # a snapshot, then a delta
    assert len(answer["entities"]) == 11


async def test_column_deltas_are_loaded_the_same_on_pyodide(pyodide):
    answer = await on_both(pyodide, "column_delta_state")
    assert sum('"partial":true' in chunk for chunk in answer["chunks"]) == 3  # three column deltas, each replacing the last
    assert all('"id_runs":[[1,12]]' in chunk for chunk in answer["chunks"])
    assert [len(state) for state in answer["states"]] == [12, 12, 12]
    assert '"x":1.5' in answer["states"][-1][0]["components"]  # 0.0 drifted three times
