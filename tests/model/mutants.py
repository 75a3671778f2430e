"""Does the stateful test have teeth? Break the ledger on purpose and watch it fail.

Each mutant is one textual change to the source (a few, where one rule is written in a few
places). For each, this script copies the worktree (without .git, .venv, node_modules) to a
temporary directory, applies the change there, and runs
tests/model/test_stateful.py against that copy (PYTHONPATH puts the copy's src/ first, ahead of
the editable install). The working tree is never modified. A mutant is *killed* when the test
fails; the report says how many examples the test needed (shrinking is off, so that number is
the first failing example) and the first lines of the failure.

    .venv/bin/python tests/model/mutants.py                      # every mutant, on `local`
    .venv/bin/python tests/model/mutants.py settle-no-charge --authority durable_object
    .venv/bin/python tests/model/mutants.py --list

Exit status 0 when every mutant run was killed, 1 when one survived (the test missed it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SQL = "src/archetype/commands/ledger_sql.py"
LEDGER = "src/archetype/commands/ledger.py"
ADMISSION = "src/archetype/commands/ledger_admission.py"
STEPPING = "src/archetype/commands/ledger_stepping.py"
CLOCK = "src/archetype/commands/clock.py"

# name -> (what it breaks, its changes: (file, text to find (exactly once), replacement), ...)
Change = tuple[str, str, str]
MUTANTS: dict[str, tuple[str, tuple[Change, ...]]] = {
    "publish-drops-rejected": ("publish skips writing REJECTED settlements", (
        (STEPPING, 'settled = [[s["sequence"], s["outcome"], s["error"]] for s in settlements]',
         'settled = [[s["sequence"], s["outcome"], s["error"]] for s in settlements if s["outcome"] != "rejected"]'),
    )),
    "lease-order-swapped": ("DUE_COMMANDS orders by priority before scheduled tick", (
        (SQL, "ORDER BY c.scheduled_tick, c.priority, c.sequence LIMIT ?3",
         "ORDER BY c.priority, c.scheduled_tick, c.sequence LIMIT ?3"),
    )),
    "settle-no-charge": ("a settlement is not charged an attempt", (
        (SQL, "attempts = commands.attempts + 1,",
         "attempts = commands.attempts,"),
    )),
    "floor-skips-retryable": ("the publication moves the floor of open commands due at once past a retryable one", (
        (SQL, "AND c.sequence >= worlds.due_floor AND c.is_open = 1 AND c.due_later IS NULL ORDER BY c.sequence LIMIT 1",
         "AND c.sequence >= worlds.due_floor AND c.is_open = 1 AND c.due_later IS NULL AND c.status = 'PENDING' "
         "ORDER BY c.sequence LIMIT 1"),
    )),
    "crash-no-charge": ("CHARGE_CRASH does not charge the guarded command", (
        (SQL, "CHARGE_CRASH = \"\"\"UPDATE commands SET attempts = attempts + 1,",
         "CHARGE_CRASH = \"\"\"UPDATE commands SET attempts = attempts,"),
    )),
    # a few more, beyond the three the brief asked for
    "lease-skips-live-lease": ("lease skips another owner's live lease instead of stopping", (
        (STEPPING, "if row[\"lease_owner\"] != owner and row[\"lease_expires_at\"] > now:\n                        break",
         "if row[\"lease_owner\"] != owner and row[\"lease_expires_at\"] > now:\n                        continue"),
    )),
    "release-forgets-attempts": ("the released tail always goes back PENDING", (
        (SQL, "status = CASE WHEN attempts > 0 THEN 'RETRYABLE' ELSE 'PENDING' END,",
         "status = 'PENDING',"),
    )),
    "no-token-dedup": ("a republished manifest is not recognised by its commit token", (
        (STEPPING, "if self._port.execute(q.GET_TICK_BY_TOKEN, (world_id, tick, token)):",
         "if False:"),
    )),
    "recovery-keeps-failures": ("a published tick recovers the world but keeps its failed-attempt count", (
        (SQL, "UPDATE worlds SET health = 'ACTIVE', failed_attempts = 0,",
         "UPDATE worlds SET health = 'ACTIVE', failed_attempts = failed_attempts,"),
    )),
    "redrive-event-untyped": ("a redrive's first event is `admitted`, not `redriven`", (
        (SQL, "CASE WHEN c.redriven_from IS NULL THEN 'admitted' ELSE 'redriven' END",
         "'admitted'"),
    )),
    "permanent-is-retried": ("a Permanent failure is retried instead of dead-lettered", (
        (SQL, "WHEN 'permanent' THEN 'DEAD_LETTER'",
         "WHEN 'permanent' THEN 'RETRYABLE'"),
    )),
    # retention
    "prune-ignores-outbox": ("prune removes settled commands whose events are not acknowledged", (
        (LEDGER, "horizon = min(horizon, first_pending - 1)",
         "horizon = min(horizon, first_pending + 10**9)"),
    )),
    "prune-takes-the-head": ("prune removes one manifest too many (the head's, with keep_ticks=1)", (
        (LEDGER, 'oldest_tick = world["tick_head"] - keep_ticks',
         'oldest_tick = world["tick_head"] - keep_ticks + 1'),
    )),
    # redrive, retention, migration and quota compose (issue 21)
    "redrive-ignores-pruned-mark": ("a dead letter whose redrive was pruned is redriven again", (
        (LEDGER, 'if dead["redriven_by"] is not None:',
         'if dead["redriven_by"] is not None and self._command_at(world_id, dead["redriven_by"]) is not None:'),
    )),
    "redrive-skips-component-check": ("a redrive copies a payload of a superseded type into an open command", (
        (LEDGER, 'self._check_components(world_id, [(f"dead letter {command_id!r}, whose payload a redrive copies", dead["payload"])])',
         "pass"),
    )),
    "migration-rewrites-digest": ("a component migration rewrites an open command's admitted digest", (
        (SQL, "migrated_digest = r.digest", "digest = r.digest"),
    )),
    "quota-counts-target-tick": ("quota counts the target tick, not the tick the command runs at", (
        (ADMISSION, "runs_at(tick, world[3]) for tick in ticks", "tick for tick in ticks"),
        (ADMISSION, 'tick = runs_at(scheduled_tick, world["tick_head"])', "tick = scheduled_tick"),
        (SQL, "u.scheduled_tick = max(j.value, w.tick_head + 1)", "u.scheduled_tick = j.value"),
    )),
    "prune-takes-dead-letters": ("prune removes dead letters past the window (and with them their redrive mark)", (
        (SQL, "PRUNABLE_STATUSES = \"('APPLIED', 'REJECTED', 'CANCELLED')\"",
         "PRUNABLE_STATUSES = \"('APPLIED', 'REJECTED', 'CANCELLED', 'DEAD_LETTER')\""),
    )),
    "prune-takes-quota-to-run": ("prune removes the quota counters of ticks still to run", (
        (SQL, "WHERE world_id = ?1 AND scheduled_tick <= ?2 ORDER BY scheduled_tick, principal",
         "WHERE world_id = ?1 AND scheduled_tick <= ?2 + 2 ORDER BY scheduled_tick, principal"),
    )),
}

# tick modes
MUTANTS.update({
    "lockstep-skips": ("the ledger publishes a lockstep tick that skips ticks", (
        (STEPPING, 'if world["tick_mode"] == "lockstep" and tick != world["tick_head"] + 1:', "if False:"),
    )),
    "lockstep-anchor-stays": ("a lockstep world's clock anchor keeps its old due time", (
        (STEPPING, "self._port.execute(q.PUBLISH_HEAD, (tick, now, due, max(0, now - due), world_id, owner, session,",
         'self._port.execute(q.PUBLISH_HEAD, (tick, now, world["clock_ms"], max(0, now - due), world_id, owner, session,'),
    )),
    "lockstep-no-pause": ("a host runs a pause's missed lockstep ticks back to back", (
        (CLOCK, "now_ms - ready > max(self.interval_ms, PAUSE_MS)", "now_ms - ready > 10**12"),
    )),
})


def unapplicable(name: str, root: Path = ROOT) -> list[str]:
    """Why `name`'s changes cannot be applied to the sources under `root` (empty when they can)."""
    _, changes = MUTANTS[name]
    counts = ((path, find, (root / path).read_text().count(find)) for path, find, _ in changes)
    return [f"{find!r} found {count} times in {path}" for path, find, count in counts if count != 1]


IGNORE = shutil.ignore_patterns(".git", ".venv", "node_modules", "__pycache__", ".pytest_cache", ".hypothesis", "data")


def run_mutant(name: str, authority: str, examples: int, timeout: int) -> dict:
    what, changes = MUTANTS[name]
    with tempfile.TemporaryDirectory(prefix=f"mutant-{name}-") as tmp:
        copy = Path(tmp) / "repo"
        shutil.copytree(ROOT, copy, ignore=IGNORE)
        if reasons := unapplicable(name, copy):
            return {"mutant": name, "result": "NOT APPLIED", "detail": "; ".join(reasons)}
        for path, find, replace in changes:
            target = copy / path
            target.write_text(target.read_text().replace(find, replace))
        report = Path(tmp) / "report.jsonl"
        env = {
            **os.environ,
            "PYTHONPATH": f"{copy / 'src'}{os.pathsep}{copy}",
            "ARCHETYPE_MODEL_EXAMPLES": str(examples),
            "ARCHETYPE_MODEL_NO_SHRINK": "1",
            "ARCHETYPE_SOAK_REPORT": str(report),
            "ARCHETYPE_SOAK_SECONDS": "0",
        }
        # the copy, not the editable install, must be what the test imports
        probe = subprocess.run([sys.executable, "-c", "import archetype.commands.ledger_sql as m; print(m.__file__)"],
                               env=env, cwd=copy, capture_output=True, text=True, check=True)  # fmt: skip
        assert probe.stdout.strip().startswith(str(copy)), probe.stdout
        started = time.monotonic()
        try:
            result = subprocess.run(
                [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-s",
                 f"tests/model/test_stateful.py::test_the_authority_agrees_with_the_model[{authority}]"],
                env=env, cwd=copy, capture_output=True, text=True, timeout=timeout,
            )  # fmt: skip
            output, code = result.stdout + result.stderr, result.returncode
        except subprocess.TimeoutExpired as exc:
            output, code = str(exc.stdout or "") + str(exc.stderr or ""), "timeout"
        seconds = round(time.monotonic() - started, 1)
        stats = json.loads(report.read_text().splitlines()[-1]) if report.exists() and report.read_text() else {}
        failure = [line[2:].strip() for line in output.splitlines() if line.startswith("E ")]
        return {
            "mutant": name,
            "breaks": what,
            "authority": authority,
            "result": "killed" if code == 1 and failure else ("SURVIVED" if code == 0 else f"error ({code})"),
            "examples": stats.get("examples"),
            "steps": stats.get("steps"),
            "seconds": seconds,
            "failure": " | ".join(re.sub(r"\s+", " ", line) for line in failure[:3])[:400],
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mutants", nargs="*", help="mutant names (default: all)")
    parser.add_argument("--authority", default="local", help="an AUTHORITY_FACTORIES name (default: local)")
    parser.add_argument("--examples", type=int, default=2_000, help="give up after this many examples")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per mutant")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()
    if args.list:
        for name, (what, changes) in MUTANTS.items():
            print(f"{name:30} {', '.join(sorted({path for path, _, _ in changes}))}: {what}")
        return 0
    survived = False
    for name in args.mutants or list(MUTANTS):
        outcome = run_mutant(name, args.authority, args.examples, args.timeout)
        print(json.dumps(outcome), flush=True)
        survived |= outcome["result"] != "killed"
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
