"""Start-up recovery: survivors of a dead daemon are stopped before their job runs again."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from jobctl.domain.states import JobStatus, Outcome
from jobctl.engine.process import process_start_time
from jobctl.engine.recovery import recover
from tests.engine.conftest import Engine

DEAD = "testhost:999:dead00"


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait()


def _claim_as_dead_daemon(engine: Engine) -> tuple[int, int]:
    engine.timer.stop()
    job = engine.add("sleep 30", max_attempts=3)
    [c] = engine.store.claim_due(DEAD, 1, 30)
    return job.id, c.generation


def _spawn(procs: list[subprocess.Popen[bytes]], env: dict[str, str]) -> subprocess.Popen[bytes]:
    p = subprocess.Popen(
        ["sleep", "30"], env={"PATH": os.environ["PATH"], **env}, start_new_session=True
    )
    procs.append(p)
    return p


async def test_unrecorded_survivor_is_found_by_environment_and_stopped(
    engine: Engine, procs: list[subprocess.Popen[bytes]]
) -> None:
    job_id, gen = _claim_as_dead_daemon(engine)
    survivor = _spawn(procs, {"JOBCTL_JOB_ID": str(job_id), "JOBCTL_LEASE_OWNER": DEAD})
    assert await recover(engine.astore, engine.executor.owner, grace=2) == 1
    assert survivor.wait(timeout=5) == -15  # SIGTERM
    job = engine.store.get(job_id)
    assert job.status is JobStatus.SCHEDULED and job.generation == gen
    assert job.attempts[0].outcome is Outcome.LEASE_EXPIRED
    assert "died while the job ran" in (job.attempts[0].error or "")


async def test_recorded_pid_is_stopped_but_a_recycled_pid_is_not(
    engine: Engine, procs: list[subprocess.Popen[bytes]]
) -> None:
    job_id, gen = _claim_as_dead_daemon(engine)
    innocent = _spawn(procs, {})
    start = process_start_time(innocent.pid)
    assert start is not None
    engine.store.record_process(job_id, gen, innocent.pid, start + 1, "/nowhere")
    assert await recover(engine.astore, engine.executor.owner, grace=2) == 1
    assert innocent.poll() is None  # other start time: not the job's process

    job2, gen2 = _claim_as_dead_daemon(engine)
    real = _spawn(procs, {})
    engine.store.record_process(job2, gen2, real.pid, process_start_time(real.pid), "/x")
    assert await recover(engine.astore, engine.executor.owner, grace=2) == 1
    assert real.wait(timeout=5) == -15


async def test_other_hosts_leases_are_left_to_expire(engine: Engine) -> None:
    engine.timer.stop()
    job = engine.add("true")
    engine.store.claim_due("otherhost:5:abc", 1, 30)
    assert await recover(engine.astore, engine.executor.owner, grace=1) == 0
    assert engine.store.get(job.id).status is JobStatus.RUNNING
