"""A policy round of 1,000 commands with waits, against `archetype serve` over loopback: its time end
to end and its requests, the typed client's batch + `wait_all` against the dict-speaking calls.

    .venv/bin/python bench/policy_round.py [--agents 5000] [--commands 1000] [--tick-rate 10] [--rounds 3]
                                           [--no-record]

The world is bench/sir_world.py's (`agents` SIR agents, moved every tick by a vectorised processor)
under `archetype serve --tick-rate`. A round vaccinates `commands` agents (an `update` of their
`Infection`, due the tick after the world's head) and waits until every command settled, three ways,
one after the other in each of `rounds` rounds (so a burst of load elsewhere hits every way):

- typed: `defer_batch` of the `Update`s, then `wait_all` (one request per 1,000 unsettled commands
  each time it looks);
- the dict-speaking baseline: the same commands as JSON through `submit_batch`, then `wait` on
  each in turn (one request per command each time it looks);
- one by one, the way issue 22's trial ran its 1,078 commands: `submit` each, then `wait` each.

Each way's requests are counted by the client's transport. Best and median seconds per round, and
requests per round, are printed and recorded in docs/performance.md under their own heading.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from perf_doc import publish, run_line
from sir_world import WORLD, Infection, populate, start_serve

from archetype import Client
from archetype.commands import DurableOptions
from archetype.world import ComponentValue, Update

HEADING = "## A policy round (bench/policy_round.py, issue 22)"
WAIT_S = 300.0


class CountingTransport(httpx.HTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self.requests = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        return super().handle_request(request)


def vaccinate(entity_id: int, tick: int) -> Update:
    return Update(world_id=WORLD, entity_id=entity_id, components=[Infection(state="V", day=tick)])


def as_json(op: Update, tick: int) -> dict[str, object]:
    return {"type": "update", "tick": tick, "entity_id": op.entity_id,
            "components": [ComponentValue.from_component(Infection(state="V", day=tick)).model_dump(mode="json")]}  # fmt: skip


def typed(client: Client, ids: list[int], tick: int) -> int:
    accepted = client.defer_batch([vaccinate(e, tick) for e in ids], options=DurableOptions(tick=tick))
    return sum(o.status.value == "APPLIED" for o in client.wait_all(WORLD, accepted, timeout=WAIT_S))


def dict_batch(client: Client, ids: list[int], tick: int) -> int:
    accepted = client.submit_batch(WORLD, [as_json(vaccinate(e, tick), tick) for e in ids])
    return sum(client.wait(WORLD, a.command_id, timeout=WAIT_S).status.value == "APPLIED" for a in accepted)


def one_by_one(client: Client, ids: list[int], tick: int) -> int:
    accepted = [client.submit(WORLD, as_json(vaccinate(e, tick), tick)) for e in ids]
    return sum(client.wait(WORLD, a.command_id, timeout=WAIT_S).status.value == "APPLIED" for a in accepted)


WAYS: dict[str, Callable[[Client, list[int], int], int]] = {
    "typed: `defer_batch` + `wait_all`": typed,
    "dicts: `submit_batch` + `wait` each (baseline)": dict_batch,
    "dicts one by one: `submit` each + `wait` each (issue 22's trial)": one_by_one,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, default=5_000)
    parser.add_argument("--commands", type=int, default=1_000, help="at most 1,000: a batch's most, and the quota per tick")
    parser.add_argument("--tick-rate", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-record", action="store_true", help="print only; leave docs/performance.md alone")
    args = parser.parse_args()
    started = time.time()
    seconds: dict[str, list[float]] = {name: [] for name in WAYS}
    requests: dict[str, list[int]] = {name: [] for name in WAYS}
    with tempfile.TemporaryDirectory(prefix="policy-round-") as tmp:
        populate(Path(tmp) / "data", args.agents)
        process, url = start_serve(Path(tmp), args.tick_rate)
        try:
            for round_ in range(args.rounds):
                for index, (name, way) in enumerate(WAYS.items()):
                    transport = CountingTransport()
                    with Client(url, token="player", transport=transport, timeout=120) as client:
                        tick = client.world(WORLD).tick_head + 1  # a tick of its own: the quota is 1,000 commands per tick
                        first = 1 + (round_ * len(WAYS) + index) * args.commands % args.agents
                        ids = [1 + (first + n) % args.agents for n in range(args.commands)]
                        transport.requests = 0
                        t0 = time.perf_counter()
                        applied = way(client, ids, tick)
                        seconds[name].append(time.perf_counter() - t0)
                        requests[name].append(transport.requests)
                    assert applied == args.commands, f"{name}: {applied} of {args.commands} applied"
                    print(f"round {round_ + 1} {name}: {seconds[name][-1]:.2f} s, {requests[name][-1]} requests", flush=True)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(60)
    best_typed = min(seconds["typed: `defer_batch` + `wait_all`"])
    rows = [f"| {name} | {min(seconds[name]):.2f} | {statistics.median(seconds[name]):.2f} | "
            f"{min(requests[name])}..{max(requests[name])} | {min(seconds[name]) / best_typed:.1f}x |" for name in WAYS]  # fmt: skip
    lines = [
        HEADING, "",
        run_line(started, f"`--agents {args.agents} --commands {args.commands} --tick-rate {args.tick_rate:g} --rounds {args.rounds}`"),
        "",
        f"One round: {args.commands:,} `update`s of {args.agents:,} ticking agents, submitted and waited for until every "
        "one is APPLIED, over loopback:", "",
        "| way | best s | median s | requests per round | best / typed best |", "|---|---|---|---|---|", *rows,
    ]  # fmt: skip
    publish(HEADING, lines, record=not args.no_record)


if __name__ == "__main__":
    main()
