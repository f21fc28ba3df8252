"""The builders that skip a frozen dataclass's ``__init__`` (jobctl.domain.slotted) give
exactly what ``__init__`` gives: type, every field, equality, hash, and still frozen."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from jobctl.domain.models import Backoff, JobSpec, stored_spec
from jobctl.domain.records import Job
from jobctl.domain.slotted import compile_builder
from jobctl.domain.states import JobStatus
from jobctl.store.inserts import NewJob, created_job


def _spec() -> JobSpec:
    return JobSpec(
        ("echo", "a\tb\\c"),
        datetime(2030, 1, 1, 0, 0, 0, 123456, tzinfo=UTC),  # not whole ms: cut
        1000,
        queue="q",
        priority=3,
        backoff=Backoff(2.0, 60.0),
        env=(("A", "1"),),
        scheduled_for=datetime(2030, 1, 1, 0, 0, 0, 999999, tzinfo=UTC),
        schedule_id="s1",
    )


def test_created_job_is_what_job_init_gives() -> None:
    spec = _spec()
    created_at = datetime(2026, 12, 1, 12, 0, 0, 5000, tzinfo=UTC)
    got = created_job(spec, NewJob(42, True, "job-k", False), created_at)
    run_at = datetime(2030, 1, 1, 0, 0, 0, 123000, tzinfo=UTC)
    want = Job(
        id=42,
        key="job-k",
        spec=dataclasses.replace(
            spec,
            run_at=run_at,
            key="job-k",
            scheduled_for=datetime(2030, 1, 1, 0, 0, 1, tzinfo=UTC),  # rounded
        ),
        status=JobStatus.SCHEDULED,
        run_at=run_at,
        created_at=created_at,
        attempt=0,
        failures=0,
        generation=0,
        lease_owner=None,
        lease_until=None,
        finished_at=None,
        last_error=None,
        dead_reason=None,
    )
    assert type(got) is Job and type(got.spec) is JobSpec
    assert got == want and hash(got.spec) == hash(want.spec)
    for f in dataclasses.fields(Job):  # every slot set (an unset one raises here)
        assert getattr(got, f.name) == getattr(want, f.name), f.name
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.id = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.spec.key = "x"  # type: ignore[misc]


def test_stored_spec_is_still_frozen_and_equal() -> None:
    spec = _spec()
    got = stored_spec(spec, spec.run_at, "k", None)
    assert type(got) is JobSpec and got == dataclasses.replace(spec, key="k", scheduled_for=None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.queue = "x"  # type: ignore[misc]


def test_compile_builder_refuses_a_missing_or_unknown_field() -> None:
    every = {f.name: "None" for f in dataclasses.fields(Job)}
    with pytest.raises(TypeError):
        compile_builder(Job, "f", "", {k: v for k, v in every.items() if k != "notified"})
    with pytest.raises(TypeError):
        compile_builder(Job, "f", "", every | {"nope": "None"})

    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        a: int

    with pytest.raises(TypeError):
        compile_builder(NoSlots, "f", "", {"a": "1"})


def test_created_answers_the_created_job_as_inserted() -> None:
    from jobctl.store.base import Inserted
    from jobctl.store.inserts import created

    spec, at = _spec(), datetime(2026, 12, 1, tzinfo=UTC)
    new = NewJob(7, True, "k", True)
    got = created(spec, new, at)
    assert type(got) is Inserted and got == Inserted(created_job(spec, new, at), True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.created = False  # type: ignore[misc]


def test_row_tail_times_are_to_ms_whatever_the_memo_saw() -> None:
    """The memo of a batch's times answers per instant: an equal time in another zone
    is the same ms; a different microsecond is not shared."""
    from datetime import timedelta, timezone

    from jobctl.store.jobrow import DUE, TAIL_COLUMNS, TextMemo, row_tail
    from jobctl.store.rows import to_ms

    run = TAIL_COLUMNS.index("run_at")
    memo = TextMemo()
    base = _spec()
    for when in (
        base.run_at,
        base.run_at.astimezone(timezone(timedelta(hours=5))),
        base.run_at + timedelta(microseconds=600),
    ):
        spec = dataclasses.replace(base, run_at=when)
        tail = row_tail(spec, 0, memo)
        assert tail[run] == to_ms(when) and tail == row_tail(spec, 0) and tail[DUE] == 0
