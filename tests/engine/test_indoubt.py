"""Writes whose commit landed although the daemon was told they failed (the database went
away while they committed).

A claim (engine/indoubt.py): its jobs are leased to this daemon, which never reclaims its
own leases; without the timer's check they stayed ``running`` until a restart (a CI run
found acknowledged jobs unrun a whole lease after a server crash). A finish
(engine/reporter.py): its resend is refused by the fence, and was taken for a lost lease."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import AttemptResult, Claim, Finished, ProcessRecord
from jobctl.domain.states import JobStatus, Outcome, StopReason
from jobctl.errors import StoreUnavailable
from jobctl.metrics import Metrics
from tests.conftest import migrated
from tests.engine.conftest import Engine, build_engine, close_engine

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def eng(tmp_path: Path, clock: FakeClock, sqlite_template: Path) -> AsyncIterator[Engine]:
    migrated(sqlite_template, tmp_path / "engine.db")
    e = build_engine(tmp_path, clock, Metrics())
    e.timer.retry_delay = 0.01  # the failed tick's pause: real time, kept short here
    task = asyncio.get_running_loop().create_task(e.timer.run())
    yield e
    e.timer.stop()
    await task
    await close_engine(e)


def lose_next_answer(eng: Engine) -> list[list[Claim]]:
    """Make the next claim commit and then fail as a connection lost after ``COMMIT``
    does; returns the list the lost claims are put in."""
    real = eng.astore.claim_due
    lost: list[list[Claim]] = []

    async def claim_due(owner: str, limit: int, lease_ttl: float) -> list[Claim]:
        claims = await real(owner, limit, lease_ttl)
        if not lost and claims:
            lost.append(claims)
            raise StoreUnavailable("the database is unavailable: server closed the connection")
        return claims

    eng.astore.claim_due = claim_due  # type: ignore[method-assign]
    return lost


async def until(cond: Callable[[], bool], timeout: float = 20) -> None:
    async with asyncio.timeout(timeout):
        while not cond():
            await asyncio.sleep(0.005)  # the engine's own tasks move it


async def test_a_claim_committed_but_answered_as_failed_is_given_back_and_runs_once(
    eng: Engine,
) -> None:
    lost = lose_next_answer(eng)
    job = eng.add(f"echo x >> {eng.tmp / 'ran'}")
    await until(lambda: bool(lost))
    [result] = await eng.finishes(1)  # the next tick gives it back, unstarted
    assert result.transient and "in doubt" in (result.error or "")
    back = eng.store.get(job.id)
    assert back.status is JobStatus.SCHEDULED and back.failures == 0  # no attempt used
    assert not (eng.tmp / "ran").exists()
    eng.clock.set(back.run_at)  # its retry is due (transient backoff)
    eng.timer.wake()
    results = await eng.finishes(2)
    assert results[1].outcome is Outcome.SUCCEEDED
    assert (eng.tmp / "ran").read_text() == "x\n"  # once
    assert eng.store.get(job.id).status is JobStatus.SUCCEEDED


async def test_the_jobs_the_executor_holds_are_never_given_back(eng: Engine) -> None:
    """A command running here and a result not yet landed are this daemon's own: only
    the leases it does not know are given back."""
    long = eng.add("sleep 30")
    await eng.started(long.id)
    gen = eng.store.get(long.id).generation
    lost = lose_next_answer(eng)
    other = eng.add("true")
    await until(lambda: bool(lost))
    [result] = await eng.finishes(1)
    assert eng.finished[0][1].job.id == other.id and result.transient
    job = eng.store.get(long.id)
    assert job.status is JobStatus.RUNNING and job.generation == gen
    assert (long.id, gen) in eng.executor.held()
    assert eng.executor.stop(long.id, StopReason.CANCEL)


async def test_a_finish_committed_but_answered_as_failed_is_known_on_its_resend(
    eng: Engine,
) -> None:
    """The resend of a finish whose first send landed is refused by the fence; the
    reporter finds its own result stored and reports the job, not a lost lease (the
    failure notifier and the metrics get the job as with any finish)."""
    real = eng.astore.finish
    lost: list[int] = []

    async def finish(
        job_id: int, generation: int, result: AttemptResult, record: ProcessRecord | None = None
    ) -> Finished:
        done = await real(job_id, generation, result, record)
        if not lost:
            lost.append(job_id)
            raise StoreUnavailable("the database is unavailable: server closed the connection")
        return done

    eng.astore.finish = finish  # type: ignore[method-assign]
    job = eng.add("exit 3", max_attempts=1)
    await until(lambda: bool(lost))
    async with asyncio.timeout(20):
        while not eng.finished:  # the resend waits its backoff on the injected clock
            eng.clock.advance(1)
            await asyncio.sleep(0.01)
    [(reported, claim, result)] = eng.finished
    assert reported is not None and reported.status is JobStatus.DEAD
    assert result.exit_code == 3 and claim.job.id == job.id
    fenced = eng.executor._metrics.fencing_rejections.labels("finish")
    assert fenced._value.get() == 0  # not counted as a lost lease
