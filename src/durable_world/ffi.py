"""The one place that knows values may be JavaScript objects.

Under Pyodide, SQL cursors, RPC arguments and binding results can arrive as `JsProxy` values and
calls into bindings need JS arrays/objects; under CPython (the stand-in runtime) they are already
plain Python. Everything else in durable_world works on plain Python values.
"""

from __future__ import annotations

import json
from typing import Any

try:
    from js import JSON
except ImportError:  # CPython: values are plain Python already
    JSON = None


def to_py(value: Any) -> Any:
    convert = getattr(value, "to_py", None)
    return convert() if callable(convert) else value


def to_js(value: Any) -> Any:
    """A JSON-shaped Python value as the JS value a binding expects: dicts as plain objects, None
    as null, every int a number. Through JSON, because Pyodide hands an int of magnitude 2**53 - 1
    and up to JavaScript as a BigInt, which a JSON queue message cannot carry (workerd: "Do not
    know how to serialize a BigInt"; outbox events hold ticks and entity ids up to 2**53 - 1), and
    because Pyodide's own `to_js` makes None `undefined`, which a JSON message drops (the Workers
    SDK's binding wrapper makes it null, other hosts may not)."""
    if JSON is None:
        return value
    return JSON.parse(json.dumps(value))


# Pyodide hands a Python int to JavaScript as a number only below 2**53 - 1 in magnitude and as a
# BigInt from there on, and the storage API binds null, strings, doubles and bytes, no BigInt. The
# ledger's integers stay within +/-(2**53-1), all exact as doubles, so the two largest magnitudes are
# handed over as floats (every JS number binds as a double anyway).
_BIGINT_FROM = 2**53 - 1
_EXACT_DOUBLE = 2**53


def sql_binding(value: Any) -> Any:
    """A SQL parameter as `ctx.storage.sql.exec` can bind it."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= _BIGINT_FROM:
        if abs(value) > _EXACT_DOUBLE:
            raise ValueError(f"integer {value} is beyond +/-2**53: Durable Object SQL binds it as an inexact double")
        return float(value)
    return value


def number_or_none(value: Any) -> float | None:
    """A storage promise's `number | null` (Pyodide may hand JS null back as a sentinel, not None)."""
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None
