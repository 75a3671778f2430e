"""Ledger benchmarks (CPython only): the local authority against raw sqlite3 in the same run.

Three workloads, each beside a baseline that makes the same row writes with plain `sqlite3`
on the same catalog file, schema, indexes and durability (WAL, `synchronous` FULL and NORMAL):

* single admission: one `dispatcher.defer` per command, each its own transaction;
* batched admission: `dispatcher.defer_batch` of 1,000 commands;
* end to end: 10,000 commands due in one tick, admitted in batches of 1,000, then one `Step`
  (lease -> materialize -> publish of manifest, entities, settlements and outbox).

Each runs on a ledger already holding `small` and then `large` rows (bulk-admitted, due far in
the future, in the same world), so the per-command cost at both sizes can be compared.
Run `python bench/ledger_bench.py` or `archetype bench`; `--help` lists the knobs.
"""

from __future__ import annotations

import gc
import json
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from archetype.canonical import canonical_json
from archetype.commands import DeferredItem, DurableOptions, default_registry, ledger_sql
from archetype.commands.identity import command_digest
from archetype.commands.ledger_rows import AdmissionRow
from archetype.commands.registry import OperationRegistry
from archetype.commands.scheduler import schema_row
from archetype.runtime import Runtime
from archetype.world import Component, ComponentValue, Spawn, Step
from archetype.world.commit import chunk_entries
from local_catalog import CATALOG_FILE, open_local_authority

BENCH_WORLD = "bench"
RAW_WORLD = "raw-baseline"
FAR_TICK = 2**40  # filler rows are due long after any tick a run reaches
NEXT_TICK = 0  # the tick after a new world's head (-1): a command for it is due at once
BATCH = 1_000
E2E_COMMANDS = 10_000
SYNC_MODES = ("FULL", "NORMAL")

TARGET_SINGLE_RATIO = 0.5  # single admission >= 50% of raw sqlite3
TARGET_BATCH_RATE = 10_000  # commands/s
TARGET_E2E_RATE = 5_000  # commands/s
TARGET_SCALE_RATIO = 1.5  # per-command cost, large ledger / small ledger


class Position(Component):
    x: float
    y: float


def _spawn(world_id: str, n: int) -> Spawn:
    return Spawn(world_id=world_id, components=[Position(x=float(n), y=0.0)])


def _items(world_id: str, prefix: str, count: int, tick: int) -> list[DeferredItem]:
    return [DeferredItem(op=_spawn(world_id, i), options=DurableOptions(tick=tick), command_id=f"{prefix}-{i}") for i in range(count)]


# -- the raw sqlite3 baseline: the same rows, written directly --
def wal_pages_by_kind(db: Path) -> dict[tuple[str, str], int]:
    """The frames in `db`'s WAL, counted by the b-tree (table or index, from dbstat) each page
    belongs to and its kind (`leaf`, `internal`, `overflow`): what the commits since the last
    truncating checkpoint wrote. `sqlite_schema` is page 1 (the header, written when the file
    grows); a page of no b-tree is a freelist page, `(free)`. A b-tree written more than once per
    commit is splitting: its extra leaves and its internal pages are the rebalancing."""
    wal = db.parent / f"{db.name}-wal"
    data = wal.read_bytes() if wal.exists() else b""
    if len(data) < 32:
        return {}
    page_size = int.from_bytes(data[8:12], "big")
    pages = [int.from_bytes(data[at : at + 4], "big") for at in range(32, len(data) - page_size, 24 + page_size)]
    with sqlite3.connect(db) as conn:
        kinds = {page: (name, kind) for page, name, kind in conn.execute("SELECT pageno, name, pagetype FROM dbstat")}
    counted: dict[tuple[str, str], int] = {}
    for page in pages:
        found = kinds.get(page, ("(free)", "free"))
        counted[found] = counted.get(found, 0) + 1
    return counted


def wal_pages_by_btree(db: Path) -> dict[str, int]:
    """`wal_pages_by_kind`, summed per b-tree."""
    counted: dict[str, int] = {}
    for (name, _), count in wal_pages_by_kind(db).items():
        counted[name] = counted.get(name, 0) + count
    return counted


class RawLedger:
    """Plain sqlite3 doing the ledger's row writes for one world, with no validation or identity work."""

    def __init__(self, path: Path, synchronous: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA busy_timeout = 30000")
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute(f"PRAGMA synchronous = {synchronous}")
        self.resume()

    def resume(self) -> None:
        """Read the counters afresh: another workbench may have written this world meanwhile. (They are
        read off the keys, as the ledger reads them; the row writes keep them in memory.)"""
        row = self.conn.execute(
            f"SELECT {ledger_sql.NEXT_SEQUENCE_EXPR}, {ledger_sql.NEXT_EVENT_SEQ_EXPR}, w.tick_head, w.tail_first_seq, "
            "w.tail_events, json_array_length(w.tail_events) FROM worlds AS w WHERE w.world_id = ?", (RAW_WORLD,)
        ).fetchone()
        self.sequence, self.event_seq, self.tick = row[:3]
        # the world row's outbox tail (schema 22): its first event's number, its events, how many
        self.tail: tuple[int, str, int] | None = None if row[3] is None else row[3:]

    def close(self) -> None:
        self.conn.close()

    def _tx(self, fn: Callable[[], None]) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        fn()
        self.conn.execute("COMMIT")

    def _events(self, ids: list[str], event_type: str, status: str, tick: int, now: int) -> None:
        """The events of one transition of these commands, as the ledger keeps them (schema 22): on the
        world row's tail when they follow its last event and the two stay within OUTBOX_APPEND_LIMIT
        characters (written by the publication's world-row write), else one outbox row. Nothing here
        acknowledges events, so a tail is never taken over."""
        first, self.event_seq = self.event_seq, self.event_seq + len(ids)
        payload = json.dumps({"attempts": 0, "error": None, "max_attempts": 3})
        events = json.dumps([[cid, event_type, status, "spawn", tick, None, "local", payload, now] for cid in ids])
        if self.tail is None:
            tail: tuple[int, str, int] | None = (first, events, len(ids))
        elif self.tail[0] + self.tail[2] == first:
            tail = (self.tail[0], self.tail[1][:-1] + "," + events[1:], self.tail[2] + len(ids))
        else:
            tail = None
        if tail is not None and len(tail[1]) <= ledger_sql.OUTBOX_APPEND_LIMIT:
            self.tail = tail
            return
        self.conn.execute(
            "INSERT INTO outbox (world_id, last_seq, first_seq, occurred_at, events) VALUES (?, ?, ?, ?, ?)",
            (RAW_WORLD, self.event_seq - 1, first, now, events),
        )

    def _admitted_events(self, ids: list[str], tick: int, now: int) -> None:
        """An admission's events: numbered, not written (schema version 21: each is read off its
        command row, which carries its number)."""
        self.event_seq += len(ids)

    def admit(self, rows: list[dict[str, Any]]) -> None:
        def run() -> None:
            now = time.time_ns() // 1_000_000
            first, self.sequence = self.sequence, self.sequence + len(rows)
            # (a command due after the tick after the head enters the due index, as the ledger's: schema 20)
            self.conn.executemany(
                "INSERT INTO commands (world_id, command_id, sequence, schema_version, scheduled_tick, priority, "
                "operation, payload, digest, principal, origin, max_attempts, reserved_entity_id, status, is_open, scope, "
                "created_at, updated_at, due_later, admitted_event_seq) "
                "VALUES (?, ?, ?, 1, ?, 0, 'spawn', ?, ?, NULL, 'local', 3, NULL, 'PENDING', 1, '', ?, ?, ?, ?)",
                [(RAW_WORLD, r["command_id"], first + i, r["scheduled_tick"], r["payload"], r["digest"], now, now,
                  1 if r["scheduled_tick"] > self.tick + 1 else None, self.event_seq + i) for i, r in enumerate(rows)],
            )  # fmt: skip
            self._admitted_events([r["command_id"] for r in rows], rows[0]["scheduled_tick"], now)

        self._tx(run)

    def step(self, entities: list[str]) -> None:
        """Lease every due row, then publish the tick: manifest, entities, settlements, outbox, head."""
        tick = self.tick + 1
        now = time.time_ns() // 1_000_000
        due: list[str] = []

        def lease() -> None:
            due.extend(
                r[0]
                for r in self.conn.execute(
                    "SELECT command_id FROM (" + ledger_sql.open_commands("?1", "command_id, scheduled_tick, priority, sequence",
                                                                          "scheduled_tick <= ?2")
                    + ") ORDER BY scheduled_tick, priority, sequence",
                    (RAW_WORLD, tick),
                )
            )
            # a lease is an entry of the world row's lease map, as the ledger's (schema 17)
            leases = json.dumps({cid: ["raw", "raw", now + 30_000, now] for cid in due})
            self.conn.execute("UPDATE worlds SET leases = ? WHERE world_id = ?", (leases, RAW_WORLD))

        def publish() -> None:
            first = self.conn.execute(
                "UPDATE worlds SET next_entity_id = next_entity_id + ? WHERE world_id = ? RETURNING next_entity_id - ?",
                (len(entities), RAW_WORLD, len(entities)),
            ).fetchone()[0]
            manifest = json.dumps({"tick": tick, "applied_command_ids": due})
            self.conn.execute(
                "INSERT INTO ticks (world_id, tick, commit_token, manifest, published_at) VALUES (?, ?, ?, ?, ?)",
                (RAW_WORLD, tick, f"raw-{tick}-{now}", manifest, now),
            )
            chunks = chunk_entries((first + i, components) for i, components in enumerate(entities))
            self.conn.executemany(
                "INSERT INTO state_deltas (world_id, tick, part, body) VALUES (?, ?, ?, ?)",
                [(RAW_WORLD, tick, part, chunk) for part, chunk in enumerate(chunks)],
            )
            self.conn.executemany(
                "UPDATE commands SET status = 'APPLIED', is_open = NULL, attempts = attempts + 1, applied_tick = ?, "
                "updated_at = ? WHERE world_id = ? AND scope = '' AND command_id = ?",
                [(tick, now, RAW_WORLD, cid) for cid in due],
            )
            self._events(due, "applied", "APPLIED", tick, now)
            tail_first, tail_events = self.tail[:2] if self.tail else (None, None)
            self.conn.execute(f"UPDATE worlds SET tick_head = ?, leases = NULL, due_floor = {ledger_sql.DUE_FLOOR_EXPR}, "
                              "tail_first_seq = ?, tail_events = ? WHERE world_id = ?", (tick, tail_first, tail_events, RAW_WORLD))

        self._tx(lease)
        self._tx(publish)
        self.tick = tick


def _raw_rows(items: list[DeferredItem], registry: OperationRegistry) -> list[dict[str, Any]]:
    """The stored form of each item (payload, digest), computed outside the baseline's timing."""
    rows = []
    for item in items:
        row = {
            "command_id": item.command_id, "schema_version": 1, "world_id": RAW_WORLD,
            "scheduled_tick": item.options.tick, "priority": 0, "max_attempts": 3, "operation": "spawn",
            "payload": registry.resolve(item.op).payload_of(item.op), "principal": None,
        }  # fmt: skip
        rows.append({**row, "digest": command_digest(row)})
    return rows


# -- building a ledger of a given size --
async def build_ledger(directory: Path, rows: int) -> None:
    """Bulk-admit `rows` filler commands (due at FAR_TICK) into the bench world, at synchronous=NORMAL."""
    authority = open_local_authority(directory, synchronous="NORMAL")
    try:
        for world_id in (BENCH_WORLD, RAW_WORLD):
            await authority.create_world(world_id=world_id, name=world_id)
        await authority.record_components(BENCH_WORLD, [schema_row(Position)])  # raw rows: admission checks them
        filler = _spawn(BENCH_WORLD, 0)
        payload = default_registry().resolve(filler).payload_of(filler)
        template: AdmissionRow = {
            "command_id": "", "schema_version": 1, "scheduled_tick": FAR_TICK, "priority": 0, "operation": "spawn",
            "payload": payload, "principal": None, "origin": "local", "max_attempts": 3, "reserved_entity_id": None,
            "request_digest": None,
        }  # fmt: skip
        for start in range(0, rows, BATCH):
            ids = range(start, min(rows, start + BATCH))
            batch: list[AdmissionRow] = [{**template, "command_id": f"fill-{i}"} for i in ids]
            await authority.admit(world_id=BENCH_WORLD, commands=batch)
    finally:
        await authority.close()


# -- the measurements --
class Workbench:
    """One ledger at one durability: our runtime and the raw baseline on the same catalog file.

    `run_bench` drives the workbenches of both ledger sizes in lockstep, and within each our call
    and the baseline's alternate, so every figure and its baseline see the same background load.
    """

    def __init__(self, directory: Path, synchronous: str) -> None:
        self.directory, self.synchronous = directory, synchronous
        self.best: dict[str, float] = {}  # workload -> best seconds per command

    async def open(self) -> None:
        self.rt = await Runtime.open_local(self.directory, synchronous=self.synchronous)
        self.raw = RawLedger(self.directory / CATALOG_FILE, self.synchronous)

    async def close(self) -> None:
        self.raw.close()
        await self.rt.close()

    async def resume(self) -> None:
        """The other durability's workbench wrote to this ledger since: take the writer back."""
        self.rt.worlds.drop(BENCH_WORLD)
        self.world = await self.rt.worlds.get(BENCH_WORLD)
        self.raw.resume()

    def keep(self, name: str, ours: float, theirs: float, commands: int) -> None:
        for key, seconds in ((name, ours), (f"{name}_raw", theirs)):
            self.best[key] = min(seconds / commands, self.best.get(key, seconds / commands))

    def work(self, tag: str, count: int, tick: int, raw_tick: int) -> tuple[list[DeferredItem], list[dict[str, Any]]]:
        """Our items and the baseline's stored rows for the same commands (built outside any timing)."""
        return _items(BENCH_WORLD, tag, count, tick), _raw_rows(_items(RAW_WORLD, tag, count, raw_tick), self.rt.registry)

    async def single(self, item: DeferredItem, row: dict[str, Any]) -> tuple[float, float]:
        start = time.perf_counter()
        await self.rt.dispatcher.defer(item.op, item.options, command_id=item.command_id)
        middle = time.perf_counter()
        self.raw.admit([row])
        return middle - start, time.perf_counter() - middle

    async def batch(self, items: list[DeferredItem], rows: list[dict[str, Any]]) -> tuple[float, float]:
        start = time.perf_counter()
        await self.rt.dispatcher.defer_batch(items)
        middle = time.perf_counter()
        self.raw.admit(rows)
        return middle - start, time.perf_counter() - middle

    async def end_to_end(self, tag: str) -> tuple[float, float]:
        chunks = [self.work(f"{tag}-{b}", BATCH, self.world.tick + 1, self.raw.tick + 1) for b in range(E2E_COMMANDS // BATCH)]
        entities = [canonical_json([ComponentValue.from_component(Position(x=float(i), y=0.0)).model_dump(mode="json")])
                    for i in range(E2E_COMMANDS)]  # fmt: skip
        gc.collect()  # start clean: the garbage of the previous run is not this run's cost
        start = time.perf_counter()
        for items, _ in chunks:
            await self.rt.dispatcher.defer_batch(items)
        applied = await self.rt.dispatcher.apply(Step(world_id=BENCH_WORLD))
        middle = time.perf_counter()
        if applied != E2E_COMMANDS:
            raise RuntimeError(f"the benchmark tick applied {applied} commands, not {E2E_COMMANDS}")
        for _, rows in chunks:
            self.raw.admit(rows)
        self.raw.step(entities)
        return middle - start, time.perf_counter() - middle


async def attempt(group: list[Workbench], tag: str, single: int, batches: int) -> None:
    """One timed run of every workload on each workbench of `group`, interleaved command by command."""
    for bench in group:
        await bench.resume()
    for name, count, size in (("single", single, 1), ("batch", batches, BATCH)):
        work = {bench: bench.work(f"{tag}-{name}", count * size, FAR_TICK, FAR_TICK) for bench in group}
        gc.collect()
        totals = {bench: [0.0, 0.0] for bench in group}
        for index in range(count):
            for bench in group:
                items, rows = work[bench]
                part = slice(index * size, (index + 1) * size)
                ours, theirs = await (bench.single(items[index], rows[index]) if size == 1 else bench.batch(items[part], rows[part]))
                totals[bench][0] += ours
                totals[bench][1] += theirs
        for bench in group:
            ours, theirs = totals[bench]
            bench.keep(name, ours, theirs, count * size)
    for bench in group:
        bench.keep("e2e", *await bench.end_to_end(f"{tag}-e2e"), E2E_COMMANDS)


# -- the report --
WORKLOADS = (("single admission", "single"), ("batched admission", "batch"), ("end to end", "e2e"))


def _check(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def _report(size: int, sync: str, best: dict[str, float]) -> list[bool]:
    """Print one ledger size and durability; return its target checks (FULL is the durability judged)."""
    ratio = {key: best[f"{key}_raw"] / best[key] for _, key in WORKLOADS}  # our throughput / raw throughput
    checks = {
        "single": (ratio["single"] >= TARGET_SINGLE_RATIO, f"ratio >= {TARGET_SINGLE_RATIO}"),
        "batch": (1 / best["batch"] >= TARGET_BATCH_RATE, f">= {TARGET_BATCH_RATE:,} cmd/s"),
        "e2e": (1 / best["e2e"] >= TARGET_E2E_RATE, f">= {TARGET_E2E_RATE:,} cmd/s"),
    }
    judged = sync == "FULL"
    click.echo(f"ledger of {size:,} rows, synchronous={sync}")
    for name, key in WORKLOADS:
        ok, target = checks[key]
        click.echo(
            f"  {name:<18} {1 / best[key]:9,.0f} cmd/s {best[key] * 1e6:7,.1f} us/cmd | raw sqlite3 "
            f"{1 / best[f'{key}_raw']:9,.0f} cmd/s {best[f'{key}_raw'] * 1e6:7,.1f} us/cmd | ratio {ratio[key]:4.2f} | "
            f"target {target:<18} {_check(ok) if judged else '(info)'}"
        )
    return [ok for ok, _ in checks.values()] if judged else []


def _report_scale(small: int, large: int, a: dict[str, float], b: dict[str, float]) -> list[bool]:
    click.echo(f"per-command cost, {large:,}-row ledger / {small:,}-row ledger, synchronous=FULL")
    checks = []
    for name, key in WORKLOADS:
        ratio = b[key] / a[key]
        checks.append(ratio <= TARGET_SCALE_RATIO)
        click.echo(f"  {name:<18} {a[key] * 1e6:8,.1f} -> {b[key] * 1e6:8,.1f} us/cmd   ratio {ratio:4.2f} "
                   f"(target <= {TARGET_SCALE_RATIO})  {_check(checks[-1])}")  # fmt: skip
    return checks


def _machine() -> str:
    import os
    import platform

    return (f"{platform.node()}: {os.cpu_count()} cpu(s), {platform.machine()}, Python {platform.python_version()}, "
            f"SQLite {sqlite3.sqlite_version}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")  # fmt: skip


async def run_bench(small: int, large: int, single: int, batches: int, repeat: int, data: Path | None) -> bool:
    """Run every workload on both ledgers at both durabilities; print figures; True when all targets pass.

    The attempts go round every ledger and durability in turn, so a burst of load elsewhere on the
    machine hurts one attempt of each rather than every attempt of one ledger.
    """
    if large <= small:
        raise click.UsageError(f"the large ledger ({large:,} rows) must be larger than the small one ({small:,})")
    base = data or Path(tempfile.mkdtemp(prefix="archetype-bench-"))
    click.echo(_machine())
    click.echo(f"ledgers under {base}; best of {repeat} attempts per figure")
    benches: dict[tuple[int, str], Workbench] = {}
    for size in (small, large):
        directory = base / f"ledger-{size}"
        start = time.perf_counter()
        await build_ledger(directory, size)
        click.echo(f"built a ledger of {size:,} rows in {time.perf_counter() - start:.1f}s")
        for sync in SYNC_MODES:
            benches[size, sync] = Workbench(directory, sync)
    try:
        for bench in benches.values():
            await bench.open()
        for n in range(repeat):
            for sync in SYNC_MODES:
                await attempt([benches[size, sync] for size in (small, large)], f"{sync}-{n}", single, batches)
    finally:
        for bench in benches.values():
            await bench.close()
    checks: list[bool] = []
    for (size, sync), bench in benches.items():
        click.echo("")
        checks += _report(size, sync, bench.best)
    click.echo("")
    checks += _report_scale(small, large, benches[small, "FULL"].best, benches[large, "FULL"].best)
    click.echo(f"\n{sum(checks)}/{len(checks)} targets met")
    return all(checks)
