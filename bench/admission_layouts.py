"""What one durable admission writes, page by page, and what it would write under another layout
(issue 24's WAL target; docs/storage.md, "What an admission writes"). Not a timing: WAL frames.

Each variant is a catalog of the current schema (every migration), changed as the variant says,
holding `--prefill` commands of the raw world (one batch) and `--warm` single admissions; then
the WAL is truncated and `--commits` single admissions by `archetype.bench.RawLedger` (the
ledger's row writes for one command: its row, with every index the schema has, carrying its
`admitted` event since schema version 21) are counted by the b-tree and kind (leaf, internal) of each page they wrote
(`archetype.bench.wal_pages_by_kind`). The ledger's own admission writes these pages (bench/cost.py
measures it: `wal_pages_by_btree` in bench/admission_bench.py's output lists the same b-trees).

    .venv/bin/python bench/admission_layouts.py [--commits 100] [--prefill 1000] [--warm 300]

The last line printed is one JSON object: pages per single admission, by variant.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path

from archetype.bench import FAR_TICK, RAW_WORLD, RawLedger, _items, _raw_rows, build_ledger, wal_pages_by_kind
from archetype.commands import default_registry
from local_catalog import CATALOG_FILE


def _drop(index: str) -> Callable[[sqlite3.Connection], None]:
    return lambda conn: conn.execute(f"DROP INDEX {index}")


def _as_is(conn: sqlite3.Connection) -> None:
    pass


def _rowid_commands(conn: sqlite3.Connection) -> None:
    """The command row in a rowid table (SQLite appends to one without rebalancing), its key an
    index of its own, its other indexes as they were."""
    indexes = [sql for (sql,) in conn.execute("SELECT sql FROM sqlite_schema WHERE type = 'index' "
                                              "AND tbl_name = 'commands' AND sql IS NOT NULL")]  # fmt: skip
    for statement in ("CREATE TABLE commands_aside AS SELECT * FROM commands", "DROP TABLE commands",
                      "CREATE TABLE commands AS SELECT * FROM commands_aside WHERE false", "DROP TABLE commands_aside",
                      "CREATE UNIQUE INDEX commands_key ON commands (world_id, sequence)", *indexes):  # fmt: skip
        conn.execute(statement)


class WithAdmittedEvents(RawLedger):
    """The row writes with the `admitted` outbox row, as an admission wrote them before schema version
    21 read that event off the command row (docs/storage.md, "Schema version 21")."""

    def _admitted_events(self, ids: list[str], tick: int, now: int) -> None:
        self._events(ids, "admitted", "PENDING", tick, now)


# variant -> (its change to the current schema, the raw ledger class)
VARIANTS: dict[str, tuple[Callable[[sqlite3.Connection], None], Callable[[Path, str], RawLedger]]] = {
    "as shipped": (_as_is, RawLedger),
    "with the admitted outbox row (version 19)": (_as_is, WithAdmittedEvents),
    "without commands_by_id": (_drop("commands_by_id"), RawLedger),
    "without commands_due": (_drop("commands_due"), RawLedger),
    "commands a rowid table (+ its key index)": (_rowid_commands, RawLedger),
}


async def measure(directory: Path, change: Callable[[sqlite3.Connection], None], ledger: Callable[[Path, str], RawLedger],
                  prefill: int, warm: int, commits: int) -> dict[tuple[str, str], float]:  # fmt: skip
    """WAL pages per single admission of one variant, by (b-tree, kind)."""
    await build_ledger(directory, 0)
    db = directory / CATALOG_FILE
    conn = sqlite3.connect(db, isolation_level=None)
    change(conn)
    conn.close()
    rows = _raw_rows(_items(RAW_WORLD, "c", prefill + warm + commits, FAR_TICK), default_registry())
    raw = ledger(db, "FULL")
    try:
        raw.conn.execute("PRAGMA wal_autocheckpoint = 0")  # a checkpoint would restart the WAL mid-count
        raw.admit(rows[:prefill])
        for row in rows[prefill : prefill + warm]:
            raw.admit([row])
        raw.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        for row in rows[prefill + warm :]:
            raw.admit([row])
        return {key: count / commits for key, count in wal_pages_by_kind(db).items()}  # before the close checkpoints
    finally:
        raw.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=100, help="single admissions counted per variant")
    parser.add_argument("--prefill", type=int, default=1_000, help="commands in place first (one batch)")
    parser.add_argument("--warm", type=int, default=300, help="single admissions before the count")
    args = parser.parse_args()
    totals: dict[str, float] = {}
    for name, (change, ledger) in VARIANTS.items():
        with tempfile.TemporaryDirectory(prefix="archetype-layouts-") as tmp:
            pages = asyncio.run(measure(Path(tmp), change, ledger, args.prefill, args.warm, args.commits))
        totals[name] = round(sum(pages.values()), 2)
        by_btree: dict[str, dict[str, float]] = {}
        for (btree, kind), n in pages.items():
            by_btree.setdefault(btree, {})[kind] = n
        print(f"{name}: {totals[name]:.2f} pages per admission: " + ", ".join(
            f"{btree} {sum(kinds.values()):.2f} ({', '.join(f'{kind} {n:.2f}' for kind, n in sorted(kinds.items()))})"
            for btree, kinds in sorted(by_btree.items(), key=lambda kv: -sum(kv[1].values()))))  # fmt: skip
    print(json.dumps(totals))


if __name__ == "__main__":
    main()
