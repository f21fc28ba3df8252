"""Failure notification on the timer's path (issue 12): a job whose last lease ran out
(its daemon vanished) is reclaimed dead with ``lease_expired`` and notified, with no exit
code; a notifier that cannot start is recorded, not retried. Real store and commands,
fake clock (engine/notifier.py)."""

from __future__ import annotations

import asyncio
import json
import os
import random
from pathlib import Path
from typing import Any

from jobctl.daemon import wire_engine
from jobctl.domain.clock import FakeClock
from jobctl.domain.models import JobSpec
from jobctl.domain.notify import NotifyDefaults
from jobctl.engine.execconfig import ExecutorConfig
from jobctl.store.aio import AsyncStore
from jobctl.store.sqlite import SqliteStore


async def steps(store: SqliteStore, job_id: int) -> list[dict[str, Any]]:
    """The steps of the job's notification record, once it is written."""
    async with asyncio.timeout(20):
        while (text := store.get(job_id).notified) is None:
            await asyncio.sleep(0.01)  # the notifier is a real process: poll its record
    out: list[dict[str, Any]] = json.loads(text)["steps"]
    return out


async def test_a_lease_that_ran_out_on_the_last_attempt_notifies(
    tmp_path: Path, clock: FakeClock
) -> None:
    store = SqliteStore(tmp_path / "e.db", clock, random.Random(3))
    astore = AsyncStore(store, threads=4)
    seen = tmp_path / "seen"
    line = f'echo "$JOBCTL_FAILED_DEAD_REASON:$JOBCTL_FAILED_EXIT_CODE" > {seen}'
    cfg = ExecutorConfig(concurrency=2, lease_ttl=30, kill_grace=0.5, log_dir=tmp_path / "logs")
    parts = wire_engine(
        astore, clock, cfg, f"h:{os.getpid()}:a", notify=NotifyDefaults(on_failure=line)
    )
    try:
        now, uid = clock.now(), os.geteuid()
        [ins] = store.insert([JobSpec(("true",), now, uid, max_attempts=1, cwd=str(tmp_path))])
        [bad] = store.insert(
            [JobSpec(("true",), now, uid, max_attempts=1, cwd=str(tmp_path / "gone"))]
        )
        store.claim_due("otherhost:9:dead", 2, 30)  # a daemon that then vanished
        clock.advance(31)
        await parts.timer.run_once()
        [step] = await steps(store, ins.job.id)
        assert step["exit_code"] == 0 and seen.read_text() == "lease_expired:\n"
        assert store.get(ins.job.id).attempt == 1  # no attempt used by the notifier
        # a notifier that cannot start (its cwd is gone) is recorded, never run again
        [failed] = await steps(store, bad.job.id)
        assert failed["exit_code"] is None and failed["error"].startswith("cannot start")
    finally:
        await parts.notifier.shutdown(0)
        await parts.executor.shutdown(0)
        astore.close()
        store.close()
