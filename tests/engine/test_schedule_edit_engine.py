"""An edited schedule through the whole engine (materializer, timer, executor, fake
clock): every minute, edited to every 5 minutes, fires exactly at the new times, each
occurrence once (issue 12, "Editing a schedule")."""

from __future__ import annotations

import dataclasses
import os
from datetime import timedelta

from jobctl.domain.models import JobTemplate
from jobctl.domain.schedule import Misfire, Overlap, Policy, ScheduleSpec, Timing
from tests.engine.conftest import Engine


async def test_every_minute_edited_to_every_five_fires_at_the_new_times(engine: Engine) -> None:
    template = JobTemplate(
        ("/bin/sh", "-c", 'echo "$JOBCTL_SCHEDULED_FOR"'), cwd=str(engine.tmp), max_attempts=1
    )
    policy = Policy(Misfire.ALL, 100, Overlap.ALLOW)
    spec = ScheduleSpec(Timing("UTC", cron="* * * * *"), policy, template, os.geteuid())
    s = engine.store.create_schedule(spec)
    engine.materializer.wake()
    start = s.next_run_at  # 12:01
    for minute in range(3):  # 12:01, 12:02, 12:03 under the old timing
        engine.clock.set(start + timedelta(minutes=minute))
        await engine.finishes(minute + 1)
    engine.clock.set(start + timedelta(minutes=2, seconds=30))
    edited, edit = engine.store.edit_schedule(
        s.id, dataclasses.replace(spec, timing=Timing("UTC", cron="*/5 * * * *")), spec, 0
    )
    engine.materializer.wake()
    assert edited.next_run_at == start + timedelta(minutes=4)  # 12:05
    assert edit.next_before == start + timedelta(minutes=3)
    for minute in range(3, 15):  # 12:04 .. 12:15, minute by minute
        engine.clock.set(start + timedelta(minutes=minute))
        await engine.materializer.run_once()
    results = await engine.finishes(6)  # 12:01, 12:02, 12:03, then 12:05, 12:10, 12:15
    ran = sorted(r.output_tail.strip() for r in results)
    assert ran == [f"2027-03-01T12:{m:02d}:00Z" for m in (1, 2, 3, 5, 10, 15)]
    jobs, _ = engine.store.schedule_history(s.id, 100)
    keys = [j.key for j in jobs]
    assert len(keys) == len(set(keys)) == 6
