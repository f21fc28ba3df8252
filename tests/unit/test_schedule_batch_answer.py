"""A batch's answer for a created schedule (``created_out``) embeds the template text the
store rendered (an ``orjson.Fragment``) instead of rendering the template again: it must
render to the same JSON as the general :func:`schedule_out` with ``created: true``."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest

from jobctl.api.pages import PageResponse
from jobctl.api.schedule_schemas import created_out, schedule_out
from jobctl.domain.clock import FakeClock
from jobctl.domain.http import HttpRequest
from jobctl.domain.models import Backoff, JobTemplate
from jobctl.domain.resources import Resources
from jobctl.domain.schedule import Policy, Schedule, ScheduleSpec, Timing
from jobctl.store.sqlite import SqliteStore

T0 = datetime(2027, 3, 13, 12, 0, 17, 250_000, tzinfo=UTC)

TEMPLATES = [
    JobTemplate(command=("true",)),
    JobTemplate(
        command=("sh", "-c", 'echo "é" $X'),
        queue="reports",
        priority=-3,
        max_attempts=7,
        timeout=12.5,
        backoff=Backoff(0.5, 90),
        env=(("A", "z"), ("X", "1")),
        cwd="/tmp",
        retry_on=(1, 75),
        no_retry_on=(3,),
        resources=Resources(nice=5, memory_max=1 << 20, cpu_quota=50.0),
        on_failure="logger failed",
    ),
    JobTemplate(command=(), http=HttpRequest("POST", "https://example.com/hook")),
    JobTemplate(command=(), queue="work", payload='{"n": 1, "s": "é"}'),
]

TIMINGS = [
    Timing("UTC", cron="*/5 * * * *"),
    Timing("Asia/Tokyo", cron="H 6 * * 1-5"),  # H: seeded from the new id
    Timing("UTC", every=90.0, anchor=datetime(2027, 1, 1, tzinfo=UTC)),
]


@pytest.mark.parametrize("template", TEMPLATES)
def test_created_answer_renders_as_schedule_out(template: JobTemplate, tmp_path: object) -> None:
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    store = SqliteStore(tmp_path / "s.db", FakeClock(T0))
    try:
        specs = [ScheduleSpec(t, Policy(), template, 1000, None) for t in TIMINGS]
        answers = store.create_schedules(specs)
        assert all(isinstance(a, Schedule) for a in answers)
        made = [a for a in answers if isinstance(a, Schedule)]
        fast = PageResponse([created_out(s) for s in made]).body
        general = [schedule_out(s) | {"created": True} for s in made]
        assert orjson.loads(fast) == general
        # and what a read gives back, the job included
        read = [schedule_out(store.get_schedule(s.id)) | {"created": True} for s in made]
        assert orjson.loads(fast) == read
    finally:
        store.close()
