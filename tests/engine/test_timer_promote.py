"""While every executor slot is busy, the timer promotes an overdue backlog in batches,
so status counts it from job_counts (exact and cheap) before any of it can start."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import JobSpec
from jobctl.domain.states import StopReason
from jobctl.engine.timer import BACKGROUND_PROMOTE
from tests.engine.conftest import build_engine, close_engine


async def test_a_backlog_behind_busy_slots_is_promoted_batch_by_batch(
    tmp_path: Path, clock: FakeClock
) -> None:
    eng = build_engine(tmp_path, clock)
    try:
        busy = [eng.add("sleep 30") for _ in range(eng.executor.config.concurrency)]
        await eng.timer.run_once()  # claims them: every slot is now taken
        assert eng.executor.free_slots == 0
        n = 2 * BACKGROUND_PROMOTE + 500
        due = clock.now() + timedelta(seconds=5)
        spec = JobSpec(("true",), due, os.geteuid(), queue="backlog")
        eng.store.insert([spec] * n)
        clock.advance(10)
        assert eng.store.wakeups(eng.executor.owner).unpromoted

        # Each tick moves one batch and asks to run again at once while more are left.
        assert await eng.timer.run_once() == clock.now()
        assert await eng.timer.run_once() == clock.now()
        assert await eng.timer.run_once() != clock.now()  # the last, partial batch
        assert not eng.store.wakeups(eng.executor.owner).unpromoted
        [stats] = [s for s in eng.store.stats() if s.queue == "backlog"]
        assert (stats.due, stats.scheduled, stats.running) == (n, n, 0)
        assert stats.oldest_due == due
        for job in busy:
            eng.executor.stop(job.id, StopReason.CANCEL, "test over")
        await eng.finishes(len(busy))
    finally:
        await close_engine(eng)
