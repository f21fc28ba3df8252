"""The reaper prunes by age with the injected clock and removes the attempt logs."""

from __future__ import annotations

from pathlib import Path

from jobctl.domain.retention import DEFAULT_RETENTION
from jobctl.engine.reaper import Reaper
from tests.engine.conftest import Engine


async def test_old_finished_jobs_and_their_logs_go(engine: Engine) -> None:
    old = engine.add("echo old")
    await engine.finishes(1)
    log_path = engine.store.get(old.id).attempts[0].log_path
    assert log_path and Path(log_path).exists()
    engine.clock.advance(days=6)
    young = engine.add("echo young")
    await engine.finishes(2)
    reaper = Reaper(engine.astore, engine.clock, DEFAULT_RETENTION)
    assert await reaper.prune_now() == 0
    engine.clock.advance(days=1, seconds=1)
    assert await reaper.prune_now() == 1
    assert [j.id for j in engine.store.list_jobs(None, None, 10, None)] == [young.id]
    assert not Path(log_path).exists()
