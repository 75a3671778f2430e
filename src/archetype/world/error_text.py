"""The text of an exception, made safe once for everywhere it is recorded or shown.

An exception's text reaches a settlement (`last_error`), a world's health, outbox events, the
audit table, logs and HTTP error bodies. Whatever raised it, that text must not be able to stop a
world: reading it runs arbitrary code (`__str__`, a metaclass's `__name__`), and what it answers
can be anything (not a string, a lone surrogate from `os.fsdecode`, control characters, a
megabyte). `error_text` and `safe_text` answer text that is bounded, valid Unicode (so canonical
JSON: docs/components.md, "Canonical values") and free of control characters other than newline
and tab, and they never raise an `Exception`. A `BaseException` that is not an `Exception`
(`KeyboardInterrupt`, `SystemExit`, a cancellation) raised while reading the text is let through,
as the failure policy lets it through from a materializer (docs/ledger.md).
"""

from __future__ import annotations

from collections.abc import Callable

ERROR_TEXT_LIMIT = 500
"""The most characters of an error a ledger row keeps (a settlement's, a world's health)."""
UNREADABLE = "(its text could not be read)"

# C0 and C1 control characters but newline and tab: as `\xNN`
_CONTROLS = {code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7F, 0xA0)) if chr(code) not in "\n\t"}


def safe_text(text: str, limit: int = ERROR_TEXT_LIMIT) -> str:
    """`text` cut to `limit` characters, a lone surrogate written as its escape (`\\udce9`) and a
    control character as `\\xNN`."""
    text = str.__getitem__(text, slice(0, limit))  # an exact str: a subclass's own methods never run
    if text.isascii() and text.isprintable():
        return text
    return text.translate(_CONTROLS).encode("utf-8", "backslashreplace").decode("utf-8")[:limit]


def error_text(exc: BaseException, limit: int = ERROR_TEXT_LIMIT) -> str:
    """`<type name>: <message>` of `exc`, safe (see the module); a part that cannot be read is
    `(its text could not be read)`."""
    return safe_text(f"{type_name(exc)}: {_read(lambda: str(exc), limit)}", limit)


def type_name(exc: BaseException) -> str:
    """The name of `exc`'s class, safe (a metaclass may answer anything for `__name__`)."""
    return _read(lambda: type(exc).__name__, 200)


def _read(produce: Callable[[], object], limit: int) -> str:
    try:
        text = produce()
        if isinstance(text, str):
            return safe_text(text, limit)
    except Exception:
        pass
    return UNREADABLE
