"""Cooperating runners: 1, 2 and 4 `archetype serve` processes sharing one data directory of busy
worlds, and one `serve` with one remote `archetype runner` beside it (over loopback HTTP).

    .venv/bin/python bench/many_runners.py [--worlds 1000] [--ticks 400] [--tick-rate 10] [--seconds 15]
                                           [--runners 1,2,4,1+1r] [--lead S] [--no-record]

A `--runners` entry is a number of `serve` processes, `S+Rr` is S of them and R remote runners
(`archetype runner --url <the first serve>`, an operator token), all splitting the same worlds
through the ledger's runner registry.

A seeded catalog (`synchronous=FULL`): `worlds` worlds, each with one command due at every tick
of its clock for `ticks` ticks (a `despawn` of no entity: it settles `rejected`, so every tick of
every world has work), admitted in-process before any runner starts, and due from `--lead`
seconds after seeding began (estimated: about the time seeding and starting the runners take), so
that the work falls due while every runner runs: a world's step applies every command due by its
clock's tick, and a backlog due during the seeding would be settled by the first runner's first
pass. For each runner count, a freshly seeded catalog and that many `serve` processes on it
(distinct `--runner-id`s, started one after the other), run for `seconds`:

- the split: how long after every runner serves and the commands fall due each world is hosted
  by the runner that `archetype.runner_registry.host_of` names among the live ones, and the writer-epoch
  bumps after that (must be 0);
- throughput: commands settled per second in the `seconds` after the split (the 1-runner run is
  the baseline), and tick manifests published per second;
- commands leased twice: the sum over every runner of `archetype_lease_takeovers_total` (a leased
  command taken over from another session; must be 0, no runner dies here);
- every world hosted by exactly one runner at the end.

The tick rate is set above what the runners sustain: commands fall due faster than they settle,
so commands settled per second measure the runners, not the clock. A world behind its clock
applies every command due by then in its next step, so ticks published per second is the
runners' pass rate over their worlds, not their capacity.
Every run is bounded; the figures are printed and recorded in docs/performance.md under their own
heading.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from perf_doc import replace_section  # noqa: E402

from archetype.commands import DeferredItem, DurableOptions  # noqa: E402 - after the path set-up
from archetype.commands.clock import TickClock  # noqa: E402
from archetype.runner_registry import host_of  # noqa: E402
from archetype.runtime import Runtime  # noqa: E402
from archetype.world import CreateWorld, Despawn  # noqa: E402

HEADING = "## Cooperating runners (bench/many_runners.py)"
TOKENS = {"admin": {"principal": "root", "roles": ["admin"]}, "operator": {"principal": "runner", "roles": ["operator"]}}
ADMIN = {"Authorization": "Bearer admin"}
OPEN = "('PENDING', 'LEASED', 'RETRYABLE')"
POLL_S = 0.25
SPLIT_LIMIT_S = 90.0  # no run waits longer for its split, whatever the machine
SEED_PER_S = 4_000  # commands seeded per second, about, on this machine: the default lead
STARTUP_S = 10.0  # per runner started, about, under load: the default lead


async def seed(data: Path, worlds: int, ticks: int, interval_ms: int, due_ms: int) -> None:
    """`worlds` worlds, each with a command due at every tick of its clock from `due_ms` on, `ticks` of them."""
    rt = await Runtime.open_local(data, audit=None)
    try:
        for w in range(worlds):
            world_id = f"busy-{w:05d}"
            # realtime at the runners' rate, as every world ticked before tick modes (docs/performance.md)
            await rt.dispatcher.apply(CreateWorld(name=world_id, world_id=world_id, tick_mode="realtime", tick_interval_ms=interval_ms))
            first = TickClock.of(await rt.authority.world_info(world_id), interval_ms).tick_at(due_ms) + 1
            items = [DeferredItem(op=Despawn(world_id=world_id, entity_id=10**9), options=DurableOptions(tick=t))
                     for t in range(first, first + ticks)]  # fmt: skip
            await rt.dispatcher.defer_batch(items)
    finally:
        await rt.close()


class Runner:
    """A `serve` on `data`, or (with `server`) a remote runner of that serve's URL."""

    def __init__(self, directory: Path, data: Path, runner_id: str, tick_rate: float, server: str | None = None) -> None:
        tokens = directory / "tokens.json"
        tokens.write_text(json.dumps(TOKENS))
        if server is None:
            command = [sys.executable, "-m", "archetype.cli", "serve", "--data", str(data), "--port", "0",
                       "--tokens", str(tokens), "--tick-rate", str(tick_rate), "--runner-id", runner_id,
                       "--log-level", "warning"]  # fmt: skip
        else:
            token = directory / "operator.token"
            token.write_text("operator")
            command = [sys.executable, "-m", "archetype.cli", "runner", "--url", server, "--token-file", str(token),
                       "--tick-rate", str(tick_rate), "--runner-id", runner_id, "--log-level", "warning"]  # fmt: skip
        self.runner_id, self.remote = runner_id, server is not None
        self.stopped: dict[str, float] = {}
        self.log = directory / f"{runner_id}.log"
        with self.log.open("w") as log:
            self.process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=log, text=True,
                                            env={**os.environ, "PYTHONPATH": str(ROOT / "src")})  # fmt: skip
        assert self.process.stdout is not None
        first = json.loads(self.process.stdout.readline())
        self.url = first.get("serving", server)

    def warnings(self) -> list[str]:
        """What the runner logged about its worlds: leases taken over, worlds not stepped or not released."""
        return [line for line in self.log.read_text(errors="replace").splitlines() if "world " in line and (
            "taken over" in line or "not stepped" in line or "not released" in line)]  # fmt: skip

    def takeovers(self) -> float:
        """Of a serve: from its /metrics now; of a remote runner: from the line it printed on stopping."""
        if self.remote:
            return self.stopped.get("takeovers", float("nan"))
        text = httpx.get(f"{self.url}/metrics", headers=ADMIN, timeout=30).text
        return sum(float(v) for v in re.findall(r"^archetype_lease_takeovers_total (\S+)$", text, re.M))

    def stop(self) -> None:
        """After SIGTERM (sent to every runner first, so none takes over the others' duties on the way out)."""
        try:
            out, _ = self.process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return
        if self.remote and out.strip():
            self.stopped = json.loads(out.strip().splitlines()[-1])


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (from /proc): a serve's stepping process and its audit writer."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


@contextlib.contextmanager
def catalog(data: Path) -> Iterator[sqlite3.Connection]:
    db = sqlite3.connect(f"file:{data / 'catalog.sqlite3'}?mode=ro", uri=True, timeout=30)
    try:
        yield db
    finally:
        db.close()


def hosts(data: Path) -> dict[str, tuple[str | None, int]]:
    with catalog(data) as db:
        return {w: (o, e) for w, o, e in db.execute("SELECT world_id, host_owner, writer_epoch FROM worlds")}


def settled(data: Path) -> int:
    with catalog(data) as db:
        return int(db.execute(f"SELECT count(*) FROM commands WHERE status NOT IN {OPEN}").fetchone()[0])


def ticks_published(data: Path) -> int:
    """The tick manifests of every world: one per step a runner published (the ticks a step
    coalesces are not counted, so this is the runners' work whatever the clock does)."""
    with catalog(data) as db:
        return int(db.execute("SELECT count(*) FROM ticks").fetchone()[0])


def run(directory: Path, spec: str, args: argparse.Namespace) -> dict[str, Any]:
    data = directory / "data"
    # Seeded afresh for each run, not copied from one seeding: the worlds' tick clocks start at their
    # creation, so in a copy made minutes earlier every command is overdue and a world's first step
    # settles all of them, leaving the runners that join after it nothing to split.
    # The commands fall due once every runner is up, not while the catalog is seeded: a world's step
    # applies every command due by its clock's tick, so a backlog that fell due meanwhile would be
    # settled by the first runner's first pass, each world in one step, leaving nothing to share.
    serves, _, remotes = spec.partition("+")
    count, remote = int(serves), int(remotes.removesuffix("r") or 0)
    lead_s = args.lead if args.lead is not None else args.worlds * args.ticks / SEED_PER_S + STARTUP_S * (count + remote)
    t0 = time.perf_counter()
    due_ms = round(time.time() * 1000 + lead_s * 1000)
    asyncio.run(seed(data, args.worlds, args.ticks, max(1, round(1000 / args.tick_rate)), due_ms))
    late = time.time() * 1000 - due_ms
    print(f"seeded {args.worlds} worlds x {args.ticks} commands in {time.perf_counter() - t0:.1f} s; due "
          f"{-late / 1000:.1f} s later" if late < 0 else f"; due {late / 1000:.1f} s before seeding ended", flush=True)  # fmt: skip
    ids = [f"r{i}" for i in range(count)] + [f"remote{i}" for i in range(remote)]
    runners: list[Runner] = []
    try:
        for runner_id in ids:
            server = runners[0].url if runner_id.startswith("remote") else None
            runners.append(Runner(directory, data, runner_id, args.tick_rate, server))
        serving, total = time.perf_counter(), args.worlds * args.ticks
        since = serving + max(0.0, due_ms / 1000 - time.time())  # no world is claimed before its first command falls due
        split_at, split = None, None
        while split is None and time.perf_counter() < since + SPLIT_LIMIT_S:
            time.sleep(POLL_S)
            now = hosts(data)
            if all(owner == host_of(w, ids) for w, (owner, _) in now.items()):
                split_at, split = time.perf_counter() - since, now
        started, first, first_ticks = time.perf_counter(), settled(data), ticks_published(data)  # split done: the window opens
        deadline, done = started + args.seconds, first
        while time.perf_counter() < deadline and done < total:
            time.sleep(POLL_S)
            done = settled(data)
        elapsed = time.perf_counter() - started
        published = ticks_published(data) - first_ticks
        takeovers = sum(r.takeovers() for r in runners if not r.remote)
        end = hosts(data)
    finally:
        family = [pid for runner in runners for pid in descendants(runner.process.pid)]
        for runner in runners:
            runner.process.send_signal(signal.SIGTERM)
        stopping = time.perf_counter()
        for runner in runners:
            runner.stop()
        # A serve killed after the stop timeout leaves its stepping process finishing the audit
        # projector's round (minutes, with every event of the run pending): the next run must not share the cores with it.
        for pid in family:
            with contextlib.suppress(OSError):  # gone; and a pid reused since is not one of this run's
                if str(data).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(pid, signal.SIGKILL)
        takeovers += sum(r.takeovers() for r in runners if r.remote)
        print(f"  {spec} runners stopped {time.perf_counter() - stopping:.1f} s after SIGTERM", flush=True)
        for line in [line for runner in runners for line in runner.warnings()][:20]:
            print(f"  runner log: {line}", flush=True)
    bumps = sum(max(0, end[w][1] - split[w][1]) for w in end) if split else float("nan")
    shares = [sum(1 for owner, _ in end.values() if owner == r) for r in ids]
    return {"runners": spec, "settled": done - first, "per_s": (done - first) / elapsed, "ticks_per_s": published / elapsed,
            "window_s": elapsed, "lead_s": lead_s, "split_s": split_at if split_at else float("nan"),
            "bumps_after_split": bumps, "leased_twice": takeovers, "min_share": min(shares), "max_share": max(shares),
            "epoch_max": max(e for _, e in end.values())}  # fmt: skip


def label(spec: str) -> str:
    serves, _, remotes = spec.partition("+")
    return f"{serves} serve" + (f" + {remotes.removesuffix('r')} remote" if remotes else "")


def report(results: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    base = results[0]["per_s"]
    lines = [
        HEADING, "",
        f"`.venv/bin/python bench/many_runners.py --worlds {args.worlds} --ticks {args.ticks} --tick-rate "
        f"{args.tick_rate:g} --seconds {args.seconds:g} --runners {args.runners}`; Python {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores shared with other work (load "
        f"average {os.getloadavg()[0]:.1f} at the end). {args.worlds:,} worlds with a command due at every tick, "
        f"{', '.join(label(r['runners']) for r in results)} on one catalog (`synchronous=FULL`), "
        f"{args.seconds:g} s each after the split, against one runner in the same run.",
        "",
        "| runners | commands settled/s | vs one runner | ticks published/s | split done after | "
        "epoch bumps after the split | commands leased twice | worlds per runner (min-max) |",
        "|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for r in results:
        lines.append(
            f"| {label(r['runners'])} | {r['per_s']:,.0f} | {r['per_s'] / base:.2f}x | {r['ticks_per_s']:,.0f} | "
            f"{r['split_s']:.1f} s | {r['bumps_after_split']:.0f} | {r['leased_twice']:.0f} | "
            f"{int(r['min_share'])}-{int(r['max_share'])} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", type=int, default=1_000)
    parser.add_argument("--ticks", type=int, default=400, help="commands per world, one due at each tick")
    parser.add_argument("--tick-rate", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--runners", default="1,2,4,1+1r")
    parser.add_argument("--lead", type=float, default=None,
                        help="seconds from the start of seeding to the first due command (default: estimated)")
    parser.add_argument("--no-record", action="store_true", help="print only; leave docs/performance.md alone")
    args = parser.parse_args()
    specs = args.runners.split(",")
    # a runner killed after its stop timed out may leave its audit writer finishing a round in there
    with tempfile.TemporaryDirectory(prefix="archetype-runners-", ignore_cleanup_errors=True) as tmp:
        results = []
        for spec in specs:
            results.append(run(Path(tmp) / f"runners-{spec}", spec, args))
            print(json.dumps(results[-1]), flush=True)
    lines = report(results, args)
    print("\n".join(lines))
    if not args.no_record:
        replace_section(HEADING, lines)


if __name__ == "__main__":
    main()
