"""One heartbeat loop that extends all the executor's live leases in one write.

Every ``lease_ttl / 3`` the leases of live attempts (commands and http calls) are renewed
in one store call; any lease the store reports lost has its command stopped at once, and
the lease watch (engine/leasewatch.py) is told which leases were renewed and when the
heartbeat was sent. A heartbeat the store could not write is tried again within a second.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta

from jobctl.domain.clock import Clock
from jobctl.engine.leasewatch import LeaseWatch
from jobctl.errors import StoreCorrupt, StoreUnavailable, Unavailable
from jobctl.logfmt import logval
from jobctl.lograte import RateLimitedLog
from jobctl.store.aio import AsyncStore

log = logging.getLogger("jobctl.executor")  # the executor's lines, wherever they are written


class Heartbeats:
    def __init__(
        self,
        store: AsyncStore,
        clock: Clock,
        lease_ttl: float,
        watch: LeaseWatch | None,
        leases: Callable[[], list[tuple[int, int]]],
        lost: Callable[[int, int], None],
        on_store_full: Callable[[], bool],
    ) -> None:
        """``leases``: (job id, generation) of every live attempt; ``lost``: called with
        the job id and generation of each lease the store found lost (stop it)."""
        self._store = store
        self._clock = clock
        self._ttl = lease_ttl
        self._watch = watch
        self._leases = leases
        self._lost = lost
        self._on_store_full = on_store_full
        self._errors = RateLimitedLog(log, clock)  # a failing disk: not a line a second
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def every(self) -> float:
        return self._ttl / 3

    def start(self) -> None:
        """Start the loop at the first attempt; it runs until :meth:`close`."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _loop(self) -> None:
        every = self.every
        while True:
            await self._clock.sleep_until(self._clock.now() + timedelta(seconds=every), self._wake)
            self._wake.clear()
            # A heartbeat the store could not write is tried again within a second, not
            # a third of the lease later: the lease must not run out over a full disk.
            ok = await self.once()
            every = self.every if ok else min(1.0, self.every)

    async def once(self) -> bool:
        """Extend every live lease; False if the store could not write (tried again soon)."""
        leases = self._leases()
        if not leases:
            return True
        sent_at = self._clock.now()  # the server's lease end is later than this + ttl
        try:
            lost = await self._store.run(self._store.store.heartbeat, leases, self._ttl)
        except StoreCorrupt:  # logged once by the store; its leases run out after repair
            return True  # no sooner retry: nothing but a restart clears it
        except Exception as exc:
            text = logval(exc)
            self._errors.error(text, "event=heartbeat_failed error=%s", text)
            if isinstance(exc, Unavailable) and not isinstance(exc, StoreUnavailable):
                self._on_store_full()  # a full disk; the database server away is not one
            return False
        self._errors.recovered("event=heartbeat_recovered")
        gens = dict(leases)
        if self._watch is not None:
            self._watch.renewed(set(gens) - set(lost), sent_at)
        for job_id in lost:
            self._lost(job_id, gens.get(job_id, 0))
        return True
