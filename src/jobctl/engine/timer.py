"""The timer: sleeps until the next due instant, then claims what the executor can take.

It never polls on a fixed interval. Each tick reclaims leases that ran out, claims due
jobs up to the executor's free slots, then asks the store when there is work next (the
earliest ``run_at`` or lease expiry) and sleeps until then. Enqueue, cancel and a freed
executor slot wake it early through :meth:`Timer.wake`.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

from jobctl.domain.clock import Clock
from jobctl.engine.executor import Executor
from jobctl.store.aio import AsyncStore

log = logging.getLogger("jobctl.timer")
RECLAIM_BATCH = 500


class Timer:
    def __init__(self, store: AsyncStore, clock: Clock, executor: Executor) -> None:
        self._store = store
        self._clock = clock
        self._executor = executor
        self._wake = asyncio.Event()
        self._stopping = False
        self.last_tick: datetime | None = None
        self.ticks = 0

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()

    async def run(self) -> None:
        while not self._stopping:
            self._wake.clear()
            try:
                deadline = await self.run_once()
            except Exception as exc:  # a failing store must not kill the timer
                log.error("event=tick_failed error=%r", str(exc))
                deadline = self._clock.now().replace(microsecond=0)
                await asyncio.sleep(1.0)
            if self._stopping:
                break
            await self._clock.sleep_until(deadline, self._wake)

    async def run_once(self) -> datetime | None:
        """One tick; returns when the next tick is due (``None``: only when woken)."""
        store = self._store.store
        self.last_tick = self._clock.now()
        self.ticks += 1
        for job in await self._store.run(
            store.reclaim_expired, RECLAIM_BATCH, self._executor.owner
        ):
            log.warning("event=reclaimed job=%s status=%s", job.id, job.status.value)
        free = self._executor.free_slots
        if free > 0 and not self._stopping:
            claims = await self._store.run(
                store.claim_due, self._executor.owner, free, self._executor.config.lease_ttl
            )
            for claim in claims:
                self._executor.start(claim)
        w = await self._store.run(store.wakeups, self._executor.owner)
        if w.due_now and self._executor.free_slots > 0:
            return self._clock.now()
        times = [t for t in (w.next_run_at, w.next_lease_expiry) if t is not None]
        return min(times) if times else None
