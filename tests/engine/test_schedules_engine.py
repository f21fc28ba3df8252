"""Schedules through the whole engine: materializer, timer, executor, fake clock."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

from jobctl.domain.models import JobTemplate
from jobctl.domain.schedule import Overlap, Policy, ScheduleSpec, Timing
from jobctl.domain.states import Outcome
from tests.engine.conftest import Engine


def _spec(engine: Engine, command: str, timing: Timing, **policy: object) -> ScheduleSpec:
    template = JobTemplate(("/bin/sh", "-c", command), cwd=str(engine.tmp), max_attempts=1)
    return ScheduleSpec(timing, Policy(**policy), template, os.geteuid())  # type: ignore[arg-type]


async def test_occurrences_run_with_schedule_identity(engine: Engine) -> None:
    s = engine.store.create_schedule(
        _spec(
            engine,
            'echo "$JOBCTL_SCHEDULE_ID $JOBCTL_SCHEDULED_FOR $JOBCTL_JOB_KEY"',
            Timing("Asia/Tokyo", cron="0 6 * * *"),
        )
    )
    engine.materializer.wake()
    first = datetime(2027, 3, 1, 21, tzinfo=UTC)  # 06:00 JST on March 2
    assert s.next_run_at == first
    for day in range(2):
        engine.clock.set(first + timedelta(days=day))
        [result] = (await engine.finishes(day + 1))[day:]
        nominal = f"{first + timedelta(days=day):%Y-%m-%dT%H:%M:%SZ}"
        assert result.output_tail == f"{s.id} {nominal} {s.id}@{nominal}\n"


async def test_queued_occurrence_waits_for_the_running_one(engine: Engine) -> None:
    gate = engine.tmp / "gate"
    s = engine.store.create_schedule(
        _spec(
            engine,
            f'while [ ! -e {gate} ]; do sleep 0.01; done; echo "$JOBCTL_SCHEDULED_FOR"',
            Timing("UTC", cron="*/5 * * * *"),
            overlap=Overlap.QUEUE,
        )
    )
    engine.materializer.wake()
    engine.clock.set(s.next_run_at)
    first = await _running_job(engine, s.id)
    engine.clock.advance(300)  # the next occurrence comes due while the first still runs
    await engine.materializer.run_once()
    assert engine.store.get_schedule(s.id).waiting == engine.clock.now()
    gate.touch()
    results = await engine.finishes(2)
    assert [r.outcome for r in results] == [Outcome.SUCCEEDED] * 2
    jobs, _ = engine.store.schedule_history(s.id, 10)
    assert [j.spec.scheduled_for for j in jobs] == [
        s.next_run_at + timedelta(minutes=5),
        s.next_run_at,
    ]
    assert jobs[1].id == first


async def _running_job(engine: Engine, schedule_id: str) -> int:
    while True:
        jobs, _ = engine.store.schedule_history(schedule_id, 1)
        if jobs:
            await engine.started(jobs[0].id)
            return jobs[0].id
        await engine.materializer.run_once()
