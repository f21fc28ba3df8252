"""Time, injected.

Nothing in jobctl calls ``datetime.now()`` directly: services and the store take a
:class:`Clock`. Production uses :class:`SystemClock`; tests use :class:`FakeClock` and
move time forward instead of sleeping, and every sleeper wakes when time passes its
deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current instant, timezone-aware UTC."""
        ...

    async def sleep_until(self, deadline: datetime | None, wake: asyncio.Event) -> None:
        """Return at ``deadline`` (never if ``None``) or as soon as ``wake`` is set."""
        ...


class SystemClock:
    """The host's wall clock.

    A deadline is a wall-clock instant, but a sleep runs on the monotonic clock, which
    does not follow a step of the wall clock (NTP, an operator's ``date -s``, a resumed
    VM). So a sleep is taken in naps of at most :attr:`nap` seconds and the deadline
    checked against the wall clock after each: a step forward is noticed within a nap,
    not after the whole sleep computed before it (found by drills/clock_jumps.py: a
    schedule sleeping until 12:01 on a clock stepped back 10 minutes then forward 20 did
    not fire for 10 real minutes).
    """

    nap: float = 30.0

    def now(self) -> datetime:
        return datetime.fromtimestamp(time.time(), UTC)

    async def sleep_until(self, deadline: datetime | None, wake: asyncio.Event) -> None:
        while not wake.is_set():
            timeout = None
            if deadline is not None:
                left = (deadline - self.now()).total_seconds()
                if left <= 0:
                    return
                timeout = min(left, self.nap)
            # ``asyncio.timeout``, not ``wait_for``: the sleeper's own task waits on the
            # event, so a wake-up reaches it in one turn of the loop instead of three
            # (wait_for's inner task, then its waiter). Issue 17: the timer, woken as
            # a helper message's exits free the slots, then claims before the finishes
            # of those exits are handed to the store, and its claim commits first.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await wake.wait()


#: Moves the daemon's clock by this many seconds (``JOBCTL_CLOCK_SKEW=30``): several
#: daemons on one host whose clocks disagree, as on several hosts, for tests and drills of
#: the PostgreSQL backend (which corrects it: jobctl.store.pg.clock). Not a setting.
CLOCK_SKEW_ENV = "JOBCTL_CLOCK_SKEW"


class SkewedClock(SystemClock):
    """The host's clock off by a fixed number of seconds, like a host without NTP."""

    def __init__(self, seconds: float) -> None:
        self.skew = timedelta(seconds=seconds)

    def now(self) -> datetime:
        return super().now() + self.skew


#: The largest skew :func:`skewed_clock` takes (a year): beyond, a date overflows.
MAX_SKEW = 366 * 86400.0


def skewed_clock(text: str | None) -> Clock:
    """The host's clock, moved by ``text`` seconds when given (see :data:`CLOCK_SKEW_ENV`)."""
    if not text:
        return SystemClock()
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not abs(seconds) <= MAX_SKEW:  # NaN and infinities fail this too
        from jobctl.errors import InvalidInput

        raise InvalidInput(
            f"{CLOCK_SKEW_ENV}={text!r} is not a number of seconds within +-{MAX_SKEW:.0f}"
        )
    return SkewedClock(seconds)


class FakeClock:
    """A clock that only moves when a test calls :meth:`advance` or :meth:`set`."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2027, 1, 1, tzinfo=UTC)
        self._waiters: list[asyncio.Event] = []

    def now(self) -> datetime:
        return self._now

    def set(self, when: datetime) -> None:
        if when < self._now:
            raise ValueError("a FakeClock never moves backwards")
        self._now = when
        for event in list(self._waiters):
            event.set()

    def advance(self, seconds: float = 0.0, **kw: float) -> datetime:
        self.set(self._now + timedelta(seconds=seconds, **kw))
        return self._now

    async def sleep_until(self, deadline: datetime | None, wake: asyncio.Event) -> None:
        tick = asyncio.Event()
        self._waiters.append(tick)
        try:
            while not wake.is_set() and (deadline is None or self._now < deadline):
                waiters = [asyncio.ensure_future(wake.wait()), asyncio.ensure_future(tick.wait())]
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                for w in waiters:
                    w.cancel()
                tick.clear()
        finally:
            self._waiters.remove(tick)


def utc(dt: datetime) -> datetime:
    """Normalise an aware datetime to UTC; reject naive ones (they hide bugs)."""
    if dt.tzinfo is None:
        raise ValueError("naive datetime")
    return dt.astimezone(UTC)


def iso(dt: datetime | None) -> str | None:
    """UTC ISO-8601 with a trailing ``Z`` and millisecond precision (the wire format)."""
    if dt is None:
        return None
    return _iso(dt)


@functools.lru_cache(maxsize=4096)
def _iso(dt: datetime) -> str:
    # Cached: a batch's jobs share their run_at and created_at, and rendering was ~7% of
    # a batch enqueue. isoformat is C code; strftime here cost ~10 µs a call. Equal
    # instants in other zones hit the same entry, which is right: the output is UTC.
    return utc(dt).isoformat(timespec="milliseconds")[:-6] + "Z"


#: :func:`iso` of a time known to be there: the cached function itself, without ``iso``'s
#: Python frame around it (a job's answer renders up to six times, thousands of jobs a
#: second in batches).
iso_at = _iso
