"""Rate-limited logging for errors that repeat (a background loop retrying every second).

A failing pass of the timer, the materializer or the reaper is retried after a second;
logging every retry buried everything else in the journal under the same line. With
:class:`RateLimitedLog` the first occurrence of an error is logged at once, repeats of it
at most once per ``interval`` with ``suppressed=N`` (how many were not logged since the
last line), and :meth:`RateLimitedLog.recovered` says once when it stopped. Time comes
from the injected clock.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from jobctl.domain.clock import Clock

#: Seconds between two lines about the same repeating error.
INTERVAL = 60.0
#: Distinct errors remembered at once; the oldest is forgotten first.
MAX_KEYS = 256


@dataclass
class _Seen:
    logged_at: datetime
    suppressed: int = 0
    total: int = 1


class RateLimitedLog:
    def __init__(self, logger: logging.Logger, clock: Clock, interval: float = INTERVAL) -> None:
        self._log = logger
        self._clock = clock
        self.interval = interval
        self._seen: dict[str, _Seen] = {}

    def log(self, level: int, key: str, msg: str, *args: object) -> bool:
        """Log ``msg % args`` unless ``key`` was logged less than ``interval`` ago; a line
        that follows suppressed repeats ends with ``suppressed=N``. True if logged."""
        now = self._clock.now()
        seen = self._seen.get(key)
        if seen is not None and (now - seen.logged_at).total_seconds() < self.interval:
            seen.suppressed += 1
            seen.total += 1
            return False
        if seen is None:
            if len(self._seen) >= MAX_KEYS:
                del self._seen[next(iter(self._seen))]
            self._seen[key] = _Seen(now)
        else:
            if seen.suppressed:
                msg, args = msg + " suppressed=%d", (*args, seen.suppressed)
            seen.logged_at, seen.suppressed, seen.total = now, 0, seen.total + 1
        self._log.log(level, msg, *args)
        return True

    def error(self, key: str, msg: str, *args: object) -> bool:
        return self.log(logging.ERROR, key, msg, *args)

    def recovered(self, msg: str, *args: object) -> int:
        """After a success: forget every error seen and, if there were any, log ``msg``
        (at info) with ``failures=N``, how many occurred. Returns N."""
        if not self._seen:
            return 0  # the common case, on every pass and commit
        total = sum(s.total for s in self._seen.values())
        self._seen.clear()
        if total:
            self._log.info(msg + " failures=%d", *args, total)
        return total
