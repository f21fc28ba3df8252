"""An in-process engine (store, timer, executor) on a real SQLite file with real
subprocesses, driven by a fake clock. Tests wait on finish events, never on sleeps."""

from __future__ import annotations

import asyncio
import os
import random
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from jobctl.daemon import wire_engine
from jobctl.domain.clock import FakeClock
from jobctl.domain.models import AttemptResult, Claim, Job, JobSpec
from jobctl.engine.execconfig import ExecutorConfig
from jobctl.engine.executor import Executor
from jobctl.engine.materializer import Materializer
from jobctl.engine.timer import Timer
from jobctl.metrics import Metrics
from jobctl.store.aio import AsyncStore
from jobctl.store.sqlite import SqliteStore
from tests.conftest import migrated


@dataclass
class Engine:
    store: SqliteStore
    astore: AsyncStore
    clock: FakeClock
    executor: Executor
    timer: Timer
    materializer: Materializer
    tmp: Path
    finished: list[tuple[Job | None, Claim, AttemptResult]] = field(default_factory=list)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def on_finish(self, job: Job | None, claim: Claim, result: AttemptResult) -> None:
        self.finished.append((job, claim, result))
        self._changed.set()

    def add(self, command: list[str] | str, **kw: Any) -> Job:
        argv = ["/bin/sh", "-c", command] if isinstance(command, str) else command
        fields: dict[str, Any] = {
            "command": tuple(argv),
            "run_at": self.clock.now(),
            "owner_uid": os.geteuid(),
            "cwd": str(self.tmp),
        }
        fields.update(kw)
        [ins] = self.store.insert([JobSpec(**fields)])
        self.timer.wake()
        return ins.job

    async def finishes(self, count: int, timeout: float = 20) -> list[AttemptResult]:
        """Wait until ``count`` attempts have finished in total; return their results."""
        async with asyncio.timeout(timeout):
            while len(self.finished) < count:
                self._changed.clear()
                await self._changed.wait()
        return [r for _, _, r in self.finished]

    async def started(self, job_id: int, timeout: float = 20) -> None:
        """Wait until the executor has a live process for the job and its pid is stored."""
        async with asyncio.timeout(timeout):
            while True:
                job = self.store.get(job_id)
                if job.attempts and job.attempts[-1].pid is not None:
                    return
                await asyncio.sleep(0.005)  # nothing to wait on but the store itself


def build_engine(
    tmp_path: Path, clock: FakeClock, metrics: Metrics | None = None, **config: Any
) -> Engine:
    """Store, timer, executor and materializer wired by the daemon's own
    :func:`jobctl.daemon.wire_engine` (nothing started); ``config``: ExecutorConfig
    fields to change."""
    store = SqliteStore(tmp_path / "engine.db", clock, random.Random(3))
    astore = AsyncStore(store, threads=8)
    holder: list[Engine] = []
    cfg = ExecutorConfig(concurrency=4, lease_ttl=30, kill_grace=0.5, log_dir=tmp_path / "logs")
    cfg = replace(cfg, **config)
    parts = wire_engine(
        astore,
        clock,
        cfg,
        # Unique per engine: a stop signals every process on the machine carrying the
        # attempt's markers (job id, generation, lease owner; engine/proctree.py), so a
        # shared owner let one test's cancel of job 1 kill another pytest's job 1.
        f"testhost:{os.getpid()}:{secrets.token_hex(4)}",
        metrics=metrics,
        on_finish=lambda j, c, r: holder[0].on_finish(j, c, r),
    )
    eng = Engine(store, astore, clock, parts.executor, parts.timer, parts.materializer, tmp_path)
    holder.append(eng)
    return eng


async def close_engine(eng: Engine) -> None:
    await eng.executor.shutdown(0)
    eng.astore.close()
    eng.store.close()


@pytest.fixture
async def engine(tmp_path: Path, clock: FakeClock, sqlite_template: Path) -> AsyncIterator[Engine]:
    migrated(sqlite_template, tmp_path / "engine.db")  # what build_engine opens
    eng = build_engine(tmp_path, clock)
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(eng.timer.run()), loop.create_task(eng.materializer.run())]
    yield eng
    eng.timer.stop()
    eng.materializer.stop()
    await asyncio.gather(*tasks)
    await close_engine(eng)


def later(clock: FakeClock, seconds: float) -> Any:
    return clock.now() + timedelta(seconds=seconds)
