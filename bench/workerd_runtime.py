"""The Worker and its Durable Objects on the real Workers runtime (workerd with its offline Pyodide
bundle, as tests/workerd runs them), measured beside the local authority in the same run, and
priced at Cloudflare's published rates (bench/prices.py).

    .venv/bin/python bench/workerd_runtime.py [--count 300] [--concurrency 32] [--entities 1000 10000]
                                              [--seconds 20] [--ticks 5] [--no-record]

1. Cold start: workerd started -> the Worker's first answer of /health (then again after a restart
   on the same disk); baseline `archetype serve` started -> its first /health.
2. HTTP admission, 1 and `concurrency` in flight: bench/http_admission.py's workload and client
   against the Worker and against `archetype serve` (the local authority), with each server's
   CPU per admission.
3. An edge-hosted world of 1,000 then 10,000 moving entities (bench/edge_worlds.py: bench/moving.py's
   per-entity processor), TICK_INTERVAL_MS=1 so each alarm runs the next step at once: steps/s,
   rows per step, the isolate's WebAssembly memory against 128 MB and workerd's peak RSS; baseline
   the same world stepped back to back in process on the local authority.
4. Rows read and written per command lifecycle, from the engine's own counters (each cursor's
   rowsRead/rowsWritten, summed by DurableObjectSqlPort, read through the test harness's
   /_test/objects/<name>/stats), with the object requests (RPC calls and alarms) it took:
   runner-hosted (admission, a runner stepping over HTTP, the alarm's delivery) and edge-hosted
   (admission, the alarm's step and delivery), 1 and 100 commands per tick; baseline
   bench/durable_object_billing.py's figures of the same lifecycle on the stand-in's engine.
5. Dollars per million commands and per world-hour, idle and busy, from 1-4 and bench/prices.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from durable_object_billing import measure as standin_lifecycle
from durable_object_billing import report as standin_report
from http_admission import TOKENS, cpu_seconds, over_http, serve_phases, start_server
from perf_doc import replace_section
from prices import HOURS_PER_MONTH, PRICES_READ_ON, Usage, usd, usd_by_item

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the deployment (tests/support) and the staged module (bench.edge_worlds)

from archetype.api.app import DEFAULT_QUOTA  # noqa: E402
from archetype.commands import DeferredItem, DurableOptions  # noqa: E402
from archetype.modules import set_up_modules  # noqa: E402
from archetype.remote import HttpAuthority  # noqa: E402
from archetype.runtime import Runtime  # noqa: E402
from archetype.world import ComponentValue, CreateWorld, Spawn, Step  # noqa: E402
from bench import edge_worlds  # noqa: E402
from bench.moving import Position, Velocity  # noqa: E402
from tests.support.workerd.python_worker import PythonWorker  # noqa: E402
from worker.local_workerd import workerd_version  # noqa: E402

HEADING = "## The Worker on the real Workers runtime (bench/workerd_runtime.py)"
ADMIN = {"Authorization": "Bearer admin"}
PLAYER = {"Authorization": "Bearer player"}
MOVING_WORLD = edge_worlds.MOVING + "bench"
BUSY_COMMANDS_PER_S = 10  # the busy world-hour: its entities move every tick and it takes this many commands
TICKS_PER_S = 1  # the world-hours tick at the default TICK_INTERVAL_MS
MB = 1024 * 1024


def mover(n: int, tick: int = 0) -> dict[str, Any]:
    """A spawn due at `tick` (one that has passed: at the world's next step)."""
    components = [Position(x=float(n), y=0.0), Velocity(dx=1.0, dy=0.5)]
    return {"type": "spawn", "tick": tick, "components": [ComponentValue.from_component(c).model_dump() for c in components]}


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise LookupError("no VmHWM")


# -- 1. cold start -----------------------------------------------------------------------------


def serve_cold_start(directory: Path) -> float:
    directory.mkdir()
    started = time.monotonic()
    process, url = start_server(directory, 1_000)
    try:
        while httpx.get(f"{url}/health").status_code != 200:
            time.sleep(0.01)
        return time.monotonic() - started
    finally:
        process.terminate()
        process.wait(30)


# -- 2. admission ------------------------------------------------------------------------------


def worker_admission(worker: PythonWorker, args: argparse.Namespace) -> list[dict[str, Any]]:
    httpx.post(f"{worker.url}/worlds", json={"name": "bench", "world_id": "bench"}, headers=ADMIN).raise_for_status()
    asyncio.run(over_http(worker.url, min(args.count, 300), args.concurrency, args.max_seconds, "warm-up", key="w"))
    rows = []
    for concurrency in (1, args.concurrency):
        pid = worker.pid
        assert pid is not None
        before = cpu_seconds(pid)
        row = asyncio.run(over_http(worker.url, args.count, concurrency, args.max_seconds,
                                    f"Worker (workerd), {concurrency} in flight", key=f"c{concurrency}"))  # fmt: skip
        row["cpu_ms"] = round((cpu_seconds(pid) - before) * 1000 / int(row["commands"]), 3)
        rows.append(row)
    return rows


# -- 3. the moving world -----------------------------------------------------------------------


def stats(worker: PythonWorker, world_id: str) -> dict[str, int]:
    answer = httpx.get(f"{worker.url}/_test/objects/{world_id}/stats", timeout=120)
    answer.raise_for_status()
    return dict(answer.json())


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {key: after[key] - before[key] for key in ("rpc_calls", "alarms", "rows_read", "rows_written")}


def spawn_until(worker: PythonWorker, world_id: str, spawned: int, target: int) -> None:
    """Admit spawns (1,000 per batch, due at once: each batch for a tick of its own, the quota being
    1,000 per principal per tick) until the world was sent `target`; wait until applied."""
    last = None
    while spawned < target:
        count = min(1_000, target - spawned)
        key = f"spawn-{spawned}"
        answer = httpx.post(f"{worker.url}/worlds/{world_id}/commands:batch", timeout=120,
                            json={"commands": [mover(spawned + n, tick=spawned // 1_000) for n in range(count)]},
                            headers={**PLAYER, "Idempotency-Key": key})  # fmt: skip
        answer.raise_for_status()
        last, spawned = f"{key}.{count - 1}", spawned + count
    deadline = time.monotonic() + 600
    while last and httpx.get(f"{worker.url}/worlds/{world_id}/commands/{last}", headers=PLAYER, timeout=120).json()["status"] != "APPLIED":
        assert time.monotonic() < deadline, f"the spawns of {world_id} were not applied within 600 s"
        time.sleep(0.5)


async def steps_since(url: str, world_id: str, after_tick: int) -> int:
    """Manifests published after `after_tick`: the steps the world ran (its ticks jump, at 1 ms a tick)."""
    authority, count = HttpAuthority(url, token="admin", timeout=120), 0
    try:
        while page := await authority.manifests(world_id, after_tick=after_tick, limit=100):
            count += len(page)
            after_tick = page[-1]["tick"]
    finally:
        await authority.close()
    return count


def edge_moving(worker: PythonWorker, sizes: list[int], seconds: float) -> list[dict[str, Any]]:
    httpx.post(f"{worker.url}/worlds", json={"name": "moving", "world_id": MOVING_WORLD}, headers=ADMIN).raise_for_status()
    rows, spawned = [], 0
    for size in sizes:
        spawn_until(worker, MOVING_WORLD, spawned, size)
        spawned = size
        head = httpx.get(f"{worker.url}/worlds/{MOVING_WORLD}", headers=ADMIN, timeout=120).json()["tick_head"]
        before, started = stats(worker, MOVING_WORLD), time.monotonic()
        time.sleep(seconds)
        after, elapsed = stats(worker, MOVING_WORLD), time.monotonic() - started

        steps = asyncio.run(steps_since(worker.url, MOVING_WORLD, head))
        moved = delta(after, before)
        pid = worker.pid
        assert pid is not None
        rows.append({"entities": size, "steps": steps, "steps_per_s": steps / elapsed,
                     "rows_read_per_step": moved["rows_read"] / steps, "rows_written_per_step": moved["rows_written"] / steps,
                     "wasm_mb": after["wasm_memory_bytes"] / MB, "workerd_peak_rss_mb": peak_rss_mb(pid),
                     "database_mb": after["database_bytes"] / MB})  # fmt: skip
    return rows


async def local_moving(directory: Path, sizes: list[int], seconds: float) -> list[dict[str, Any]]:
    """The same world on the local authority, in process, stepped back to back."""
    rows = []
    async with await Runtime.open_local(directory, audit=None) as rt:
        set_up_modules(rt, [edge_worlds])
        await rt.dispatcher.apply(CreateWorld(name="moving", world_id=MOVING_WORLD))
        spawned = 0
        for size in sizes:
            while spawned < size:
                count = min(1_000, size - spawned)
                items = [DeferredItem(op=Spawn(world_id=MOVING_WORLD, components=[Position(x=float(spawned + n), y=0.0),
                                                                                  Velocity(dx=1.0, dy=0.5)]),
                                      options=DurableOptions(tick=0)) for n in range(count)]  # fmt: skip
                await rt.dispatcher.defer_batch(items)
                await rt.worlds.step(MOVING_WORLD)
                spawned += count
            steps, started = 0, time.monotonic()
            while time.monotonic() - started < seconds:
                await rt.worlds.step(MOVING_WORLD)
                steps += 1
            rows.append({"entities": size, "steps": steps, "steps_per_s": steps / (time.monotonic() - started)})
    return rows


# -- 4. rows per command lifecycle -------------------------------------------------------------


def queued_events(worker: PythonWorker, world_id: str) -> int:
    return sum(1 for message in worker.queue.messages.values() if json.loads(message.body)["world_id"] == world_id)


def settle(worker: PythonWorker, world_id: str, events: int) -> dict[str, int]:
    """The object's stats once the queue holds `events` of its events and its counters stopped moving
    (the acknowledgement follows the last send). Waits on the queue, never on the object: a read of
    it would count."""
    deadline = time.monotonic() + 300
    while queued_events(worker, world_id) < events:
        assert time.monotonic() < deadline, f"{world_id}: {queued_events(worker, world_id)} of {events} events delivered"
        time.sleep(0.2)
    previous, current = None, stats(worker, world_id)
    while current != previous:
        time.sleep(1.5)
        previous, current = current, stats(worker, world_id)
    return current


def lifecycle(worker: PythonWorker, world_id: str, batch: int, ticks: int) -> dict[str, float]:
    """`ticks` ticks of `batch` spawns each, admitted over HTTP (one batch request a tick), applied
    (runner-hosted: a runner's Step over HTTP; edge-hosted: the object's alarm), delivered to the
    queue by the alarm; per command: object requests and rows, Worker requests, and workerd's CPU
    time (the Worker's, the objects' and its own)."""
    edge = edge_worlds.edge_hosted(world_id)
    pid = worker.pid
    assert pid is not None

    def submit(commands: list[dict[str, Any]], key: str) -> None:
        answer = httpx.post(f"{worker.url}/worlds/{world_id}/commands:batch", json={"commands": commands},
                            headers={**PLAYER, "Idempotency-Key": key}, timeout=120)  # fmt: skip
        answer.raise_for_status()

    httpx.post(f"{worker.url}/worlds", json={"name": "rows", "world_id": world_id}, headers=ADMIN).raise_for_status()
    runner_calls = 0

    async def run() -> dict[str, int]:
        nonlocal runner_calls
        authority = HttpAuthority(worker.url, token="admin", timeout=120)
        call = authority.rpc

        async def counted(method: str, arguments: dict[str, Any]) -> Any:
            nonlocal runner_calls
            runner_calls += 1
            return await call(method, arguments)

        runner = Runtime(authority, owner="bench-runner", lease_ms=30_000, origin="gateway")
        try:
            if not edge:
                await runner.dispatcher.apply(Step(world_id=world_id))  # loads the world: steady state from here
            admitted = 1 if edge else 0
            if edge:  # the object loads its world at its first step
                submit([mover(0)], "warm")
            before = settle(worker, world_id, 2 * admitted)
            cpu[0] = cpu_seconds(pid)
            authority.rpc = counted  # type: ignore[method-assign]
            for tick in range(ticks):
                head = (await authority.world_info(world_id))["tick_head"] if not edge else 0
                submit([mover(n, tick=head + 1) for n in range(batch)], f"t{tick}")
                if not edge:
                    await runner.dispatcher.apply(Step(world_id=world_id))
                else:
                    settle(worker, world_id, 2 * (admitted + (tick + 1) * batch))
            after = settle(worker, world_id, 2 * (admitted + ticks * batch))
            cpu[1] = cpu_seconds(pid)
            return delta(after, before)
        finally:
            await authority.close()

    cpu = [0.0, 0.0]
    moved = asyncio.run(run())
    commands = batch * ticks
    world_info_calls = 0 if edge else ticks  # the bench's own reads of the tick head, not a runner's
    return {"commands": commands, "object_requests": (moved["rpc_calls"] + moved["alarms"] - world_info_calls) / commands,
            "alarms": moved["alarms"] / commands, "rows_read": moved["rows_read"] / commands,
            "rows_written": moved["rows_written"] / commands,
            "worker_requests": (ticks + runner_calls - world_info_calls) / commands,
            "cpu_ms": (cpu[1] - cpu[0]) * 1000 / commands}  # fmt: skip


def standin_per_command(batch: int, ticks: int) -> tuple[float, float, float]:
    phases = asyncio.run(standin_lifecycle(batch, ticks))
    return standin_report(f"stand-in engine, {batch} per tick", phases, batch * ticks)


def retention(worker: PythonWorker, world_id: str, **policy: int) -> tuple[int, float]:
    """Prune `world_id` now with `policy` (Ledger.prune's arguments); (what it pruned, rows written per
    row pruned): what retention adds, at steady state, to each tick or command once it is old."""

    async def prune() -> dict[str, Any]:
        authority = HttpAuthority(worker.url, token="admin", timeout=120)
        try:
            return dict(await authority.prune(world_id, limit=100_000, **policy))
        finally:
            await authority.close()

    before = stats(worker, world_id)
    pruned = asyncio.run(prune())
    written = stats(worker, world_id)["rows_written"] - before["rows_written"]
    count = pruned["ticks"] + pruned["commands"]
    return count, written / max(1, count)


# -- 5. dollars --------------------------------------------------------------------------------


def command_usage(row: dict[str, float], events: int = 2) -> Usage:
    """A command's billable units: what its lifecycle measured (each alarm armed by a setAlarm, one
    row written), its audit events through the queue (3 operations each), and, for the Worker's CPU
    and the object's duration both, workerd's CPU time per command (an upper bound of each: it is
    the Worker's, the objects' and workerd's own, and an object waits on little but its disk)."""
    return Usage(object_requests=row["object_requests"], object_seconds=row["cpu_ms"] / 1000, rows_read=row["rows_read"],
                 rows_written=row["rows_written"] + row["alarms"], worker_requests=row["worker_requests"],
                 worker_cpu_ms=row["cpu_ms"], queue_operations=3 * events)  # fmt: skip


def tick_usage(moving_row: dict[str, Any], pruned_rows: float) -> Usage:
    """One alarm-run step of an edge-hosted world: an alarm (a request, and its setAlarm as a row
    written), its rows and their pruning, and the object's wall time for it (measured back to back)."""
    return Usage(object_requests=1, object_seconds=1 / moving_row["steps_per_s"], rows_read=moving_row["rows_read_per_step"],
                 rows_written=moving_row["rows_written_per_step"] + 1 + pruned_rows)  # fmt: skip


def storage(database_mb: float) -> Usage:
    return Usage(stored_gb_months=database_mb / 1024 / HOURS_PER_MONTH)


# -- the run -----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=300, help="admissions per HTTP phase (at most 350: the Worker "
                        "admits 1,000 commands per principal per tick, warm-up included)")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--max-seconds", type=float, default=60.0, help="time bound per admission phase")
    parser.add_argument("--entities", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds each moving world steps")
    parser.add_argument("--ticks", type=int, default=5, help="ticks per lifecycle measurement")
    parser.add_argument("--no-record", action="store_true", help="print only; leave docs/performance.md alone")
    args = parser.parse_args()
    if min(args.count, 300) + 2 * args.count > DEFAULT_QUOTA:
        parser.error(f"--count {args.count}: the phases would admit more than the Worker's quota of {DEFAULT_QUOTA}")

    with tempfile.TemporaryDirectory(prefix="archetype-bench-") as tmp:
        directory = Path(tmp)
        serve_start = serve_cold_start(directory / "serve-start")
        serve_rows = serve_phases(directory / "serve", args, "serve (local authority), ", None, 0)
        local_rows = asyncio.run(local_moving(directory / "local-moving", args.entities, args.seconds))
        standin = {batch: standin_per_command(batch, args.ticks) for batch in (1, 100)}
        worker = PythonWorker(tokens=TOKENS, modules=("bench.edge_worlds",),
                              vars={"TICK_INTERVAL_MS": "1", "KEEP_TICKS": "1000000000"})  # fmt: skip
        try:
            idle_wasm_mb = stats(worker, "idle")["wasm_memory_bytes"] / MB
            worker_rows = worker_admission(worker, args)
            lifecycles = {(kind, batch): lifecycle(worker, f"{prefix}rows-{batch}", batch, args.ticks)
                          for kind, prefix in (("runner-hosted", "w-"), ("edge-hosted", "edge-")) for batch in (1, 100)}  # fmt: skip
            idle_db_mb = stats(worker, "edge-rows-1")["database_bytes"] / MB
            moving_rows = edge_moving(worker, [0, *args.entities], args.seconds)
            pruned_ticks = retention(worker, MOVING_WORLD, keep_ticks=1, idempotency_window_ms=10**12)
            pruned_commands = retention(worker, "w-rows-100", idempotency_window_ms=0)
            worker.restart()
            cold_starts, build_s = list(worker.cold_starts), worker.build_s
        finally:
            worker.close()
    load = f"{os.getloadavg()[0]:.1f}"
    lines = render(args, load, serve_start, cold_starts, build_s, serve_rows, worker_rows, local_rows, moving_rows,
                   idle_wasm_mb, lifecycles, standin, idle_db_mb, pruned_ticks, pruned_commands)  # fmt: skip
    print("\n".join(lines))
    if not args.no_record:
        replace_section(HEADING, lines)


def render(args: argparse.Namespace, load: str, serve_start: float, cold_starts: list[float], build_s: float,
           serve_rows: list[dict[str, Any]], worker_rows: list[dict[str, Any]], local_rows: list[dict[str, Any]],
           moving_rows: list[dict[str, Any]], idle_wasm_mb: float, lifecycles: dict[tuple[str, int], dict[str, float]],
           standin: dict[int, tuple[float, float, float]], idle_db_mb: float, pruned_ticks: tuple[int, float],
           pruned_commands: tuple[int, float]) -> list[str]:  # fmt: skip
    by_size = {row["entities"]: row for row in local_rows}
    lines = [
        HEADING, "",
        f"`{' '.join(['bench/workerd_runtime.py', *sys.argv[1:]])}` on {platform.machine()} (2 cores shared with other "
        f"jobs, load average {load} at the end), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: the staged Worker "
        f"in workerd {workerd_version()} with the offline Pyodide bundle, on 127.0.0.1, its "
        "objects' SQLite on local disk (tests/support/workerd/python_worker.py), against the local authority in the "
        "same run.", "",
        "| cold start | seconds | vs `archetype serve` |", "|---|---|---|",
        f"| `archetype serve` started -> first `/health` (baseline) | {serve_start:.2f} | 1.00x |",
        *(f"| workerd started -> the Worker's first `/health`{' (after a restart on the same disk)' if n else ''} | "
          f"{seconds:.1f} | {seconds / serve_start:.1f}x |" for n, seconds in enumerate(cold_starts)),
        f"| (staging the Worker and writing the config, before the first start) | {build_s:.1f} | |", "",
        "| HTTP admission | commands | commands/s | p50 ms | p99 ms | vs serve | server CPU ms per admission |",
        "|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for serve_row, worker_row in zip(serve_rows, worker_rows, strict=True):
        for row, base in ((serve_row, serve_row), (worker_row, serve_row)):
            lines.append(f"| {row['phase']} | {row['commands']} | {row['per_s']} | {row['p50_ms']} | {row['p99_ms']} | "
                         f"{float(row['per_s']) / float(base['per_s']):.2f}x | {row['cpu_ms']} |")  # fmt: skip
    lines += [
        "", "| edge-hosted world, per-entity processor | steps/s | local authority steps/s (baseline) | ratio | "
        "rows read / written per step | Pyodide heap (WebAssembly memory) | workerd peak RSS |",
        "|---|---|---|---|---|---|---|",
        *(f"| {row['entities']:,} entities | {row['steps_per_s']:.2f} | "
          + (f"{by_size[row['entities']]['steps_per_s']:.2f} | {row['steps_per_s'] / by_size[row['entities']]['steps_per_s']:.2f}x"
             if row["entities"] in by_size else "| ")
          + f" | {row['rows_read_per_step']:.0f} / {row['rows_written_per_step']:.0f} | {row['wasm_mb']:.0f} MB of 128 | "
            f"{row['workerd_peak_rss_mb']:.0f} MB |" for row in moving_rows),
        f"| (the isolate before any world was loaded) | | | | | {idle_wasm_mb:.0f} MB of 128 | |", "",
        "| per command lifecycle | object requests | of them alarms | rows read | rows written | Worker requests | "
        "workerd CPU ms | stand-in engine rows read / written (baseline) |", "|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for (kind, batch), row in lifecycles.items():
        base = standin[batch]
        lines.append(f"| {kind}, {batch} per tick | {row['object_requests']:.2f} | {row['alarms']:.2f} | {row['rows_read']:.1f} | "
                     f"{row['rows_written']:.1f} | {row['worker_requests']:.2f} | {row['cpu_ms']:.1f} | "
                     f"{base[1]:.1f} / {base[2]:.1f} |")  # fmt: skip
    lines += [
        "", f"Retention (`Ledger.prune` over the Worker's ledger route): {pruned_ticks[0]} old ticks of the moving world "
        f"pruned at {pruned_ticks[1]:.1f} rows written each, {pruned_commands[0]} settled commands at "
        f"{pruned_commands[1]:.1f} rows written each: at steady state every tick and every command is pruned once, "
        "so the costs below add these to each.",
    ]  # fmt: skip
    per_command = {key: command_usage(row) + Usage(rows_written=pruned_commands[1]) for key, row in lifecycles.items()}
    moving = {row["entities"]: row for row in moving_rows}
    busy_size = min(args.entities)
    hour = 3600 * TICKS_PER_S
    worlds = {
        "idle, no processor (sleeps: storage only)": storage(idle_db_mb),
        "idle, ticking at 1 Hz with nothing to move": tick_usage(moving[0], pruned_ticks[1]) * hour
            + storage(moving[0]["database_mb"]),
        f"busy: {busy_size:,} moving entities at 1 Hz + {BUSY_COMMANDS_PER_S} commands/s (edge-hosted, 1 per tick)":
            tick_usage(moving[busy_size], pruned_ticks[1]) * hour + per_command[("edge-hosted", 1)] * (BUSY_COMMANDS_PER_S * 3600)
            + storage(moving[busy_size]["database_mb"]),
    }  # fmt: skip
    items = list(usd_by_item(Usage()))
    lines += [
        "", f"Prices: Cloudflare's published Workers Paid rates, read {PRICES_READ_ON} (bench/prices.py: the marginal "
        "price of each unit, the plan's included amounts left out).", "",
        "| USD | total | " + " | ".join(items) + " |", "|---|---|" + "---|" * len(items),
        *(f"| per million commands, {kind}, {batch} per tick | {usd(usage) * 1e6:.2f} | "
          + " | ".join(f"{value * 1e6:.3f}" for value in usd_by_item(usage).values()) + " |"
          for (kind, batch), usage in per_command.items()),
        *(f"| per world-hour, {name} | {usd(usage):.3g} | " + " | ".join(f"{value:.3g}" for value in usd_by_item(usage).values())
          + " |" for name, usage in worlds.items()),
        "",
    ]  # fmt: skip
    return lines


if __name__ == "__main__":
    main()
