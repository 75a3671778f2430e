"""Canonical JSON and digests: the one byte-exact form of every identity-bearing value.

Both authorities (local SQLite and the Durable Object) and every client must produce the same
bytes for the same value, so the rules are strict: sorted keys, compact separators, ASCII only,
no NaN or infinities, integers within +/-2**53 (a Durable Object returns numbers as doubles).
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

MAX_SAFE_INTEGER = 2**53


class NonCanonicalValueError(ValueError):
    """A value has no canonical JSON form (live object, NaN, huge integer, non-string key...)."""


class _Problem(Exception):
    """Carries a refusal up the recursion, collecting its path only on the way out (no path
    strings are built for values that are fine, which is almost all of them)."""

    def __init__(self, message: str) -> None:
        self.message = message
        self.path: list[str] = []


def _check(value: Any) -> None:
    kind = type(value)
    if kind is str or value is None or kind is bool:
        return
    if kind is float or isinstance(value, float):
        if not math.isfinite(value):
            raise _Problem(f"{value!r} has no JSON form")
        return
    if isinstance(value, int):
        if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            raise _Problem(f"integer {value} is outside +/-2**53")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if type(key) is not str:
                raise _Problem(f"object key {key!r} is not a string")
            try:
                _check(item)
            except _Problem as problem:
                problem.path.append(f".{key}")
                raise
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            try:
                _check(item)
            except _Problem as problem:
                problem.path.append(f"[{index}]")
                raise
        return
    if isinstance(value, str):
        return
    raise _Problem(f"{type(value).__qualname__} is not JSON data (live Python objects cannot be persisted)")


def check_canonical(value: Any, path: str = "$") -> None:
    """Raise NonCanonicalValueError unless `value` is plain JSON data within our limits."""
    try:
        _check(value)
    except _Problem as problem:
        where = path + "".join(reversed(problem.path))
        raise NonCanonicalValueError(f"{where}: {problem.message}") from None


def canonical_json(value: Any) -> str:
    """The canonical JSON text of `value`; raises NonCanonicalValueError for anything else."""
    check_canonical(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def digest(value: Any) -> str:
    """SHA-256 (hex) of the canonical JSON of `value`."""
    return sha256_hex(canonical_json(value))
