"""The materializer: turns due schedule occurrences into jobs, then sleeps until the next.

Each pass asks the store to materialize a batch of schedules — create the occurrence
jobs, record skips, advance each schedule's cursor, all in one transaction — until no
schedule is due, then sleeps until the earliest ``next_run_at``. Creating, resuming or
triggering a schedule, and the end of a job that a queued occurrence waits for, wake
it early. Every skip is logged here as well as recorded in the store, and so is every
schedule the store marked broken (it could not be materialized; the others go on).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from jobctl.domain.clock import Clock
from jobctl.domain.schedule import Materialized, nominal_text
from jobctl.engine.service import Service
from jobctl.logfmt import logval
from jobctl.metrics import Metrics
from jobctl.store.aio import AsyncStore

log = logging.getLogger("jobctl.materializer")
BATCH = 1000


class Materializer(Service):
    name = "materializer"

    def __init__(
        self,
        store: AsyncStore,
        clock: Clock,
        on_created: Callable[[], None] = lambda: None,
        metrics: Metrics | None = None,
    ) -> None:
        super().__init__(clock)
        self._store = store
        self.on_created = on_created
        self.last_run: datetime | None = None
        self.created_total = 0
        self._metrics = metrics or Metrics()

    async def run_once(self) -> datetime | None:
        """Materialize everything due now; return when the next occurrence is due."""
        self.last_run = self._clock.now()
        while True:
            done = await self._store.run(self._store.store.materialize, BATCH)
            self._report(done)
            if done.schedules < BATCH:
                break
        return await self._store.run(self._store.store.schedule_wakeup)

    def _report(self, done: Materialized) -> None:
        for sid, reason in done.broken:
            # Once per schedule: a broken one is left out of later passes until resumed.
            log.error("event=schedule_broken schedule=%s reason=%s", sid, logval(reason))
        for sid, job_id, nominal in done.created:
            log.info(
                "event=enqueued schedule=%s job=%s scheduled_for=%s",
                sid,
                job_id,
                nominal_text(nominal),
            )
        for rec in done.skipped:
            self._metrics.schedule_skips.labels(rec.reason).inc(rec.skips.count)
            first = nominal_text(rec.skips.first) if rec.skips.first else "-"
            last = nominal_text(rec.skips.last) if rec.skips.last else "-"
            log.warning(
                "event=skipped schedule=%s reason=%s count=%d first=%s last=%s",
                rec.schedule_id,
                rec.reason,
                rec.skips.count,
                first,
                last,
            )
        if done.created:
            self._metrics.jobs_enqueued.labels("schedule").inc(len(done.created))
            self.created_total += len(done.created)
            self.on_created()
