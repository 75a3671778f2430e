"""Canonical JSON and digests: the one byte-exact form of every identity-bearing value.

Both authorities (local SQLite and the Durable Object) and every client must produce the same
bytes for the same value, so the rules are strict (docs/components.md, "Canonical values"):

- objects with string keys, arrays (lists or tuples), strings, finite floats, integers, booleans, null;
- integers within +/-(2**53 - 1), JavaScript's safe range (a Durable Object returns numbers as doubles);
- no NaN or infinities;
- strings (keys included) are sequences of Unicode scalar values: no lone surrogates;
- at most `MAX_DEPTH` nested containers.

The text is sorted-key, compact and ASCII only. `check_canonical` is the one checker every
other module uses; `parse_json` is the one strict parser for JSON text from outside (request
bodies, stored payloads): it refuses what Python's `json` would otherwise accept silently (NaN
and Infinity literals, numbers that overflow to infinity, lone surrogate escapes, duplicate
keys) and never recurses deeper than the limit, so no RecursionError can escape.
"""

from __future__ import annotations

import hashlib
import json
import json.encoder
import math
import re
import sys
import threading
import unicodedata
from itertools import accumulate
from typing import Any

MAX_SAFE_INTEGER = 2**53 - 1
"""The largest integer every authority represents exactly (JavaScript's Number.MAX_SAFE_INTEGER), inclusive."""

MAX_DEPTH = 64
"""The deepest nesting of containers in any canonical document (a payload, a write-set, a request body)."""

_REASONABLE_DIGITS = 10**30
_FLOAT_MAX = sys.float_info.max
_TOO_DEEP = "nested too deep"
_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}  # a number beyond the double range is an infinity


class NonCanonicalValueError(ValueError):
    """A value has no canonical JSON form (live object, NaN, huge integer, lone surrogate, too deep...).

    `path` locates the offending value (JSONPath style, `$` is the root) and `reason` says what is
    wrong with it; the message is `"{path}: {reason}"`.
    """

    code = "non_canonical_value"

    def __init__(self, message: str, *, path: str = "$", reason: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.reason = reason if reason is not None else message


class _Problem(Exception):
    """Carries a refusal up the recursion, collecting its path only on the way out (no path
    strings are built for values that are fine, which is almost all of them)."""

    def __init__(self, message: str) -> None:
        self.message = message
        self.path: list[str] = []


def path_step(step: str | int) -> str:
    """One JSONPath step: `[3]` for an index, `.name` for a plain key, `["any key"]` otherwise
    (quoted and escaped, so a path never carries a lone surrogate into an error message)."""
    if not isinstance(step, str):
        return f"[{int(step)}]"
    if step.isascii() and step.isidentifier():
        return f".{step}"
    return f"[{json.dumps(step, ensure_ascii=True)}]"


# Unicode categories a name may not hold (docs/errors.md, "Printable text"): controls (Cc),
# format characters (Cf: the byte order mark, bidirectional controls, zero-width characters),
# surrogates (Cs), private use (Co), line and paragraph separators (Zl, Zp). Unassigned code points
# are not refused: which ones are unassigned depends on the interpreter's Unicode version, and
# every authority (CPython, Pyodide) must give the same answer.
_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})


def printable_text(text: str) -> str:
    """`text` when it is printable text: no character of `_UNPRINTABLE`'s categories, and no
    whitespace at either end. Otherwise a ValueError naming the first offending character by its
    code point (never the character itself: a bidi control would reorder the message)."""
    if text.isascii() and all(" " <= c <= "~" for c in text) and text == text.strip():
        return text
    for index, char in enumerate(text):
        category = unicodedata.category(char)
        if category in _UNPRINTABLE:
            name = unicodedata.name(char, "no name")
            raise ValueError(f"U+{ord(char):04X} ({name}, category {category}) at index {index} is not printable text")
    if text != text.strip():
        raise ValueError("printable text neither starts nor ends with whitespace")
    return text


def _check_string(value: str) -> None:
    if value.isascii():
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _Problem(f"string has a lone surrogate at index {exc.start} (not valid Unicode)") from None


def _describe_integer(value: int) -> str:
    return str(value) if -_REASONABLE_DIGITS < value < _REASONABLE_DIGITS else f"of {value.bit_length()} bits"


def _check(value: Any, depth: int, bound: int | None) -> None:
    """Refuse (with _Problem) anything in `value` that has no canonical form.

    This runs on every identity-bearing value, so containers check their plain scalar items
    inline (no call per leaf); anything else, and every refusal, goes through the general path."""
    kind = type(value)
    if kind is dict or isinstance(value, dict):
        if depth == 0:
            raise _Problem(_TOO_DEEP)
        for key, item in value.items():
            if type(key) is not str:
                raise _Problem(f"object key of type {type(key).__qualname__} is not a string")
            if key.isascii():
                t = type(item)
                if t is str:
                    if item.isascii():
                        continue
                elif t is float:
                    if -_FLOAT_MAX <= item <= _FLOAT_MAX:  # false for NaN and both infinities
                        continue
                elif t is int:
                    if bound is None or -bound <= item <= bound:
                        continue
                elif item is None or t is bool:
                    continue
            try:
                _check_string(key)
                _check(item, depth - 1, bound)
            except _Problem as problem:
                problem.path.append(path_step(key))
                raise
        return
    if kind is list or kind is tuple or isinstance(value, (list, tuple)):
        if depth == 0:
            raise _Problem(_TOO_DEEP)
        for index, item in enumerate(value):
            t = type(item)
            if t is str:
                if item.isascii():
                    continue
            elif t is float:
                if -_FLOAT_MAX <= item <= _FLOAT_MAX:
                    continue
            elif t is int:
                if bound is None or -bound <= item <= bound:
                    continue
            elif item is None or t is bool:
                continue
            try:
                _check(item, depth - 1, bound)
            except _Problem as problem:
                problem.path.append(f"[{index}]")
                raise
        return
    if kind is str or isinstance(value, str):
        _check_string(value)
        return
    if value is None or kind is bool:
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Problem(f"{_NON_FINITE[repr(float(value))]} is not a finite number (JSON has no NaN or infinities)")
        return
    if isinstance(value, int):
        if bound is not None and not -bound <= value <= bound:
            raise _Problem(f"integer {_describe_integer(value)} is outside +/-(2**53-1)")
        return
    raise _Problem(f"{type(value).__qualname__} is not JSON data (live Python objects cannot be persisted)")


def check_canonical(value: Any, path: str = "$", *, max_depth: int = MAX_DEPTH, integers: bool = True) -> None:
    """Raise NonCanonicalValueError unless `value` is plain JSON data within our limits.

    `max_depth` bounds nested containers (a scalar is depth 0, `[]` is 1). `integers=False`
    leaves integer ranges to the caller (a request body, whose fields each have their own bounds).
    """
    try:
        _check(value, max_depth, MAX_SAFE_INTEGER if integers else None)
    except _Problem as problem:
        where = path + "".join(reversed(problem.path))
        reason = f"nested deeper than {max_depth} levels" if problem.message is _TOO_DEEP else problem.message
        raise NonCanonicalValueError(f"{where}: {reason}", path=where, reason=reason) from None


PLAIN_SORTED, PLAIN = 2, 1
"""What `plain_json` answers for a value it vouches for: its objects' keys are (or not all are)
in sorted order already."""


def plain_json(value: Any, max_depth: int = MAX_DEPTH) -> int:
    """Whether container `value` is canonical and made only of the exact types `json.loads`
    gives (dict, list, str, int, float, bool, None: no subclass, no tuple), so that its canonical
    text parses back to an equal value of the same types: PLAIN_SORTED when every object's keys
    are also in sorted order (the parsed value is then the same value, key order included), PLAIN
    when not, 0 when it is not plain or not canonical (`check_canonical` says why, or accepts it
    anyway)."""
    if max_depth == 0:
        return 0
    kind = type(value)
    if kind is dict:
        order = PLAIN_SORTED
        previous = None
        for key, item in value.items():
            if type(key) is not str or not (key.isascii() or _unicode(key)):
                return 0
            if previous is not None and key < previous:
                order = PLAIN
            previous = key
            if not _plain_scalar(item):
                inner = plain_json(item, max_depth - 1)
                if not inner:
                    return 0
                order = min(order, inner)
        return order
    if kind is list:
        order = PLAIN_SORTED
        for item in value:
            if not _plain_scalar(item):
                inner = plain_json(item, max_depth - 1)
                if not inner:
                    return 0
                order = min(order, inner)
        return order
    return 0


def _plain_scalar(item: Any) -> bool:
    t = type(item)
    if t is str:
        return item.isascii() or _unicode(item)
    if t is float:
        return -_FLOAT_MAX <= item <= _FLOAT_MAX  # false for NaN and both infinities
    if t is int:
        return -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER
    return item is None or t is bool


def _unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False), built
# once: every payload, digest and component text goes through it, and json.dumps builds a
# JSONEncoder and its C encoder anew on every call. No circular-reference markers: what it is
# given is checked canonical first (which bounds its depth), or is a value just dumped from a
# model, where a cycle cannot be and too deep a nesting is a RecursionError. (CPython and Pyodide
# have the C encoder; elsewhere json's own.)
_C_MAKE_ENCODER = getattr(json.encoder, "c_make_encoder", None)
_C_ENCODER = (
    None if _C_MAKE_ENCODER is None
    else _C_MAKE_ENCODER(None, None, json.encoder.encode_basestring_ascii, None, ":", ",", True, False, False)
)
_PY_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def canonical_text(value: Any) -> str:
    """The canonical layout of `value`, unchecked: sorted keys, compact, ASCII, no NaN (ValueError;
    TypeError for a value JSON has no form for). For a value already known canonical."""
    if _C_ENCODER is not None:
        return "".join(_C_ENCODER(value, 0))
    return _PY_ENCODER.encode(value)


def canonical_json(value: Any) -> str:
    """The canonical JSON text of `value`; raises NonCanonicalValueError for anything else."""
    check_canonical(value)
    return canonical_text(value)


# An empty SHA-256 state, copied per digest: the constructor looks the algorithm up anew on every
# call (OpenSSL's fetch: about a tenth of a command's digest), a copy does not.
_SHA256 = hashlib.sha256()


def sha256_hex(text: str) -> str:
    hasher = _SHA256.copy()
    hasher.update(text.encode("ascii"))
    return hasher.hexdigest()


def digest(value: Any) -> str:
    """SHA-256 (hex) of the canonical JSON of `value`."""
    return sha256_hex(canonical_json(value))


# -- strict parsing of JSON text from outside --
_STRING_LITERAL = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKETS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def nesting_exceeds(text: str | bytes, max_depth: int = MAX_DEPTH) -> bool:
    """Whether JSON text nests containers deeper than `max_depth`, found without parsing it
    (so without recursion): string literals are dropped, then the brackets are counted."""
    opening = text.count("[") + text.count("{") if isinstance(text, str) else text.count(b"[") + text.count(b"{")
    if opening <= max_depth:
        return False  # too few brackets to nest that deep, strings included: the common case
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    brackets = _STRING_LITERAL.sub(b"", raw).translate(_BRACKETS, _NOT_BRACKETS)
    if brackets.count(b"\x01") <= max_depth:
        return False
    if b"\x01" * (max_depth + 1) in brackets:
        return True
    return max(accumulate(memoryview(brackets).cast("b"))) > max_depth


def _too_deep(max_depth: int) -> NonCanonicalValueError:
    reason = f"nested deeper than {max_depth} levels"
    return NonCanonicalValueError(f"$: {reason}", reason=reason)


def load_json(text: str | bytes, *, max_depth: int = MAX_DEPTH, decoder: json.JSONDecoder | None = None) -> Any:
    """`json.loads` with its nesting bounded first, so it cannot recurse without limit, and
    nothing else checked: for text the caller verifies itself (a stored payload, which must
    re-encode to the same canonical bytes). Raises json.JSONDecodeError for text that is not
    JSON, NonCanonicalValueError for nesting or a number literal Python will not read."""
    if nesting_exceeds(text, max_depth):
        raise _too_deep(max_depth)
    try:
        return json.loads(text) if decoder is None else _decoded(_json_text(text), decoder)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise
    except ValueError:  # an integer literal beyond Python's digit limit
        reason = "an integer literal has too many digits"
        raise NonCanonicalValueError(f"$: {reason}", reason=reason) from None
    except RecursionError:  # not reached after the scan; kept so that none can ever escape
        raise _too_deep(max_depth) from None


def _json_text(text: str | bytes | bytearray) -> str:
    """The text `json.loads` would decode: bytes in the encoding it detects; a str opening with a
    byte order mark is not JSON. (A decoder of our own is kept, not built per call as loads does.)"""
    if isinstance(text, (bytes, bytearray)):
        # An object's brace first, no NUL next: UTF-8 by `detect_encoding`'s own rules (no byte
        # order mark, not UTF-16 or 32), without its Python checks (a fifth of a request body's parse).
        utf8 = text[:1] == b"{" and text[1:2] != b"\x00"
        return text.decode("utf-8" if utf8 else json.detect_encoding(text), "surrogatepass")
    if text.startswith("\ufeff"):
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    return text


def _decoded(text: str, decoder: json.JSONDecoder) -> Any:
    """`decoder.decode(text)`: for the usual text, a value with nothing around it, its scanner
    alone (decode's Python frames and two whitespace matches cost as much as the scan); any other
    text (whitespace around, extra data, no value) is decoded by `decode`, with its errors."""
    try:
        value, end = decoder.scan_once(text, 0)  # type: ignore[attr-defined]  # the scanner every JSONDecoder has
    except StopIteration:
        return decoder.decode(text)
    return value if end == len(text) else decoder.decode(text)


_PLAIN_DECODER = json.JSONDecoder()  # json.loads' own settings


def loads(text: object) -> Any:
    """`json.loads(text)`: the same value or the same error, the usual text read by the scanner
    alone (`_decoded`). For text that needs no check beyond the parse, such as a stored payload."""
    if not isinstance(text, (str, bytes, bytearray)):
        return json.loads(text)  # type: ignore[arg-type]  # its TypeError, as the caller would get it
    return _decoded(_json_text(text), _PLAIN_DECODER)


_parsing = threading.local()  # the duplicate keys found by the parse in progress on this thread


def _pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
    mapping = dict(items)
    if len(mapping) != len(items):
        seen: set[str] = set()
        for key, _ in items:
            if key in seen:
                _parsing.duplicates.append(key)
            seen.add(key)
    return mapping


_STRICT_DECODER = json.JSONDecoder(object_pairs_hook=_pairs)


def parse_json(text: str | bytes, *, max_depth: int = MAX_DEPTH, integers: bool = True) -> Any:
    """Parse JSON text from outside strictly: the value, or an error saying why there is none.

    Raises `json.JSONDecodeError` (a ValueError) when the text is not JSON at all, and
    NonCanonicalValueError when it is JSON that has no canonical value: nesting deeper than
    `max_depth`, NaN/Infinity literals or numbers beyond the double range, lone surrogates
    (escaped or not), duplicate object keys, and (unless `integers=False`) integers outside
    +/-(2**53-1).
    """
    duplicates: list[str] = []
    _parsing.duplicates = duplicates
    value = load_json(text, max_depth=max_depth, decoder=_STRICT_DECODER)
    check_canonical(value, max_depth=max_depth, integers=integers)
    if duplicates:
        reason = f"object key {json.dumps(duplicates[0], ensure_ascii=True)} appears more than once"
        raise NonCanonicalValueError(f"$: {reason}", reason=reason)
    return value
