"""A failure that repeats (a world's ticks, a background round such as a heartbeat or the audit
projection) is logged when it starts, then at most one line every `every_s`, and once when it
ends (a warning, visible at the default level): never a line, let alone a traceback, per attempt (a full disk fails every attempt).

The first line carries the traceback, unless the failure is a typed `CommandError`, or was raised
from one (a tick outcome unknown, because the storage could not write): its code and message say
all there is (`storage_unavailable`, `stale_writer`, ...). Every line's error text is
`error_text`'s: bounded, valid Unicode, one line.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from archetype.commands.errors import CommandError
from archetype.world.error_text import error_text


class FailureStreak:
    def __init__(self, log: logging.Logger, subject: str, every_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.log, self.subject, self.every_s, self._clock = log, subject, every_s, clock
        self.failures = 0
        self._logged_at = 0.0

    def failed(self, exc: BaseException, doing: str) -> None:
        """One more failure of `doing` (what failed, and what happens next: "tick 5 failed;
        retrying in 0.1 s")."""
        now, self.failures = self._clock(), self.failures + 1
        line = error_text(exc).splitlines()[0]
        if self.failures == 1:
            self.log.error("%s: %s (logging at most every %.0f s): %s", self.subject, doing, self.every_s, line,
                           exc_info=None if isinstance(exc, CommandError) or isinstance(exc.__cause__, CommandError) else exc)  # fmt: skip
        elif now - self._logged_at >= self.every_s:
            self.log.warning("%s: %s, still, after %d attempts: %s", self.subject, doing, self.failures, line)
        else:
            return
        self._logged_at = now

    def succeeded(self, done: str = "works again") -> None:
        """The streak, if any, is over: one line saying so, at WARNING like the streak's later lines,
        so that whoever saw the failure at the default level (warning) sees its end too."""
        if self.failures:
            self.log.warning("%s: %s after %d failed attempts", self.subject, done, self.failures)
            self.failures = 0
