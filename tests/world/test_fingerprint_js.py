"""The fingerprint algorithm of docs/components.md, checked against an independent JavaScript
implementation (tests/world/fingerprint.mjs) run with the project's Node: a client in another
language computes the same fingerprint from the class's JSON Schema text."""

from __future__ import annotations

import enum
import json
import subprocess
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from archetype.canonical import canonical_json
from archetype.world import Component
from archetype.world.components import canonical_prefixed_schema
from tests.component_modules.alpha import Health, Position
from tests.pyodide.host import node_binary

SCRIPT = Path(__file__).with_name("fingerprint.mjs")


class Mood(enum.Enum):
    calm = "calm"
    angry = "angry"


class Gene(BaseModel):
    """Nested models become $defs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: str = Field(pattern=r"^[ACGT]+$", description="documentation is not identity")
    weight: float = 0.5


class Genome(Component):
    genes: list[Gene]
    dominant: Gene | None = None
    mood: Mood = Mood.calm


class Tuning(Component):
    """Float defaults in each of Python's spellings: positional, exponent, negative zero."""

    zero: float = 0.0
    big: float = 1e16
    just_below: float = 1234567890123456.0
    tiny: float = 1e-05
    small: float = 0.0001
    negative: float = -0.0
    odd: float = 123.456
    count: int = Field(default=3, ge=0, le=10)


class Label(Component):
    """Non-ASCII text (escaped as \\uXXXX, an emoji as a surrogate pair) and a Literal."""

    text: str = Field(default="café ☕ 🐝", title="Überschrift")
    kind: Literal["a", "b"] = "a"
    tags: tuple[str, int] = ("x", 1)
    extra: dict[str, list[int]] = Field(default_factory=dict)


CLASSES = [Position, Health, Genome, Tuning, Label]


def run_js(classes) -> list[dict]:
    cases = [{"name": cls.__name__, "schema": json.dumps(cls.model_json_schema(mode="validation"))} for cls in classes]
    done = subprocess.run(
        [node_binary(), str(SCRIPT)], input=json.dumps(cases), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_javascript_implementation_computes_every_fingerprint():
    answers = run_js(CLASSES)
    for cls, answer in zip(CLASSES, answers, strict=True):
        assert answer["canonical"] == canonical_json(canonical_prefixed_schema(cls)), cls.__name__
        assert answer["fingerprint"] == cls.component_fingerprint(), cls.__name__


def test_the_cases_cover_what_the_document_warns_about():
    texts = {cls.__name__: json.dumps(cls.model_json_schema(mode="validation")) for cls in CLASSES}
    assert '"$defs"' in texts["Genome"] and '"description"' in texts["Genome"]
    canonical = canonical_json(canonical_prefixed_schema(Tuning))
    assert all(
        spelling in canonical
        for spelling in ("0.0", "1e+16", "1234567890123456.0", "1e-05", "0.0001", "-0.0", "123.456")
    )
    assert "\\ud83d\\udc1d" in canonical_json(canonical_prefixed_schema(Label))


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_a_schema_change_changes_the_javascript_fingerprint_too(cls):
    """Not a constant: the implementation sees what changes identity (a field added)."""
    changed = type(cls.__name__, (cls,), {"__annotations__": {"added": int}, "added": 0})
    (before, after) = run_js([cls, changed])
    assert before["fingerprint"] != after["fingerprint"] == changed.component_fingerprint()
