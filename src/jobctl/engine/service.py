"""The shape every background service of the daemon shares (River's Start + runOnce).

A service runs :meth:`Service.run_once` and sleeps until the instant it returns (``None``:
until woken), on the injected clock; :meth:`wake` cuts the sleep short, :meth:`stop` ends
the loop. A failing pass is logged and retried after a second: a broken disk must not
silently kill the timer or the materializer. The log is rate-limited
(:class:`jobctl.lograte.RateLimitedLog`): the first failure at once, the same failure
again at most once a minute with how many were suppressed, and one line when a pass
succeeds again. A corrupt database is different: retrying cannot help, so a pass that
finds the store corrupt parks the service (quietly: the store logged the corruption
once) until the daemon stops.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from datetime import datetime, timedelta

from jobctl.domain.clock import Clock
from jobctl.errors import StoreCorrupt
from jobctl.logfmt import logval
from jobctl.lograte import RateLimitedLog


class Service(ABC):
    name = "service"
    #: Seconds before a failed pass is retried.
    retry_delay = 1.0
    #: Longest sleep between passes (None: until the deadline or a wake-up). Set where
    #: another process may add work without waking this one (daemons sharing PostgreSQL:
    #: the safety net behind LISTEN/NOTIFY).
    max_sleep: float | None = None

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._wake = asyncio.Event()
        self._stopping = False
        self._asleep = False
        self._deadline: datetime | None = None
        #: The store was found corrupt: no more passes (the daemon is degraded).
        self.parked = False

    def wake(self, at: datetime | None = None) -> None:
        """Run a pass now; with ``at``, only if that is before the pass already planned.

        Enqueueing thousands of jobs due next week must not make the timer re-read the
        store thousands of times: a sleeper whose deadline comes first sees them anyway.
        """
        if (
            at is not None
            and self._asleep
            and self._deadline is not None
            and (at >= self._deadline)
        ):
            return
        self._wake.set()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()

    async def run(self) -> None:
        errors = RateLimitedLog(logging.getLogger(f"jobctl.{self.name}"), self._clock)
        while not self._stopping:
            self._wake.clear()
            try:
                deadline = await self.run_once()
            except StoreCorrupt:
                self.parked = True
                await self._until_stopped()
                continue
            except Exception as exc:
                text = logval(exc)
                errors.error(text, "event=%s_failed error=%s", self.name, text)
                await asyncio.sleep(self.retry_delay)
                continue
            errors.recovered("event=%s_recovered", self.name)
            if self.max_sleep is not None:
                cap = self._clock.now() + timedelta(seconds=self.max_sleep)
                deadline = cap if deadline is None else min(deadline, cap)
            if not self._stopping:
                self._asleep, self._deadline = True, deadline
                try:
                    await self._clock.sleep_until(deadline, self._wake)
                finally:
                    self._asleep = False

    async def _until_stopped(self) -> None:
        while not self._stopping:
            await self._wake.wait()
            self._wake.clear()

    @abstractmethod
    async def run_once(self) -> datetime | None:
        """One pass; returns when the next pass is due (``None``: only when woken)."""
