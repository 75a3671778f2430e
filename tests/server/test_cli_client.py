"""`archetype submit`, `history`, `dead-letters`, `worlds ...` and `command show` against the app on real loopback HTTP."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from archetype.cli import main
from archetype.runtime import Runtime
from archetype.world import ComponentValue, CreateWorld, Spawn, Step
from tests.component_modules import flaky
from tests.component_modules.flaky import Probe

pytestmark = pytest.mark.timeout(60)


def run(served, *args: str, token: str = "t-player"):
    return CliRunner().invoke(main, [*args, "--url", served.url, "--token", token])


async def test_submit_history_and_dead_letters(served):
    async with await Runtime.open_remote(served.url, token="t-admin", owner="cli-runner") as rt:
        world_id = await rt.dispatcher.apply(CreateWorld(name="cli", world_id="cli"))
        probe = ComponentValue.from_component(Probe(label="down")).model_dump()
        flaky.FAILURES["down"] = [ConnectionError("calibration offline")] * 5

        spawned = run(served, "submit", world_id, json.dumps({"type": "spawn", "tick": 0, "components": [probe]}),
                      "--idempotency-key", "probe")  # fmt: skip
        assert spawned.exit_code == 0, spawned.output
        assert json.loads(spawned.output)["command_id"] == "probe"
        replay = run(served, "submit", world_id, json.dumps({"type": "spawn", "tick": 0, "components": [probe]}),
                     "--idempotency-key", "probe")  # fmt: skip
        assert json.loads(replay.output)["replayed"] is True

        legacy = run(served, "submit", world_id, '{"type": "message", "tick": 0}')
        assert legacy.exit_code == 1 and "unsupported_command_type" in legacy.output
        denied = run(served, "submit", world_id, '{"type": "despawn", "tick": 0, "entity_id": 1}', token="t-viewer")
        assert denied.exit_code == 1 and "permission_denied" in denied.output
        assert run(served, "submit", world_id, "{nope").exit_code == 2

        for _ in range(3):  # three attempts, each failing with a retryable error: dead-lettered
            await rt.dispatcher.apply(Step(world_id=world_id))

    history = run(served, "history", world_id)  # the player's own commands
    assert history.exit_code == 0 and "probe" in history.output and "DEAD_LETTER" in history.output
    assert "probe" not in run(served, "history", world_id, token="t-viewer").output  # not the viewer's
    letters = run(served, "dead-letters", world_id, token="t-operator")
    assert letters.exit_code == 0 and "calibration offline" in letters.output
    applied = run(served, "history", world_id, "--status", "APPLIED", "--json", token="t-operator")
    assert applied.exit_code == 0 and applied.output == ""
    (letter,) = map(json.loads, run(served, "dead-letters", world_id, "--json", token="t-operator").output.splitlines())
    assert (letter["command_id"], letter["status"], letter["attempts"]) == ("probe", "DEAD_LETTER", 3)
    missing = run(served, "history", "nowhere", token="t-viewer")
    assert missing.exit_code == 1 and "world_not_found" in missing.output

    # redrive (operator): the player's dead letter as a new command; the same key again is a replay
    denied = run(served, "dead-letters", "redrive", world_id, "probe", "--principal", "pat")
    assert denied.exit_code == 1 and "permission_denied" in denied.output
    redrive = ["dead-letters", "redrive", world_id, "probe", "--principal", "pat", "--idempotency-key", "probe-2", "--json"]
    first, again = (json.loads(run(served, *redrive, token="t-operator").output) for _ in range(2))
    assert (first["command_id"], first["redriven_from"]) == ("probe-2", letter["sequence"])
    assert (first["replayed"], again["replayed"]) == (False, True)
    other = run(served, "dead-letters", "redrive", world_id, "probe", "--principal", "pat", token="t-operator")
    assert other.exit_code == 1 and "already_redriven" in other.output
    table = run(served, "dead-letters", "redrive", world_id, "nope", "--principal", "pat", token="t-operator")
    assert table.exit_code == 1 and "command_not_found" in table.output
    # an admin needs no --principal: the dead letter of the one principal that has the id
    unnamed = run(served, "dead-letters", "redrive", world_id, "probe", "--idempotency-key", "probe-2", "--json", token="t-admin")
    assert unnamed.exit_code == 0 and json.loads(unnamed.output) == {**first, "replayed": True}, unnamed.output


async def test_worlds_and_command_show(served):
    created = run(served, "worlds", "create", "arena", "--id", "a1", "--json", token="t-admin")
    assert created.exit_code == 0 and json.loads(created.output)["world_id"] == "a1"
    assert run(served, "worlds", "create", "x", token="t-player").exit_code == 1  # permission_denied
    listed = run(served, "worlds", "list", "--json", token="t-viewer")
    assert [w["world_id"] for w in map(json.loads, listed.output.splitlines())] == ["a1"]
    table = run(served, "worlds", "list", token="t-viewer").output
    assert "a1" in table and "arena" in table and "ACTIVE" in table and "outbox_pending" in table
    shown = run(served, "worlds", "show", "a1", token="t-viewer")
    assert shown.exit_code == 0 and "health" in shown.output and "ACTIVE" in shown.output
    assert json.loads(run(served, "worlds", "show", "a1", "--json", token="t-viewer").output)["health"]["status"] == "ACTIVE"

    long_id = "k" * 40  # one line per row however long the ids are
    body = json.dumps({"type": "despawn", "tick": 10**6, "entity_id": 1})
    assert run(served, "submit", "a1", body, "--idempotency-key", long_id).exit_code == 0
    history = run(served, "history", "a1").output
    assert [line for line in history.splitlines() if long_id in line][0].count("PENDING") == 1

    shown = run(served, "command", "show", "a1", long_id, "--json")
    record = json.loads(shown.output)
    assert (record["command_id"], record["status"], record["trail"]) == (long_id, "PENDING", None)  # no audit here
    as_table = run(served, "command", "show", "a1", long_id).output
    assert "PENDING" in as_table and "no audit projection" in as_table
    hidden = run(served, "command", "show", "a1", long_id, token="t-player2")
    assert hidden.exit_code == 1 and "command_not_found" in hidden.output
    seen = run(served, "command", "show", "a1", long_id, "--principal", "pat", "--json", token="t-operator")
    assert json.loads(seen.output)["principal"] == "pat"
    for reader in ("t-admin", "t-analyst"):  # a reader of everyone needs no --principal for the one principal's id
        found = run(served, "command", "show", "a1", long_id, "--json", token=reader)
        assert found.exit_code == 0 and json.loads(found.output)["principal"] == "pat", found.output

    world = json.loads(run(served, "worlds", "show", "a1", "--json", token="t-viewer").output)
    assert (world["status"], world["tick_head"]) == ("ACTIVE", -1)
    destroyed = run(served, "worlds", "destroy", "a1", "--yes", "--json", token="t-admin")
    assert json.loads(destroyed.output) == {"world_id": "a1", "cancelled": 1}
    assert json.loads(run(served, "worlds", "show", "a1", "--json", token="t-viewer").output)["status"] == "DESTROYED"
    missing = run(served, "worlds", "show", "nowhere", token="t-viewer")
    assert missing.exit_code == 1 and "world_not_found" in missing.output


async def test_worlds_create_takes_a_tick_mode_and_interval_and_show_says_them(served):
    made = run(served, "worlds", "create", "game", "--id", "g1", "--tick-mode", "realtime", "--tick-interval-ms", "50",
               "--json", token="t-admin")  # fmt: skip
    assert made.exit_code == 0, made.output
    assert {k: json.loads(made.output)[k] for k in ("tick_mode", "tick_interval_ms")} == {"tick_mode": "realtime", "tick_interval_ms": 50}
    plain = json.loads(run(served, "worlds", "create", "sim", "--id", "s1", "--json", token="t-admin").output)
    assert (plain["tick_mode"], plain["tick_interval_ms"], plain["health"]["lag_ms"]) == ("lockstep", 100, 0)
    table = run(served, "worlds", "show", "s1", token="t-viewer").output
    assert "lockstep" in table and "ACTIVE, lag 0 ms" in table
    listed = run(served, "worlds", "list", token="t-viewer").output
    assert "realtime" in listed and "lockstep" in listed and "tick_interval_ms" in listed
    # refused before anything is sent, or by the server, with its code; nothing created
    assert run(served, "worlds", "create", "x", "--tick-mode", "sometimes", token="t-admin").exit_code == 2
    assert run(served, "worlds", "create", "x", "--tick-interval-ms", "-1", token="t-admin").exit_code == 2
    zero = run(served, "worlds", "create", "x", "--id", "x1", "--tick-mode", "realtime", "--tick-interval-ms", "0", token="t-admin")
    assert zero.exit_code == 1 and "invalid_request" in zero.output
    assert "world_not_found" in run(served, "worlds", "show", "x1", token="t-viewer").output
    for world_id in ("g1", "s1"):
        run(served, "worlds", "destroy", world_id, "--yes", token="t-admin")


def test_settings_come_from_the_environment_and_a_config_file(served, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "archetype.toml").write_text(f'[client]\nurl = "{served.url}"\ntoken = "t-viewer"\n')
    assert CliRunner().invoke(main, ["worlds", "list", "--json"]).exit_code == 0  # url and token from ./archetype.toml
    monkeypatch.setenv("ARCHETYPE_TOKEN", "wrong")  # the environment beats the file
    assert "unauthenticated" in CliRunner().invoke(main, ["worlds", "list"]).output
    assert CliRunner().invoke(main, ["worlds", "list", "--token", "t-viewer"]).exit_code == 0  # a flag beats both
    (tmp_path / "archetype.toml").write_text('[client]\nurl = "http://127.0.0.1:1"\ntokn = "typo"\n')
    typo = CliRunner().invoke(main, ["worlds", "list"])
    assert typo.exit_code == 2 and typo.output.strip().splitlines() == [
        "error: unknown setting 'tokn' in [client] of archetype.toml; the settings are url, token"
    ]


def test_a_missing_config_file_is_one_line_and_exit_2(tmp_path):
    done = CliRunner().invoke(main, ["--config", str(tmp_path / "nope.toml"), "worlds", "list"])
    expected = f"error: --config {tmp_path / 'nope.toml'}: no such file; give the path of a TOML settings file"
    assert done.exit_code == 2 and done.output.strip() == expected


def test_no_token_is_one_line_and_exit_2(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ARCHETYPE_TOKEN", raising=False)
    done = CliRunner().invoke(main, ["history", "w1"])
    assert done.exit_code == 2 and len(done.output.strip().splitlines()) == 1 and "pass --token" in done.output


async def test_worlds_show_at_a_tick_lists_the_entities_of_that_tick(served):
    async with await Runtime.open_remote(served.url, token="t-admin", owner="cli-runner") as rt:
        world_id = await rt.dispatcher.apply(CreateWorld(name="then", world_id="then"))
        world = await rt.worlds.get(world_id)
        await world.ensure_entity_ids(2)
        for label in ("first", "second"):
            async with world.lock:
                world.atomically(lambda label=label: world.spawn([Probe(label=label)]))
            await world.step()
    at = {tick: [json.loads(line) for line in run(served, "worlds", "show", world_id, "--tick", str(tick), "--json",
                                                  token="t-viewer").output.splitlines()] for tick in (-1, 0, 1)}  # fmt: skip
    assert at[-1] == []
    assert [e["components"]["Probe"]["label"] for e in at[0]] == ["first"]
    assert [e["components"]["Probe"]["label"] for e in at[1]] == ["first", "second"]
    table = run(served, "worlds", "show", world_id, "--tick", "0", token="t-viewer")
    assert table.exit_code == 0 and "at tick 0" in table.output and "first" in table.output and "second" not in table.output
    later = run(served, "worlds", "show", world_id, "--tick", "2", token="t-viewer")
    assert later.exit_code == 1 and "tick_not_retained" in later.output

    forked = run(served, "worlds", "fork", world_id, "--tick", "0", "--name", "what if", "--id", "then-0", "--json", token="t-admin")
    assert forked.exit_code == 0, forked.output
    assert (json.loads(forked.output)["world_id"], json.loads(forked.output)["tick_head"]) == ("then-0", 0)
    shown = run(served, "worlds", "show", "then-0", "--tick", "0", "--json", token="t-viewer").output.splitlines()
    assert [json.loads(line) for line in shown] == at[0]
    denied = run(served, "worlds", "fork", world_id, "--tick", "0", "--name", "x", token="t-operator")
    assert denied.exit_code == 1 and "permission_denied" in denied.output


async def test_worlds_retry_asks_a_stalled_world_to_retry_now(served):
    async with await Runtime.open_remote(served.url, token="t-admin", owner="cli-runner") as rt:
        world_id = await rt.dispatcher.apply(CreateWorld(name="hot", world_id="hot"))
        await rt.dispatcher.apply(Spawn(world_id=world_id, components=[Probe(label="core")]))

        def overheat(world, tick, entity_id, components):
            raise RuntimeError("the reactor overheated")

        (await rt.worlds.get(world_id)).add_processor(overheat, Probe)
        for _ in range(2):
            with pytest.raises(RuntimeError):
                await rt.worlds.step(world_id)

    denied = run(served, "worlds", "retry", world_id)  # a player's token
    assert denied.exit_code == 1 and "permission_denied" in denied.output
    retried = run(served, "worlds", "retry", world_id, "--json", token="t-operator")
    assert retried.exit_code == 0, retried.output
    health = json.loads(retried.output)["health"]
    assert (health["status"], health["failed_attempts"], health["last_error"]) == ("STALLED", 0, "RuntimeError: the reactor overheated")
    assert "STALLED" in run(served, "worlds", "retry", world_id, token="t-operator").output  # the table; asked again: nothing more
    missing = run(served, "worlds", "retry", "nowhere", token="t-operator")
    assert missing.exit_code == 1 and "world_not_found" in missing.output
