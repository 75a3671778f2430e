"""Which authorities each conformance file runs on is written down with its reason: docs/testing.md,
"Which authorities", has a row per file, and the files' `AUTHORITIES` (authorities.py) agree with
it. A file without a row runs on every authority; a file that runs on fewer needs a row saying why,
and may never leave out an implementation of the ledger (`LEDGERS`)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from tests.conformance.authorities import EVERY_AUTHORITY, LEDGERS, authorities_of

HERE = Path(__file__).resolve().parent
TESTING = HERE.parents[1] / "docs" / "testing.md"
CHOICES = {"every authority": EVERY_AUTHORITY, "the ledgers": LEDGERS}
ROW = re.compile(r"^\| `(test_\w+\.py)` \| ([^|]+?) \| [^|]*\S[^|]* \|$", re.MULTILINE)


def documented() -> dict[str, tuple[str, ...]]:
    """file name -> the authorities its row in docs/testing.md names."""
    section = TESTING.read_text().split("## Which authorities", 1)[1].split("\n## ", 1)[0]
    return {name: CHOICES[choice] for name, choice in ROW.findall(section)}


def chosen() -> dict[str, tuple[str, ...]]:
    """file name -> the authorities its tests run on."""
    return {path.name: authorities_of(importlib.import_module(f"tests.conformance.{path.stem}"))
            for path in sorted(HERE.glob("test_*.py"))}  # fmt: skip


def test_every_row_names_a_conformance_file_and_what_it_runs_on():
    assert set(documented()) <= set(chosen()), "docs/testing.md names conformance files that do not exist"
    assert {name: chosen()[name] for name in documented()} == documented()


def test_a_file_that_runs_on_fewer_authorities_says_why():
    narrowed = {name for name, authorities in chosen().items() if authorities != EVERY_AUTHORITY}
    assert narrowed <= set(documented()), "docs/testing.md, 'Which authorities', has no row for these"


@pytest.mark.parametrize("choice", [("local",), ("durable_object", "local"), ("local", "no_such_authority", *LEDGERS)])
def test_no_file_may_leave_out_an_implementation_of_the_ledger(choice):
    module = type("module", (), {"AUTHORITIES": choice})
    with pytest.raises(ValueError, match="AUTHORITIES"):
        authorities_of(module)
