"""What a command's own code raises to choose its failure class (docs/guide/failures.md).

Beside the spec's exception-type rule (`LookupError`, `TypeError`, `ValueError`: REJECTED; any
other `Exception`: retried within the attempt budget), a materializer may say what it means:

- `Retryable`: a transient failure; retried while the budget lasts, then DEAD_LETTER. It wins
  over the type rule, so `class Busy(Retryable, LookupError)` is retried, never rejected.
- `Permanent`: retrying cannot help; DEAD_LETTER at once, whatever budget is left, so an
  operator can inspect and redrive it (`Ledger.redrive`).

They are classes to raise (or to subclass), in the spirit of River's JobSnooze / JobCancel.
"""

from __future__ import annotations


class Retryable(Exception):
    """Raise from a command's materializer: retry this command while its attempt budget lasts."""


class Permanent(Exception):
    """Raise from a command's materializer: dead-letter this command now; retrying cannot help."""
