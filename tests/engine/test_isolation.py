"""Engines built by the test harness must not reach each other's commands.

A stop signals every process on the machine whose environment carries the attempt's
markers (job id, generation, lease owner: engine/proctree.py). Every store numbers its
jobs from 1, so engines that share a lease owner (as the harness's all did) share the
markers of their first jobs: a cancel in one test killed a command of another test
running at the same time (another pytest on the machine), which then ended "killed by
signal 15" instead of as that test expected.
"""

from __future__ import annotations

from pathlib import Path

from jobctl.domain.clock import FakeClock
from jobctl.domain.states import Outcome, StopReason
from tests.engine.conftest import Engine, build_engine, close_engine


async def test_a_stop_in_one_engine_leaves_the_same_job_of_another_alone(
    tmp_path: Path, clock: FakeClock
) -> None:
    go = tmp_path / "go"
    engines: list[Engine] = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        engines.append(build_engine(tmp_path / name, clock))
    a, b = engines
    try:
        # a's command ends 0 once ``go`` exists; a SIGTERM queued before that kills it.
        ja = a.add(f"while [ ! -e {go} ]; do sleep 0.01; done")
        jb = b.add("sleep 30")
        assert ja.id == jb.id
        for eng, job in ((a, ja), (b, jb)):
            await eng.timer.run_once()
            await eng.started(job.id)
        assert a.store.get(ja.id).generation == b.store.get(jb.id).generation
        assert b.executor.stop(jb.id, StopReason.CANCEL, "test over")
        [stopped] = await b.finishes(1)  # its signals were all sent before this
        assert stopped.outcome is Outcome.CANCELLED
        go.touch()
        [result] = await a.finishes(1)
        assert (result.outcome, result.exit_code) == (Outcome.SUCCEEDED, 0)
    finally:
        for eng in engines:
            await close_engine(eng)
