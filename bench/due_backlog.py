"""What finding due commands costs since schema version 20 (docs/storage.md, "Schema version 20"),
when a world has a backlog of open commands: rows read on the real Durable Object engine (workerd)
and time on SQLite in process, for the lease's read (DUE_COMMANDS, limit 100) and the next due
tick (NEXT_DUE_TICK).

Three backlogs of BACKLOG open commands, each on a fresh catalog in the same run:
- `due later`: admitted for a tick after the tick after the head, so in the due index; this is how
  every open command was found up to version 19 (the index in due order, LIMIT): the baseline;
  (each world then publishes a tick, which moves its floor up: past the backlog here)
- `due at once`: the common case, found by walking the commands' key from the world's floor, all
  read and sorted by (scheduled tick, priority, sequence) to take the first 100;
- `floor held`: 100 open commands due at once above BACKLOG settled ones, the floor held below
  them by one command still open (the walk reads the settled rows too).

And a local runner's pass over a catalog of WORLDS worlds, each with a few settled commands and
the first 10 with one open command due at once (PENDING_WORLDS: the worlds with an open command),
beside version 19's statement on a version 19 catalog of the same rows (the due index alone).

    .venv/bin/python bench/due_backlog.py [--backlog 10000] [--worlds 10000] [--repeat 20]
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the workerd fixture lives in tests/support

from archetype.commands import ledger_sql, migrations
from tests.support.workerd.engine import WorkerdSqlEngine, shared_server

WORLD = "w"
LIMIT = 100
Execute = Callable[..., Any]


def build(execute: Execute, backlog: int, kind: str) -> None:
    """A world at tick head -1 holding the backlog `kind` (the module's docstring)."""
    for migration in migrations.MIGRATIONS:
        for statement in migration.statements:
            execute(statement)
    execute(ledger_sql.INSERT_WORLD, WORLD, WORLD, 1, 1, 1, "realtime", None)
    rng = random.Random(7)
    tick = 1 if kind == "due later" else 0  # tick 0 follows the head (-1): due at once
    total = backlog + (LIMIT + 1 if kind == "floor held" else 0)
    for first in range(1, total + 1, 1000):
        rows = [[n, n, f"c-{n}", 1, tick, rng.randrange(10), "spawn", '{"n":1}', "d" * 64, None, "local", 3, None]
                for n in range(first, min(first + 1000, total + 1))]  # fmt: skip
        execute(ledger_sql.INSERT_COMMANDS, WORLD, "", 1, 0, json.dumps(rows))  # the head -1: tick 0 is due at once
    if kind == "floor held":  # the first stays open; the backlog after it settled, the last LIMIT open
        execute("UPDATE commands SET status = 'APPLIED', is_open = NULL WHERE world_id = ? AND sequence > 1 AND sequence <= ?",
                WORLD, backlog + 1)  # fmt: skip
    execute(ledger_sql.PUBLISH_HEAD, 0, 2, 2, 0, WORLD, "o", "s")  # a tick published: the floor moves up


def rows_read(backlog: int, kind: str) -> dict[str, int]:
    sql = WorkerdSqlEngine(shared_server(), f"backlog-{uuid.uuid4().hex}").sql
    build(sql.exec, backlog, kind)
    return {
        "DUE_COMMANDS": int(sql.exec(ledger_sql.DUE_COMMANDS, WORLD, 5, LIMIT).rowsRead),
        "NEXT_DUE_TICK": int(sql.exec(ledger_sql.NEXT_DUE_TICK, WORLD).rowsRead),
    }


def microseconds(backlog: int, kind: str, repeat: int) -> dict[str, float]:
    db = sqlite3.connect(":memory:")
    build(lambda query, *params: db.execute(query, params), backlog, kind)
    figures = {}
    for name, params in (("DUE_COMMANDS", (WORLD, 5, LIMIT)), ("NEXT_DUE_TICK", (WORLD,))):
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            db.execute(getattr(ledger_sql, name), params).fetchall()
            times.append(time.perf_counter() - start)
        figures[name] = statistics.median(times) * 1e6
    return figures


# Version 19's statement (every open command in the due index), for the baseline.
V19_PENDING_WORLDS = f"""SELECT c.world_id, w.status, w.tick_head, min(c.scheduled_tick), w.clock_tick, w.clock_ms,
        w.tick_mode, w.tick_interval_ms, w.tick_lag_ms, w.host_owner, w.host_expires_at
    FROM commands AS c
    JOIN worlds AS w ON w.world_id = c.world_id
    WHERE c.is_open = 1 AND c.status IN {ledger_sql.OPEN_STATUSES} GROUP BY c.world_id"""


def pending_worlds_us(worlds: int, repeat: int, version: int) -> float:
    db = sqlite3.connect(":memory:")
    for migration in migrations.MIGRATIONS[:version]:
        for statement in migration.statements:
            db.execute(statement)
    db.executemany(ledger_sql.INSERT_WORLD, [(f"w{n:06d}", "w", 1, 1, 1, "realtime", None) for n in range(worlds)])
    db.executemany("""INSERT INTO commands (world_id, sequence, scope, command_id, schema_version, scheduled_tick, priority,
            operation, payload, digest, origin, max_attempts, status, is_open, created_at, updated_at)
        VALUES (?, ?, '', ?, 1, 0, 0, 'spawn', '{}', 'd', 'local', 3, 'PENDING', 1, 1, 1)""",
                   [(f"w{n:06d}", i, f"c-{i}") for n in range(worlds) for i in range(1, 7)])  # fmt: skip
    db.execute("UPDATE commands SET status = 'APPLIED', is_open = NULL WHERE sequence < 6 OR world_id >= 'w000010'")
    if version > 19:
        db.execute("UPDATE worlds SET due_floor = 6")  # as their last publication left it
    statement = ledger_sql.PENDING_WORLDS if version > 19 else V19_PENDING_WORLDS
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        assert len(db.execute(statement).fetchall()) == 10
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backlog", type=int, default=10_000)
    parser.add_argument("--worlds", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    print(f"backlog {args.backlog:,} open commands, lease limit {LIMIT}")
    print(f"  {'backlog':<12} {'statement':<14} {'rows read (DO)':>15} {'us (SQLite)':>12}")
    for kind in ("due later", "due at once", "floor held"):
        read = rows_read(args.backlog, kind)
        timed = microseconds(args.backlog, kind, args.repeat)
        for name in read:
            print(f"  {kind:<12} {name:<14} {read[name]:>15,} {timed[name]:>12,.0f}")
    print(f"PENDING_WORLDS over {args.worlds:,} worlds, 10 with an open command: "
          f"{pending_worlds_us(args.worlds, args.repeat, migrations.SCHEMA_VERSION):,.0f} us; "
          f"version 19: {pending_worlds_us(args.worlds, args.repeat, 19):,.0f} us")


if __name__ == "__main__":
    main()
