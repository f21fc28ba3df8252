"""The timer: sleeps until the next due instant, then claims what the executor can take.

It never polls on a fixed interval. Each tick asks the store what there is to do,
reclaims leases that ran out, claims due jobs up to the executor's free slots, and sleeps
until the next instant with work (the earliest ``run_at``, token or lease expiry).
Enqueue (only of jobs due before that instant), cancel and a freed executor slot wake it
early through :meth:`Timer.wake`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from jobctl.domain.clock import Clock
from jobctl.domain.models import Job
from jobctl.engine import indoubt
from jobctl.engine.diskguard import CACHE_SECONDS, DiskGuard
from jobctl.engine.executor import Executor
from jobctl.engine.service import Service
from jobctl.metrics import Metrics
from jobctl.store.aio import AsyncStore
from jobctl.store.base import Wakeups

log = logging.getLogger("jobctl.timer")
RECLAIM_BATCH = 500
#: Jobs moved into the due bucket per tick while every slot is busy (one short writer op).
BACKGROUND_PROMOTE = 1_000
#: During a backlog (the last claim got all it asked for), a tick claims at once, without
#: reading the wakeups first, if they were read this recently: a burst then costs one
#: claim per freed slot, not a claim and two reads (issue 17). Lease expiries are still
#: looked at, at least this often.
BACKLOG_READ_EVERY = timedelta(seconds=1)


class Timer(Service):
    name = "timer"

    def __init__(
        self,
        store: AsyncStore,
        clock: Clock,
        executor: Executor,
        metrics: Metrics | None = None,
        disk: DiskGuard | None = None,
    ) -> None:
        super().__init__(clock)
        self._store = store
        self._executor = executor
        self._disk = disk
        self.last_tick: datetime | None = None
        self.ticks = 0
        self._metrics = metrics or Metrics()
        #: Told of every job a reclaim moved on (the failure notifier wants the dead).
        self.on_reclaimed: Callable[[Job], None] = lambda job: None
        #: Called at each tick: the workers' long-polls look for work again (a lease
        #: promotes and takes what is due itself; docs/workers.md).
        self.on_tick: Callable[[], None] = lambda: None
        self._backlog = False  # the last claim got all it asked for: more is likely due
        self._read_at: datetime | None = None  # when the wakeups were last read
        self._lease_expiry: datetime | None = None  # the earliest one, as then read
        self._unpromoted = False  # as then read: a busy tick promotes a batch
        self._next_run_at: datetime | None = None  # the earliest run_at, as then read
        #: A claim failed: its commit may have landed all the same (engine/indoubt.py).
        self._unsure = False

    async def run_once(self) -> datetime | None:
        """One tick; returns when the next tick is due (``None``: only when woken).

        Reads first: a tick that finds nothing due and no lease run out writes nothing
        (during a backlog it claims first, see :data:`BACKLOG_READ_EVERY`; so does the
        tick at the ``run_at`` the last read found, see :meth:`_due_as_read`).
        """
        store = self._store.store
        now = self._clock.now()
        self.last_tick = now
        self.ticks += 1
        self._metrics.timer_ticks.inc()
        self.on_tick()
        if self._unsure:  # before any claim: see engine/indoubt.py
            await indoubt.release_unknown(self._store, self._executor)
            self._unsure = False
        done, then = await self._claim_first(now)
        if done:
            return then
        w = await self._read(now)
        if w.next_lease_expiry is not None and w.next_lease_expiry <= now:
            await self._reclaim()
            w = await self._read(now)
        if self._disk is not None and self._disk.low() is not None:
            # Below the disk floor no queued job starts (running ones go on): look again
            # when the measurement is renewed, so dispatch resumes once space is back.
            held = now + timedelta(seconds=CACHE_SECONDS)
            return min(t for t in (held, w.next_lease_expiry) if t is not None)
        if w.due_now and self._executor.free_slots > 0 and not self._stopping:
            await self._claim()
            # Read again only with slots left: with none free, only other owners' lease
            # expiries matter below, and a claim of ours does not move those.
            if self._executor.free_slots > 0:
                w = await self._read(now)
        free = self._executor.free_slots
        if w.due_now and free > 0:
            return self._clock.now()
        if free == 0 and w.unpromoted and not self._stopping:
            # A backlog waits for slots in the future bucket, where status can only count
            # it by scanning. Promote it a batch per tick (each one short writer op) so it
            # is counted exactly and cheaply in job_counts; claims then find it due.
            moved = await self._store.run(store.promote_due, BACKGROUND_PROMOTE)
            if moved == BACKGROUND_PROMOTE:
                return self._clock.now()
        # With every slot taken, a due (or soon due) job waits for a slot, and a freed slot
        # wakes the timer: sleeping until ``next_run_at`` (in the past during a backlog
        # not yet promoted) would only spin on store reads. Lease expiries still count.
        wanted = (w.next_run_at, w.next_lease_expiry) if free > 0 else (w.next_lease_expiry,)
        times = [t for t in wanted if t is not None]
        return min(times) if times else None

    async def _claim_first(self, now: datetime) -> tuple[bool, datetime | None]:
        """The claim a tick makes before it reads, if any; (True, next tick) when the tick
        ends there (a backlog: :data:`BACKLOG_READ_EVERY`), else (False, None): read on."""
        if self._claims_at_once(now):
            free = self._executor.free_slots
            if free == 0 and not self._unpromoted:
                return True, self._lease_expiry  # woken as a result committed: no slot
            if free > 0:
                await self._claim()
                if self._backlog:  # still more due: claim again once a slot frees
                    return True, now if self._executor.free_slots > 0 else self._lease_expiry
        elif self._due_as_read(now):
            await self._claim()  # the wakeups are read next, as on every tick
        return False, None

    def _claims_at_once(self, now: datetime) -> bool:
        """Whether this tick may claim (or, with no slot free, do nothing) without reading
        the wakeups (see :data:`BACKLOG_READ_EVERY`): a backlog, recent wakeups, disk room."""
        return (
            self._backlog
            and not self._stopping
            and self._read_at is not None
            and now - self._read_at < BACKLOG_READ_EVERY
            and (self._disk is None or self._disk.low() is None)
        )

    def _due_as_read(self, now: datetime) -> bool:
        """Whether this tick is at (or past) the earliest ``run_at`` the last read found,
        with a slot free and disk room: then it claims before it reads (issue 17). The
        attempt's ``started_at`` is stamped by the claim, so the read (a hop to a store
        thread and back) no longer stands between the due instant and that stamp: it was
        a share of the dispatch lag's tail under load. A job cancelled meanwhile costs
        one claim that finds nothing."""
        due = self._next_run_at
        return (
            due is not None
            and due <= now
            and not self._stopping
            and self._executor.free_slots > 0
            and (self._disk is None or self._disk.low() is None)
        )

    async def _read(self, now: datetime) -> Wakeups:
        w = await self._store.run(self._store.store.wakeups, self._executor.owner)
        self._read_at, self._lease_expiry = now, w.next_lease_expiry
        self._unpromoted = w.unpromoted
        self._next_run_at = w.next_run_at
        return w

    async def _reclaim(self) -> None:
        store = self._store.store
        for job in await self._store.run(
            store.reclaim_expired, RECLAIM_BATCH, self._executor.owner
        ):
            self._metrics.reclaimed(job, "expired")
            self.on_reclaimed(job)
            log.warning(
                "event=reclaimed job=%s attempt=%s status=%s reason=lease_expired",
                job.id,
                job.attempt,
                job.status.value,
            )

    async def _claim(self) -> None:
        ex = self._executor
        began = time.perf_counter()  # real time: the fake clock stands still in a call
        asked = ex.free_slots
        try:
            claims = await self._store.claim_due(ex.owner, asked, ex.config.lease_ttl)
        except BaseException:
            self._unsure = True
            raise
        self._metrics.claim_duration.observe(time.perf_counter() - began)
        self._metrics.claim_size.observe(len(claims))
        self._backlog = asked > 0 and len(claims) == asked
        for claim in claims:
            ex.take(claim)
