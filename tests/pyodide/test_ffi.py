"""Pyodide's real FFI at each crossing of the Durable Object and the Worker: arguments as JS
objects, SDK dicts, undefined and null; storage values as the runtime returns them; and the
harness's point: a deliberate FFI mistake makes something fail visibly, where the CPython
stand-in would have let Python values pass."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.timeout(120)

ADMIN = {"Authorization": "Bearer t-admin"}
WORLD = "w-ffi"


@pytest.fixture
def admitted(pyodide):
    """A world with one admitted command whose audit event waits for the alarm."""
    pyodide.call("tests.pyodide.harness:deploy", tokens={"t-admin": {"principal": "ops", "roles": ["admin", "player"]}})
    with httpx.Client(base_url=pyodide.url, headers=ADMIN, timeout=60) as client:
        assert client.post("/worlds", json={"name": "ffi", "world_id": WORLD}).status_code == 201
        submitted = client.post(f"/worlds/{WORLD}/commands", headers={"Idempotency-Key": "d-7"},
                                json={"type": "despawn", "tick": 3, "priority": 0, "entity_id": 7})  # fmt: skip
        assert submitted.status_code == 202
    return WORLD


def test_the_object_answers_every_shape_an_argument_arrives_in(pyodide):
    pyodide.call("tests.pyodide.harness:deploy", tokens={})
    answer = pyodide.call("tests.pyodide.scenarios:rpc_argument_shapes", world_id=WORLD)
    assert answer["created"]["ok"] is True and answer["created"]["result"]["world_id"] == WORLD
    assert answer["info"] == answer["created"]
    # undefined, null, None and no argument at all: a typed refusal, never a crash
    assert answer["missing"] == [[False, "invalid_command"]] * 4
    assert answer["types"] == ["int", "int", "str"]


def test_storage_values_cross_as_the_runtime_returns_them(pyodide, admitted):
    answer = pyodide.call("tests.pyodide.scenarios:storage_values", world_id=admitted)
    assert answer["row"] == ["1", "2.5", "9007199254740991", "None", "None", "'text'", "0"]
    assert answer["same_in_transaction"] is True and answer["rolled_back"] is True


def test_without_a_mistake_the_alarm_delivers_and_the_call_answers(pyodide, admitted):
    answer = pyodide.call("tests.pyodide.scenarios:with_mistake", mistake=None, world_id=admitted)
    assert [(m["command_id"], m["event_seq"]) for m in answer["sent"]] == [("d-7", 1)]
    assert answer["alarm_errors"] == [] and answer["call_error"] is None and answer["alarm_rearmed"] is False


@pytest.mark.parametrize("mistake, symptom", [
    ("python_dict_to_a_js_stub", "DataCloneError"),
    ("rpc_result_is_a_model", "cannot be sent over RPC"),
    ("sql_bindings_as_one_list", "cannot be sent over RPC"),
])  # fmt: skip
def test_an_ffi_mistake_fails_on_the_real_interpreter(pyodide, admitted, mistake, symptom):
    answer = pyodide.call("tests.pyodide.scenarios:with_mistake", mistake=mistake, world_id=admitted)
    assert symptom in (answer["call_error"] or "") + "".join(answer["alarm_errors"])
