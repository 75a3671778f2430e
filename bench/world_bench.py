"""World ticks: moving-entity worlds (durable at synchronous=FULL and in memory, per-entity and
vectorised processors) beside a plain dict loop, numpy and esper, all in the same run; the idle
tick; publication cost per changed entity (with raw sqlite3 writing the same bytes); rows written
per tick on the Durable Object port.

Every round runs one tick of every contestant in turn (interleaved, so background load hits all
of them alike); a figure is the best round of `--rounds`. esper is a bench-only package: run this
with the bench environment (`bench/setup-env`, then `bench/.venv/bin/python bench/world_bench.py`);
without it the esper column says so.

`--baseline-src DIR` also runs the per-entity worlds on another version of the code (a `src/`
tree, e.g. `git archive <commit> src | tar -x -C /tmp/base`), each in its own process
(bench/tick_server.py), ticked in the same rounds: the "before" of every ratio.

    bench/.venv/bin/python bench/world_bench.py [--sizes 10000,100000] [--rounds 5] [--baseline-src DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the DO stand-in lives in tests/support

from moving import Position, Velocity, move_columns, move_each

from archetype.commands.port import ManualClock
from archetype.runtime import Runtime
from archetype.vector import add_vector_processor
from archetype.world import AsyncWorld, CreateWorld
from archetype.world.columnar import CHUNK_BYTES
from durable_world import DurableObjectAuthority
from local_catalog import CATALOG_FILE, open_local_authority

try:
    import esper
except ImportError:  # run outside the bench environment
    esper = None

TARGET_VECTOR_TICKS = 20  # ticks/s, 100,000 moving entities, vectorised, durable at FULL
TARGET_PROCESSOR_VS_NUMPY = 3.0  # vectorised processor phase / numpy alone
TARGET_ENTITY_SPEEDUP = 5.0  # per-entity API, durable, against the code before (--baseline-src)
TARGET_IDLE_MS = 1.0
TARGET_PUBLISH_US = 1.0
MEAN_OF = ("durable, vectorised", "before: durable, vectorised")
MOVING_TICKS = 6  # two cycles of snapshot and column deltas


def _spawn_all(world: AsyncWorld, n: int) -> None:
    world.atomically(lambda: [world.spawn([Position(x=float(i), y=0.0), Velocity(dx=1.0, dy=0.5)]) for i in range(n)])


async def _durable_world(directory: Path, n: int, name: str) -> tuple[Runtime, AsyncWorld]:
    rt = Runtime(open_local_authority(directory, synchronous="FULL"), owner=f"bench-{name}")
    world_id = await rt.dispatcher.apply(CreateWorld(name=name, world_id=name))
    world = await rt.worlds.get(world_id)
    await world.ensure_entity_ids(n)
    async with world.lock:
        _spawn_all(world, n)
    await world.step()
    return rt, world


async def _memory_world(n: int) -> AsyncWorld:
    world = AsyncWorld("memory")
    await world.ensure_entity_ids(n)
    async with world.lock:
        _spawn_all(world, n)
    await world.step()
    return world


class Phase:
    """Times the processor phase of a world's ticks (its `_run_systems`)."""

    def __init__(self, world: AsyncWorld) -> None:
        self.last = 0.0
        run = world._run_systems

        def timed(tick: int) -> None:
            start = time.perf_counter()
            run(tick)
            self.last = time.perf_counter() - start

        world._run_systems = timed  # type: ignore[method-assign]


# -- the baselines --
class DictLoop:
    def __init__(self, n: int) -> None:
        self.position = {i: (float(i), 0.0) for i in range(1, n + 1)}
        self.velocity = dict.fromkeys(range(1, n + 1), (1.0, 0.5))

    def tick(self) -> None:
        position, velocity = self.position, self.velocity
        for entity_id, (x, y) in position.items():
            dx, dy = velocity[entity_id]
            position[entity_id] = (x + dx, y + dy)


class NumpyLoop:
    def __init__(self, n: int) -> None:
        self.x, self.y = np.arange(n, dtype=np.float64), np.zeros(n)
        self.dx, self.dy = np.ones(n), np.full(n, 0.5)

    def tick(self) -> None:
        self.x += self.dx
        self.y += self.dy


@dataclass
class EPosition:
    x: float
    y: float


@dataclass
class EVelocity:
    dx: float
    dy: float


class EsperLoop:
    def __init__(self, n: int) -> None:
        assert esper is not None
        esper.switch_world(f"bench-{n}")
        esper.clear_database()
        for i in range(n):
            esper.create_entity(EPosition(float(i), 0.0), EVelocity(1.0, 0.5))

    def tick(self) -> None:
        assert esper is not None
        for _, (p, v) in esper.get_components(EPosition, EVelocity):
            p.x += v.dx
            p.y += v.dy


class Baseline:
    """A moving world of another code version, in its own process (bench/tick_server.py)."""

    def __init__(self, src: Path, n: int, kind: str, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONPATH": str(src)}
        server = Path(__file__).with_name("tick_server.py")
        self.process = subprocess.Popen([sys.executable, str(server), str(n), kind, str(directory)], env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
        assert self.process.stdin is not None and self.process.stdout is not None
        self.stdin, self.stdout = self.process.stdin, self.process.stdout
        if self.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the baseline {kind} world did not start")

    def tick(self) -> float:
        self.stdin.write("tick\n")
        self.stdin.flush()
        return float(self.stdout.readline())

    def close(self) -> None:
        self.stdin.write("quit\n")
        self.stdin.flush()
        self.process.wait(timeout=60)


# -- the moving worlds --
async def moving(n: int, rounds: int, directory: Path, baseline_src: Path | None, per_entity: bool = True) -> dict[str, float]:
    contestants: dict[str, Callable[[], Awaitable[None]]] = {}
    phases: dict[str, Phase] = {}
    timed_elsewhere: dict[str, Baseline] = {}
    if baseline_src is not None:
        if per_entity:
            timed_elsewhere["before: durable, per-entity"] = Baseline(baseline_src, n, "durable", directory / "before")
            timed_elsewhere["before: in memory, per-entity"] = Baseline(baseline_src, n, "memory", directory / "before-m")
        if (baseline_src / "archetype" / "vector.py").exists():  # the code before issue 11 had no vectorised API
            timed_elsewhere["before: durable, vectorised"] = Baseline(baseline_src, n, "durable-vector", directory / "before-v")
    rt_v, durable_vector = await _durable_world(directory / "vector", n, "vector")
    add_vector_processor(durable_vector, move_columns, Position, Velocity, writes=[Position])
    phases["durable, vectorised"] = Phase(durable_vector)
    contestants["durable, vectorised"] = durable_vector.step
    runtimes = [rt_v]
    if per_entity:
        rt_e, durable_entity = await _durable_world(directory / "entity", n, "entity")
        runtimes.append(rt_e)
        durable_entity.add_processor(move_each, Position, Velocity)
        contestants["durable, per-entity"] = durable_entity.step
    memory_vector = await _memory_world(n)
    add_vector_processor(memory_vector, move_columns, Position, Velocity, writes=[Position])
    contestants["in memory, vectorised"] = memory_vector.step
    if per_entity:
        memory_entity = await _memory_world(n)
        memory_entity.add_processor(move_each, Position, Velocity)
        contestants["in memory, per-entity"] = memory_entity.step
    for label, loop in (("plain dict loop", DictLoop(n)), ("numpy", NumpyLoop(n)),
                        *((("esper", EsperLoop(n)),) if esper is not None else ())):  # fmt: skip
        contestants[label] = _sync(loop.tick)
    best = {label: float("inf") for label in [*timed_elsewhere, *contestants]}
    best["vector processor phase"] = float("inf")
    # a durable world's ticks are not alike (a moving world sends a snapshot every few ticks, deltas
    # between): their mean over the rounds is its rate, the best round alone would flatter it
    total = {label: 0.0 for label in MEAN_OF if label in best}
    for _ in range(rounds):
        for label, baseline in timed_elsewhere.items():
            seconds = baseline.tick()
            best[label] = min(best[label], seconds)
            if label in total:
                total[label] += seconds
        for label, tick in contestants.items():
            gc.collect()
            start = time.perf_counter()
            await tick()
            seconds = time.perf_counter() - start
            best[label] = min(best[label], seconds)
            if label in total:
                total[label] += seconds
            if label in phases:
                best["vector processor phase"] = min(best["vector processor phase"], phases[label].last)
    for rt in runtimes:
        await rt.close()
    for baseline in timed_elsewhere.values():
        baseline.close()
    best.update({f"{label}, mean": seconds / rounds for label, seconds in total.items()})
    return best


def _sync(fn: Callable[[], None]) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        fn()

    return run


# -- idle tick, publication per changed entity --
async def publication(n: int, changes: list[int], rounds: int, directory: Path) -> dict[str, Any]:
    rt, world = await _durable_world(directory / "publish", n, "publish")
    authority = rt.authority
    publish = authority.publish
    spent: dict[str, Any] = {}

    async def timed_publish(world_id: str, owner: str, session: str, manifest: Any, writes: Any) -> Any:
        start = time.perf_counter()
        try:
            return await publish(world_id, owner, session, manifest, writes)
        finally:
            spent["publish"] = time.perf_counter() - start
            spent["chunks"] = writes["chunks"]

    authority.publish = timed_publish  # type: ignore[method-assign]
    raw = RawChunks(directory / "publish" / CATALOG_FILE)
    ids = sorted(e for e, _ in world.state.items())
    best: dict[str, Any] = {k: [float("inf")] * 4 for k in changes}  # tick, publish, raw, chunks
    lease = authority.lease

    async def timed_lease(*args: Any) -> Any:
        start = time.perf_counter()
        try:
            return await lease(*args)
        finally:
            spent["lease"] = time.perf_counter() - start

    authority.lease = timed_lease  # type: ignore[method-assign]
    best["idle"] = best["idle, world only"] = float("inf")
    for r in range(rounds):
        gc.collect()
        start = time.perf_counter()
        await world.step()
        elapsed = time.perf_counter() - start
        best["idle"] = min(best["idle"], elapsed)
        # the world's own part: the tick less its two ledger transactions (lease, publish)
        best["idle, world only"] = min(best["idle, world only"], elapsed - spent["lease"] - spent["publish"])
        for k in changes:
            # spread over the world: every k-th entity, so changes touch the whole id range
            stride = max(1, n // max(k, 1))
            chosen = ids[::stride][:k]
            async with world.lock:
                world.atomically(lambda chosen=chosen, r=r, k=k: [world.update(e, [Position(x=float(r), y=float(k))]) for e in chosen])
            gc.collect()
            start = time.perf_counter()
            await world.step()
            elapsed = time.perf_counter() - start
            chunks = spent["chunks"]  # what the tick sent (a delta's chunks, or a snapshot's)
            raw_time = raw.write(chunks)
            figures = best[k]
            best[k] = [min(figures[0], elapsed), min(figures[1], spent["publish"]), min(figures[2], raw_time), len(chunks)]
    raw.close()
    await rt.close()
    return best


class RawChunks:
    """Raw sqlite3 writing the same chunk texts in one transaction, WAL, synchronous=FULL."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA busy_timeout = 30000")
        self.conn.execute("PRAGMA synchronous = FULL")
        self.tick = 0

    def write(self, chunks: list[str]) -> float:
        self.tick += 1
        start = time.perf_counter()
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.executemany("INSERT INTO state_deltas (world_id, tick, part, body) VALUES ('raw', ?, ?, ?)",
                              [(self.tick, part, chunk) for part, chunk in enumerate(chunks)])  # fmt: skip
        self.conn.execute("COMMIT")
        return time.perf_counter() - start

    def close(self) -> None:
        self.conn.close()


# -- rows written per tick on the Durable Object port --
async def durable_object_rows(n: int, changes: list[int]) -> tuple[dict[int, tuple[int, int]], list[tuple[bool, int, int]]]:
    from tests.support.durable_object_standin import world_namespace

    with tempfile.TemporaryDirectory() as directory:
        namespace = world_namespace(Path(directory), ManualClock())
        sql = namespace.storage("do-world").sql
        counted = {"statements": 0, "written": 0}
        exec_ = sql.exec

        def metered(query: str, *bindings: Any) -> Any:
            cursor = exec_(query, *bindings)
            counted["statements"] += 1
            counted["written"] += int(cursor.rowsWritten)
            return cursor

        sql.exec = metered
        rt = Runtime(DurableObjectAuthority(namespace), owner="bench-do", origin="gateway")
        await rt.dispatcher.apply(CreateWorld(name="do", world_id="do-world"))
        world = await rt.worlds.get("do-world")
        await world.ensure_entity_ids(n)
        async with world.lock:
            _spawn_all(world, n)
        await world.step()
        ids = sorted(e for e, _ in world.state.items())
        rows: dict[int, tuple[int, int]] = {}
        for k in changes:
            chosen = ids[:: max(1, n // max(k, 1))][:k]
            async with world.lock:
                world.atomically(lambda chosen=chosen, k=k: [world.update(e, [Position(x=-1.0, y=float(k))]) for e in chosen])
            counted.update(statements=0, written=0)
            await world.step()
            rows[k] = (counted["statements"], counted["written"])
        # the moving world: every Position moves each tick (a vectorised processor), Velocity never
        add_vector_processor(world, move_columns, Position, Velocity, writes=[Position])
        moving_rows = []
        for _ in range(MOVING_TICKS):
            counted.update(statements=0, written=0)
            sent = []
            publish = world.publisher.publish

            async def recorded(prepared: Any, publish: Any = publish, sent: list[Any] = sent) -> None:
                sent.append(prepared.snapshot)
                await publish(prepared)

            world.publisher.publish = recorded  # type: ignore[method-assign]
            await world.step()
            world.publisher.publish = publish  # type: ignore[method-assign]
            moving_rows.append((sent[0], counted["statements"], counted["written"]))
        namespace.close()
    return rows, moving_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--changes", default="0,100,1000,100000")
    parser.add_argument("--baseline-src", type=Path, help="a src/ tree of the code to compare against")
    parser.add_argument("--vectorised-only", action="store_true",
                        help="no per-entity worlds (their ticks and disk writes interleave with the vectorised ones)")  # fmt: skip
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    changes = [int(c) for c in args.changes.split(",")]
    checks: list[bool] = []
    print(f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}, numpy {np.__version__}, "
          f"esper {getattr(esper, '__version__', 'not installed')}; best of {args.rounds} interleaved rounds")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            best = asyncio.run(moving(n, args.rounds, Path(tmp) / f"moving-{n}", args.baseline_src, not args.vectorised_only))
            print(f"\n{n:,} moving entities (Position + Velocity, every one moves each tick)")
            numpy_time = best["numpy"]
            for label, seconds in best.items():
                print(f"  {label:<24} {seconds * 1e3:9.2f} ms/tick {n / seconds:14,.0f} updates/s  "
                      f"{seconds / numpy_time:8.1f}x numpy")  # fmt: skip
            if n == 100_000:
                ticks = 1 / best["durable, vectorised, mean"]
                ratio = best["vector processor phase"] / numpy_time
                checks += [ticks >= TARGET_VECTOR_TICKS, ratio <= TARGET_PROCESSOR_VS_NUMPY]
                print(f"  target: vectorised durable >= {TARGET_VECTOR_TICKS} ticks/s (mean of the rounds): {ticks:.1f} "
                      f"{'PASS' if checks[-2] else 'FAIL'}; processor phase <= {TARGET_PROCESSOR_VS_NUMPY}x numpy: "
                      f"{ratio:.1f}x {'PASS' if checks[-1] else 'FAIL'}")  # fmt: skip
            if "before: durable, vectorised, mean" in best:
                print(f"  durable, vectorised: {best['before: durable, vectorised, mean'] / best['durable, vectorised, mean']:.1f}x "
                      "the code before (mean of the rounds)")  # fmt: skip
            if args.baseline_src is not None and not args.vectorised_only:
                for kind in ("durable", "in memory"):
                    speedup = best[f"before: {kind}, per-entity"] / best[f"{kind}, per-entity"]
                    vector = best[f"before: {kind}, per-entity"] / best[f"{kind}, vectorised"]
                    if kind == "durable":
                        checks.append(speedup >= TARGET_ENTITY_SPEEDUP)
                    print(f"  {kind}: per-entity {speedup:.1f}x the code before (target >= {TARGET_ENTITY_SPEEDUP}x"
                          f"{', PASS' if speedup >= TARGET_ENTITY_SPEEDUP else ', FAIL'}), vectorised {vector:.1f}x")  # fmt: skip
        n = max(sizes)
        pub = asyncio.run(publication(n, changes, args.rounds, Path(tmp)))
        print(f"\npublication, a {n:,}-entity world at synchronous=FULL (columnar chunks of about {CHUNK_BYTES:,} characters)")
        print(f"  idle tick: {pub['idle, world only'] * 1e3:.3f} ms in the world (target <= {TARGET_IDLE_MS} ms), "
              f"{pub['idle'] * 1e3:.3f} ms with its lease and publish transactions at FULL")  # fmt: skip
        checks.append(pub["idle, world only"] * 1e3 <= TARGET_IDLE_MS)
        base_tick, base_publish, base_raw = pub[0][:3] if 0 in pub else (0.0, 0.0, 0.0)
        for k in changes:
            tick, publish, raw, chunks = pub[k]
            line = f"  {k:>7,} changed: tick {tick * 1e3:8.2f} ms, publish {publish * 1e3:8.2f} ms ({chunks} chunk rows), " \
                   f"raw sqlite3 same bytes {raw * 1e3:7.2f} ms"
            if k:
                per = (publish - base_publish) / k * 1e6
                line += f" | per changed entity: tick {(tick - base_tick) / k * 1e6:6.2f} us, publish {per:6.2f} us, " \
                        f"raw {(raw - base_raw) / k * 1e6:5.2f} us"
                if k >= 1000:
                    checks.append(per <= TARGET_PUBLISH_US)
            print(line)
    rows, moving_rows = asyncio.run(durable_object_rows(10_000, [0, 1, 100, 1000, 10_000]))
    print("\nDurable Object port (stand-in), 10,000-entity world: statements / rows written per tick")
    for k, (statements, written) in rows.items():
        print(f"  {k:>7,} changed: {statements:3} statements, {written:4} rows written")
    for snapshot, statements, written in moving_rows:
        print(f"  moving ({'snapshot' if snapshot else 'column delta'}): {statements:3} statements, {written:4} rows written")
    print(f"\n{sum(checks)}/{len(checks)} targets met")


if __name__ == "__main__":
    main()
