"""A claim whose commit landed although the daemon was told it failed (engine/indoubt.py):
the database went away while it committed. Its jobs are leased to this daemon, which
never reclaims its own leases: without the timer's check they stayed ``running`` until a
restart (a CI run found acknowledged jobs unrun a whole lease after a server crash)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import Claim
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
