"""Jobs claimed ahead of free slots (``claim_ahead``, engine/ahead.py; issue 17): they
wait in the executor's ready queue under a live lease, start the moment a slot frees, and
never start once cancelled, their lease lost or the daemon stopping."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import AttemptResult
from jobctl.domain.states import JobStatus, Outcome, StopReason
from jobctl.errors import StoreUnavailable
from jobctl.metrics import Metrics
from tests.conftest import migrated
from tests.engine.conftest import Engine, build_engine, close_engine, later

pytestmark = pytest.mark.asyncio
SLOTS, AHEAD = 2, 2


@pytest.fixture
async def eng(tmp_path: Path, clock: FakeClock, sqlite_template: Path) -> AsyncIterator[Engine]:
    migrated(sqlite_template, tmp_path / "engine.db")
    e = build_engine(tmp_path, clock, Metrics(), concurrency=SLOTS, claim_ahead=AHEAD)
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(e.timer.run()), loop.create_task(e.materializer.run())]
    yield e
    e.timer.stop()
    e.materializer.stop()
    await asyncio.gather(*tasks)
    await close_engine(e)


async def until(cond: Callable[[], bool], timeout: float = 20) -> None:
    async with asyncio.timeout(timeout):
        while not cond():
            await asyncio.sleep(0.005)  # the engine's own tasks move it: nothing to await


async def full(eng: Engine) -> list[int]:
    """A quick job first (the room ahead is sized from how long slots were held: none
    before one was given back), then every slot held by a long command."""
    eng.add("true")
    await eng.finishes(1)
    ids = [eng.add("sleep 30").id for _ in range(SLOTS)]
    for job_id in ids:
        await eng.started(job_id)
    return ids


async def claimed_ahead_gauge(eng: Engine) -> float:
    """``jobctl_executor_claimed_ahead`` as a scrape of the engine's metrics reads it."""
    metrics = eng.executor._metrics
    text = (await metrics.scrape(eng.astore)).decode()
    for family in text_string_to_metric_families(text):
        if family.name == "jobctl_executor_claimed_ahead":
            return float(family.samples[0].value)
    raise AssertionError("jobctl_executor_claimed_ahead is not exported")


def marker(eng: Engine, name: str) -> str:
    return f"touch {eng.tmp / name}"


async def test_claimed_ahead_jobs_wait_for_a_slot_and_start_when_one_frees(eng: Engine) -> None:
    busy = await full(eng)
    ahead = [eng.add(marker(eng, f"ran{i}")).id for i in range(AHEAD + 1)]
    await until(lambda: eng.executor.waiting == AHEAD)
    assert await claimed_ahead_gauge(eng) == AHEAD  # operators see them
    statuses = [eng.store.get(i).status for i in ahead]
    assert statuses == [JobStatus.RUNNING] * AHEAD + [JobStatus.SCHEDULED]  # one left queued
    assert len(eng.executor._live) == SLOTS  # concurrency still bounds the commands
    assert not any((eng.tmp / f"ran{i}").exists() for i in range(AHEAD + 1))
    eng.store.cancel(busy[0], "make room")
    assert eng.executor.stop(busy[0], StopReason.CANCEL)
    results = await eng.finishes(1 + 1 + AHEAD + 1)  # the quick one, the cancel, the rest
    assert [r.outcome for r in results].count(Outcome.SUCCEEDED) == 1 + AHEAD + 1
    assert all((eng.tmp / f"ran{i}").exists() for i in range(AHEAD + 1))
    assert eng.executor.waiting == 0
    assert await claimed_ahead_gauge(eng) == 0
    eng.executor.stop(busy[1], StopReason.CANCEL, "done with test")


async def test_a_cancelled_job_claimed_ahead_never_starts(eng: Engine) -> None:
    busy = await full(eng)
    job = eng.add(marker(eng, "ran"))
    await until(lambda: eng.executor.waiting == 1)
    assert eng.store.cancel(job.id, "cancelled by user").was_running  # claimed: running
    assert eng.executor.stop(job.id, StopReason.CANCEL)
    assert eng.executor.waiting == 0
    for job_id in busy:  # slots free: nothing of the cancelled job may take one
        eng.executor.stop(job_id, StopReason.CANCEL, "done with test")
    await eng.finishes(1 + SLOTS)
    await until(lambda: eng.executor.running_count == 0)
    got = eng.store.get(job.id)
    assert got.status is JobStatus.CANCELLED and got.attempts[0].pid is None
    assert not (eng.tmp / "ran").exists()


async def test_a_job_claimed_ahead_keeps_its_lease_by_heartbeat(eng: Engine) -> None:
    busy = await full(eng)
    job = eng.add("true")
    await until(lambda: eng.executor.waiting == 1)
    for _ in range(4):  # 80 fake seconds, far past the 30 s lease
        eng.clock.advance(20)
        await eng.executor.heartbeat_once()
    assert eng.store.reclaim_expired(10) == []
    got = eng.store.get(job.id)
    assert got.status is JobStatus.RUNNING and got.lease_until == later(eng.clock, 30)
    for job_id in busy:
        eng.executor.stop(job_id, StopReason.CANCEL, "done with test")
    await eng.finishes(1 + SLOTS + 1)


async def test_a_job_claimed_ahead_whose_lease_was_lost_is_dropped(eng: Engine) -> None:
    busy = await full(eng)
    job = eng.add(marker(eng, "ran"), max_attempts=1)
    await until(lambda: eng.executor.waiting == 1)
    gen = eng.store.get(job.id).generation
    eng.store.reclaim(job.id, gen, "reclaimed elsewhere")  # another daemon took it over
    await eng.executor.heartbeat_once()
    assert eng.executor.waiting == 0
    for job_id in busy:
        eng.executor.stop(job_id, StopReason.CANCEL, "done with test")
    await eng.finishes(1 + SLOTS)
    await until(lambda: eng.executor.running_count == 0)
    assert eng.store.get(job.id).status is JobStatus.DEAD  # its one attempt: the reclaim's
    assert not (eng.tmp / "ran").exists()


async def test_shutdown_gives_back_jobs_claimed_ahead_without_using_an_attempt(
    eng: Engine,
) -> None:
    await full(eng)
    ahead = [eng.add(marker(eng, f"ran{i}"), max_attempts=1).id for i in range(AHEAD)]
    await until(lambda: eng.executor.waiting == AHEAD)
    eng.timer.stop()
    await eng.executor.shutdown(grace=0.05)
    results = await eng.finishes(1 + SLOTS + AHEAD)
    given = [r for _, c, r in eng.finished if c.job.id in ahead]
    assert [r.transient for r in given] == [True] * AHEAD
    assert all("cannot start for now" in (r.error or "") for r in given)
    assert [r.outcome for r in results].count(Outcome.INTERRUPTED) == SLOTS
    for job_id in ahead:
        got = eng.store.get(job_id)
        assert (got.status, got.failures) == (JobStatus.SCHEDULED, 0)  # budget untouched
        assert got.attempts[0].pid is None
    assert not any((eng.tmp / f"ran{i}").exists() for i in range(AHEAD))


async def test_pausing_a_queue_gives_back_its_jobs_claimed_ahead(eng: Engine) -> None:
    """The daemon's pause hook (api/queues.py): the paused queue's waiting jobs go back
    unstarted and without using an attempt; the other queues' wait on."""
    busy = await full(eng)
    mail = eng.add(marker(eng, "mail"), queue="mail", max_attempts=1)
    other = eng.add(marker(eng, "other"))
    await until(lambda: eng.executor.waiting == 2)
    eng.executor.give_back("mail")
    assert eng.executor.waiting == 1
    [result] = await _results_of(eng, mail.id)
    assert result.transient and "queue 'mail' was paused" in (result.error or "")
    got = eng.store.get(mail.id)
    assert (got.status, got.failures) == (JobStatus.SCHEDULED, 0)
    assert eng.store.get(other.id).status is JobStatus.RUNNING
    for job_id in busy:
        eng.executor.stop(job_id, StopReason.CANCEL, "done with test")
    await until(lambda: (eng.tmp / "other").exists())
    assert not (eng.tmp / "mail").exists()


async def _results_of(eng: Engine, job_id: int) -> list[AttemptResult]:
    await until(lambda: any(c.job.id == job_id for _, c, _ in eng.finished))
    return [r for _, c, r in eng.finished if c.job.id == job_id]


async def test_nothing_is_claimed_ahead_of_long_commands(eng: Engine) -> None:
    """Slots held long (here 60 s of the fake clock) leave no room ahead: a job due then
    waits in the store, free for any daemon, not here behind commands that run on."""
    busy = [eng.add("sleep 30").id for _ in range(SLOTS)]
    for job_id in busy:
        await eng.started(job_id)
    eng.clock.advance(60)
    eng.executor.stop(busy[0], StopReason.CANCEL, "done with test")
    await eng.finishes(1)
    long = eng.add("sleep 30")
    await eng.started(long.id)  # took the freed slot
    job = eng.add("true")
    await until(lambda: eng.timer.ticks > 0 and eng.executor.free_slots == 0)
    assert eng.executor.waiting == 0
    assert eng.store.get(job.id).status is JobStatus.SCHEDULED
    for job_id in (busy[1], long.id):
        eng.executor.stop(job_id, StopReason.CANCEL, "done with test")
    await eng.finishes(4)


async def test_a_job_claimed_ahead_whose_lease_was_given_up_goes_back_once_the_store_is(
    tmp_path: Path, clock: FakeClock, sqlite_template: Path
) -> None:
    """The store unreachable until the lease watch gives the leases up (engine/leasewatch.py):
    a job waiting here never started, and is still leased to this daemon in the store,
    which never reclaims its own leases; it is given back (no attempt used) once the store
    writes again, not left ``running``."""
    migrated(sqlite_template, tmp_path / "engine.db")
    eng = build_engine(
        tmp_path, clock, Metrics(), concurrency=SLOTS, claim_ahead=AHEAD, give_up_leases=True
    )
    task = asyncio.get_running_loop().create_task(eng.timer.run())
    try:
        await full(eng)
        job = eng.add(marker(eng, "ran"), max_attempts=1)
        await until(lambda: eng.executor.waiting == 1)
        # the timer stopped first: the job given back is due, and would be claimed again
        # at once (between the give-back landing and any later stop: CI saw it running)
        eng.timer.stop()
        await task
        real = eng.store.heartbeat

        def unreachable(leases: Sequence[tuple[int, int]], lease_ttl: float) -> list[int]:
            raise StoreUnavailable("the database is unavailable: connection refused")

        eng.store.heartbeat = unreachable  # type: ignore[method-assign]
        for _ in range(6):  # past two thirds of the 30 s lease without a renewal
            eng.clock.advance(5)
            await eng.executor.heartbeat_once()
        await until(lambda: eng.executor.waiting == 0)
        eng.store.heartbeat = real  # type: ignore[method-assign]
        [result] = await _results_of(eng, job.id)
        assert result.transient and "could not renew its lease" in (result.error or "")
        got = eng.store.get(job.id)
        assert (got.status, got.failures) == (JobStatus.SCHEDULED, 0)
        assert got.attempts[0].pid is None and not (eng.tmp / "ran").exists()
    finally:
        eng.timer.stop()
        await task
        await close_engine(eng)
