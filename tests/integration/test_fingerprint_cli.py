"""`archetype components fingerprint MODULE [CLASS...]`: the identity a declared schema migration
names (docs/guide/schema-evolution.md), read from a module in the working directory as `serve
--module` reads it, in a process of its own as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from archetype.world import Component
from archetype.world.components import canonical_prefixed_schema, digest

SHIP = textwrap.dedent('''
    from archetype.world import Component
    from tests.component_modules.alpha import Position  # imported, not defined here: not listed

    class Ship(Component):
        name: str
        speed: float{extra}

    class Cargo(Component):
        tons: int
''')


def fingerprint(directory, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}  # tests.component_modules; the module: its cwd
    return subprocess.run([sys.executable, "-m", "archetype.cli", "components", "fingerprint", *args],
                          capture_output=True, text=True, timeout=60, cwd=directory, env=env)  # fmt: skip


def test_it_prints_each_class_the_module_defines_with_the_fingerprint_the_ledger_records(tmp_path):
    (tmp_path / "ships.py").write_text(SHIP.format(extra=""))
    done = fingerprint(tmp_path, "ships", "--json")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["name"], r["class"]) for r in rows] == [("Cargo", "ships.Cargo"), ("Ship", "ships.Ship")]

    class Ship(Component):  # the same schema here: the same fingerprint, by the ledger's rule
        name: str
        speed: float

    assert rows[1]["fingerprint"] == Ship.component_fingerprint() == digest(canonical_prefixed_schema(Ship))

    (tmp_path / "ships.py").write_text(SHIP.format(extra="\n    crew: int = 0"))  # today's class: a field added
    done = fingerprint(tmp_path, "ships", "Ship", "--json")
    assert done.returncode == 0, done.stderr
    (today,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert today["name"] == "Ship" and today["fingerprint"] != rows[1]["fingerprint"]
    assert "Ship" in fingerprint(tmp_path, "ships").stdout  # the table


def test_mistakes_are_one_line_and_exit_2(tmp_path):
    (tmp_path / "ships.py").write_text(SHIP.format(extra=""))
    done = fingerprint(tmp_path, "ships", "Boat")
    assert done.returncode == 2 and "ships defines no component class 'Boat'; it defines Cargo, Ship" in done.stderr
    done = fingerprint(tmp_path, "nowhere")
    assert done.returncode == 2 and "cannot import 'nowhere'" in done.stderr
