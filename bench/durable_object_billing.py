"""SQL billing units per command lifecycle on the Durable Object port (admit -> lease -> publish,
then the alarm's audit delivery), measured through the cursors' `rowsRead`/`rowsWritten`.

Runs the real Runtime and WorldObject on the Durable Object stand-in (tests/support), with every
`ctx.storage.sql.exec` cursor metered per RPC method. The baseline, measured in the same run, is
a tick carrying ONE command; the batched rows show what a tick of BATCH commands costs per command.

    .venv/bin/python bench/durable_object_billing.py [--batch 100] [--ticks 5] [--engine standin|workerd]

Caveat of the stand-in's engine (the default; see its docstring): rowsWritten counts table rows, not
the index rows Cloudflare also bills, and rowsRead counts rows returned + written, not rows scanned.
`--engine workerd` runs the object's SQL on the real Durable Object engine, which counts as billed
(bench/cost.py reports from it).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from collections import defaultdict
from pathlib import Path

from do_meter import ENGINES, Figures, Meter, sql_engine

from archetype.commands import DeferredItem, DurableOptions, ledger_sql, migrations
from archetype.commands.port import ManualClock
from archetype.runtime import Runtime
from archetype.world import Component, CreateWorld, Spawn, Step
from durable_world import DurableObjectAuthority
from tests.support.durable_object_standin import world_namespace

WORLD = "bench-world"


class Position(Component):
    x: float
    y: float


async def measure(batch: int, ticks: int, engine: str = "standin", prune: bool = False,
                  statements: dict[tuple[str, str, str], Figures] | None = None) -> dict[str, dict[str, Figures]]:
    """Per phase (admit, step, deliver, and with `prune` the pruning of the settled commands
    afterwards) and RPC method, the figures of `ticks` ticks of `batch` commands each; and, into
    `statements` if given, the same per (phase, method, statement text)."""
    with tempfile.TemporaryDirectory() as directory:
        clock = ManualClock()
        namespace = world_namespace(Path(directory), clock, sql_engine=sql_engine(engine))
        authority = DurableObjectAuthority(namespace)
        meter = Meter()
        meter.wrap_storage(namespace.storage(WORLD))
        meter.wrap_authority(authority)
        rt = Runtime(authority, owner="bench-runner", lease_ms=30_000, origin="gateway")
        await rt.dispatcher.apply(CreateWorld(name="bench", world_id=WORLD))
        # steady state from here: the world loaded, its component schema recorded, the events delivered
        await rt.dispatcher.defer(Spawn(world_id=WORLD, components=[Position(x=0, y=0)]), DurableOptions(tick=0),
                                  command_id="warm-up")  # fmt: skip
        await rt.dispatcher.apply(Step(world_id=WORLD))
        await namespace.run_alarm(WORLD)
        phases: dict[str, dict[str, Figures]] = {phase: defaultdict(Figures) for phase in ("admit", "step", "deliver")}

        async def count(phase: str, run) -> None:
            meter.reset()
            await run()
            for method, figures in meter.totals.items():
                phases[phase][method] += figures
            if statements is not None:
                for (method, query), figures in meter.statements.items():
                    statements[phase, method, query] = statements.get((phase, method, query), Figures()) + figures

        for tick in range(1, ticks + 1):
            items = [
                DeferredItem(op=Spawn(world_id=WORLD, components=[Position(x=i, y=tick)]),
                             options=DurableOptions(tick=tick), command_id=f"t{tick}-c{i}")
                for i in range(batch)
            ]  # fmt: skip
            await count("admit", lambda: rt.dispatcher.defer_batch(items))  # noqa: B023 - awaited in this iteration
            await count("step", lambda: rt.dispatcher.apply(Step(world_id=WORLD)))
            await count("deliver", lambda: _deliver(namespace, meter))
            clock.advance(1_000)
        applied = sum(1 for r in await rt.scheduler.history(WORLD, limit=10_000) if r.status.value == "APPLIED")
        assert applied == batch * ticks + 1, f"{applied} applied, expected {batch * ticks} and the warm-up"
        if prune:
            phases["prune"] = defaultdict(Figures)
            pruned = {}

            async def prune_all() -> None:
                pruned.update(await authority.prune(WORLD, idempotency_window_ms=0, keep_ticks=1))

            await count("prune", prune_all)
            assert pruned["commands"] == batch * ticks + 1, f"pruned {pruned}, expected {batch * ticks} commands and the warm-up"
        namespace.close()
        return phases


async def _deliver(namespace, meter: Meter) -> None:
    with meter.part("alarm"):
        await namespace.run_alarm(WORLD)


def report(label: str, phases: dict[str, dict[str, Figures]], commands: int) -> tuple[float, float, float]:
    """Print the phases' figures; answer (statements, rows read, rows written) per command."""
    print(f"\n{label}: {commands} commands")
    print(f"  {'phase':<8} {'method':<20} {'calls':>6} {'stmts':>7} {'rows read':>10} {'rows written':>13}")
    total = Figures()
    for phase, methods in phases.items():
        for method, f in sorted(methods.items()):
            print(f"  {phase:<8} {method:<20} {f.calls:>6} {f.statements:>7} {f.rows_read:>10} {f.rows_written:>13}")
            total += f
    per = total.per(commands)
    print(f"  per command: {per['statements']:.2f} statements, {per['rows_read']:.2f} rows read, "
          f"{per['rows_written']:.2f} rows written")  # fmt: skip
    return per["statements"], per["rows_read"], per["rows_written"]


def statement_name(query: str) -> str:
    """The ledger_sql (or migrations) constant a statement's text is, else its opening."""
    for module in (ledger_sql, migrations):
        for name, value in vars(module).items():
            if value == query and name.isupper():
                return name
    return " ".join(query.split())[:60]


def report_statements(label: str, statements: dict[tuple[str, str, str], Figures], commands: int) -> None:
    """Which statement writes which rows: per command, those that write or read any."""
    print(f"\n{label}: per command, by statement")
    print(f"  {'phase':<8} {'method':<20} {'statement':<28} {'runs':>6} {'rows read':>10} {'rows written':>13}")
    for (phase, method, query), f in sorted(statements.items(), key=lambda item: -item[1].rows_written):
        per = f.per(commands)
        print(f"  {phase:<8} {method:<20} {statement_name(query):<28} {per['statements']:>6.2f} {per['rows_read']:>10.2f} "
              f"{per['rows_written']:>13.2f}")  # fmt: skip


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=100, help="commands per tick in the batched run")
    parser.add_argument("--ticks", type=int, default=5)
    parser.add_argument("--engine", choices=ENGINES, default="standin",
                        help="the object's SQL: the stand-in's SQLite or the real Durable Object engine (workerd)")
    parser.add_argument("--statements", action="store_true", help="also print the figures of each statement")
    args = parser.parse_args()
    one: dict[tuple[str, str, str], Figures] = {}
    many: dict[tuple[str, str, str], Figures] = {}
    baseline = report("baseline (1 command per tick)", await measure(1, args.ticks, args.engine, statements=one), args.ticks)
    batched_phases = await measure(args.batch, args.ticks, args.engine, statements=many)
    batched = report(f"batched ({args.batch} commands per tick)", batched_phases, args.batch * args.ticks)
    if args.statements:
        report_statements("baseline (1 command per tick)", one, args.ticks)
        report_statements(f"batched ({args.batch} commands per tick)", many, args.batch * args.ticks)
    ratios = zip(("statements", "rows read", "rows written"), baseline, batched, strict=True)
    print("\nbatched / baseline per command: " + ", ".join(f"{name} x{b / a:.3f}" for name, a, b in ratios))


if __name__ == "__main__":
    asyncio.run(main())
