"""`/metrics` of a real `archetype serve`: every series from its one source, bounded world labels,
and JSON request logs; and the counting rules of ObservedAuthority on canned ledger answers."""

from __future__ import annotations

import json

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from archetype.commands.authority import Authority
from archetype.commands.errors import CommandConflictError, QuotaExceededError
from archetype.metrics import Metrics, ObservedAuthority
from archetype.world import ComponentValue
from tests.component_modules.alpha import Position
from tests.support.serve import WAIT_S, serving, wait_for

pytestmark = pytest.mark.timeout(240)
ADMIN, PLAYER, VIEWER = ({"Authorization": f"Bearer {t}"} for t in ("t-admin", "t-player", "t-viewer"))


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(found: dict, name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_of_a_running_server(tmp_path):
    with serving(tmp_path, "--metrics-worlds", "1", "--log-format", "json") as (process, url):
        with httpx.Client(base_url=url, timeout=10) as http:
            for world in ("m1", "m2"):
                assert http.post("/worlds", json={"name": world, "world_id": world}, headers=ADMIN).status_code == 201
            spawn = {"type": "spawn", "tick": 0, "components": [ComponentValue.from_component(Position(x=0, y=0)).model_dump()]}
            keyed = {**PLAYER, "Idempotency-Key": "ship"}
            assert http.post("/worlds/m1/commands", json=spawn, headers=keyed).status_code == 202
            assert http.post("/worlds/m1/commands", json=spawn, headers=keyed).json()["replayed"] is True
            assert http.post("/worlds/m1/commands", json={**spawn, "tick": 5}, headers=keyed).status_code == 409
            despawn = {"type": "despawn", "tick": 0, "entity_id": 999}  # rejected when applied: no such entity
            assert http.post("/worlds/m2/commands", json=despawn, headers=PLAYER).status_code == 202

            assert http.get("/metrics").status_code == 401

            def projected():  # both worlds' settlements: the projector may see them in different rounds
                found = samples(http.get("/metrics", headers=VIEWER).text)
                events = [value(found, "archetype_command_events_total", event=e) for e in ("applied", "rejected")]
                return found if all(events) else None

            found = wait_for(projected, "the application and the rejection to be projected")
        process.terminate()
        _, logs = process.communicate(timeout=WAIT_S)

    assert value(found, "archetype_admissions_total", outcome="admitted") == 2
    assert value(found, "archetype_admissions_total", outcome="replayed") == 1
    assert value(found, "archetype_admissions_total", outcome="conflict") == 1
    assert value(found, "archetype_command_events_total", event="admitted") == 2
    assert value(found, "archetype_command_events_total", event="applied") == 1
    assert value(found, "archetype_command_events_total", event="rejected") == 1
    # the first world seen has its own label; the second is summed under _other (--metrics-worlds 1).
    # Both have a command due at tick 0 and due worlds step concurrently, so either may be first.
    worlds = {dict(labels).get("world") for (name, labels) in found if name == "archetype_ticks_total"}
    assert worlds in ({"m1", "_other"}, {"m2", "_other"})
    (first,) = worlds - {"_other"}
    assert value(found, "archetype_ticks_total", world=first, outcome="ok") > 0
    assert value(found, "archetype_tick_duration_seconds_count", world=first) > 0
    assert ("archetype_audit_lag_events", (("world", first),)) in found
    assert value(found, "archetype_http_request_duration_seconds_count", method="POST",
                 route="/worlds/{world_id}/commands", status="409") == 1  # fmt: skip
    assert value(found, "archetype_http_request_duration_seconds_count", method="POST",
                 route="/worlds/{world_id}/commands", status="202") == 3  # two admitted, one replayed  # fmt: skip

    lines = [json.loads(line) for line in logs.splitlines() if line.startswith("{")]
    requests = [line for line in lines if line["logger"] == "archetype.http"]
    assert {"method": "POST", "path": "/worlds/m1/commands", "route": "/worlds/{world_id}/commands", "status": 409}.items() <= \
        next(r for r in requests if r["status"] == 409).items()  # fmt: skip
    assert all(set(r) >= {"ts", "level", "message", "duration_ms"} for r in requests)


class Canned(Authority):
    def __init__(self, answers: dict) -> None:
        self.answers = answers

    async def rpc(self, method, arguments):
        answer = self.answers[method]
        if isinstance(answer, Exception):
            raise answer
        return answer


async def test_each_outbox_event_counts_once_at_acknowledgement():
    metrics = Metrics()
    page = {"event_seq": [1, 2, 3], "event_type": ["admitted", "applied", "dead_lettered"]}
    authority = ObservedAuthority(Canned({"read_outbox_columns": page, "acknowledge_outbox": {}}), metrics)
    for _ in range(2):  # a page read twice (a failed commit, re-read) is still counted once
        await authority.read_outbox_columns(world_id="w", after_seq=0, limit=10)
    await authority.acknowledge_outbox(world_id="w", up_to_seq=2)
    await authority.acknowledge_outbox(world_id="w", up_to_seq=3)
    await authority.acknowledge_outbox(world_id="w", up_to_seq=3)
    counted = {event: metrics.events.labels(event)._value.get() for event in ("admitted", "applied", "dead_lettered")}
    assert counted == {"admitted": 1, "applied": 1, "dead_lettered": 1}


async def test_takeovers_and_refused_admissions():
    metrics = Metrics()
    rows = [{"sequence": 1, "suspect": True}, {"sequence": 2, "suspect": False}, {"sequence": 3, "suspect": True}]
    authority = ObservedAuthority(Canned({"lease": rows, "admit": QuotaExceededError("full"),
                                          "reserve_spawn": CommandConflictError("taken")}), metrics)  # fmt: skip
    await authority.lease("w", "o", "s", 1, 0, 10, 1000)
    with pytest.raises(QuotaExceededError):
        await authority.admit("w", [])
    with pytest.raises(CommandConflictError):
        await authority.reserve_spawn("w", "c", "p", "d", 0)
    assert metrics.takeovers._value.get() == 2
    assert metrics.admissions.labels("quota_exceeded")._value.get() == 1
    assert metrics.admissions.labels("conflict")._value.get() == 1
