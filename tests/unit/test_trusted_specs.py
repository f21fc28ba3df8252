"""The unchecked builders of the hot paths give what the checked ones give."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta, timezone

import pytest

from jobctl.api.schedule_schemas import ScheduleIn
from jobctl.domain.clock import iso
from jobctl.domain.http import HttpRequest
from jobctl.domain.limits import MAX_PAYLOAD_BYTES
from jobctl.domain.models import (
    Attempt,
    AttemptResult,
    Backoff,
    Claim,
    Finished,
    Job,
    JobSpec,
    JobTemplate,
    check_payload,
    stored_spec,
    trusted_spec,
)
from jobctl.domain.retry import DEFAULT_RETRY
from jobctl.domain.schedule import Timing
from jobctl.domain.states import JobStatus, Outcome
from jobctl.engine import results
from jobctl.errors import InvalidInput, InvalidSchedule
from jobctl.store.rows import ms_to_dt, to_ms, whole_ms

TOKYO = timezone(timedelta(hours=9))


def full_spec() -> JobSpec:
    return JobSpec(
        command=("sh", "-c", "echo é"),
        run_at=datetime(2027, 3, 14, 6, 0, 0, 123_456, tzinfo=UTC),
        owner_uid=1000,
        key="asked",
        queue="reports",
        priority=7,
        max_attempts=5,
        timeout=1.5,
        backoff=Backoff(2.0, 60.0),
        env=(("A", "1"), ("B", "2")),
        cwd="/srv",
        schedule_id="s-1",
        scheduled_for=datetime(2027, 3, 14, 6, tzinfo=UTC),
        retry_on=(1, 2),
        no_retry_on=(3,),
    )


def test_stored_spec_equals_replace() -> None:
    spec = full_spec()
    at = whole_ms(spec.run_at)
    for_ = datetime(2027, 3, 14, 5, tzinfo=UTC)
    got = stored_spec(spec, at, "job-x", for_)
    assert got == dataclasses.replace(spec, run_at=at, key="job-x", scheduled_for=for_)
    assert got.fingerprint() == dataclasses.replace(spec, key="job-x").fingerprint()


def test_trusted_spec_needs_every_field() -> None:
    fields = {f.name: getattr(full_spec(), f.name) for f in dataclasses.fields(JobSpec)}
    assert trusted_spec(**fields) == full_spec()
    del fields["cwd"]
    with pytest.raises(TypeError):
        trusted_spec(**fields)


@pytest.mark.parametrize(
    "dt",
    [
        datetime(2027, 3, 14, 6, 0, 0, 123_000, tzinfo=UTC),  # already whole ms, UTC
        datetime(2027, 3, 14, 6, 0, 0, 123_456, tzinfo=UTC),  # sub-ms part
        datetime(2027, 3, 14, 15, 0, 0, 123_000, tzinfo=TOKYO),  # whole ms, other zone
        datetime(2027, 3, 14, 15, 0, 0, 999_999, tzinfo=TOKYO),  # rounds up a second
    ],
)
def test_whole_ms_is_the_store_round_trip(dt: datetime) -> None:
    got = whole_ms(dt)
    expected = ms_to_dt(to_ms(dt))
    assert got == expected and got.tzinfo is UTC and got.microsecond % 1000 == 0


def test_whole_ms_keeps_a_utc_whole_ms_time_as_is() -> None:
    dt = datetime(2027, 3, 14, 6, 0, 0, 123_000, tzinfo=UTC)
    assert whole_ms(dt) is dt


def test_iso_renders_an_instant_once_whatever_its_zone() -> None:
    utc_dt = datetime(2027, 3, 14, 6, 0, 0, 123_456, tzinfo=UTC)
    tokyo = utc_dt.astimezone(TOKYO)
    assert iso(utc_dt) == iso(tokyo) == "2027-03-14T06:00:00.123Z"
    assert iso(None) is None
    with pytest.raises(ValueError):
        iso(datetime(2027, 3, 14, 6))  # naive: refused, and not cached as an answer
    with pytest.raises(ValueError):
        iso(datetime(2027, 3, 14, 6))


def test_check_payload_counts_utf8_bytes_at_the_limit() -> None:
    check_payload(("a" * (MAX_PAYLOAD_BYTES - 2),), (("K", "v"),))  # exactly the limit
    with pytest.raises(InvalidInput):
        check_payload(("a" * (MAX_PAYLOAD_BYTES - 1),), (("K", "v"),))
    half = MAX_PAYLOAD_BYTES // 2
    check_payload(("é" * half,), ())  # 2 bytes each: exactly the limit
    with pytest.raises(InvalidInput):
        check_payload(("é" * half, "x"), ())
    check_payload(("x",) * 1000, ())  # short: no encoding needed to know


def _spec_refusal(template: JobTemplate) -> str | None:
    """What building a job of ``template`` says (the checks the template check stands for)."""
    try:
        template.to_spec(datetime(2000, 1, 1, tzinfo=UTC), None, 1000, "", None)
    except InvalidInput as exc:
        return exc.message
    return None


def _check_refusal(template: JobTemplate) -> str | None:
    try:
        template.check(1000)
    except InvalidInput as exc:
        return exc.message
    return None


BAD_TEMPLATES = [
    JobTemplate(command=()),
    JobTemplate(command=("",)),
    JobTemplate(command=("a\x00b",)),
    JobTemplate(command=("true",), max_attempts=0),
    JobTemplate(command=("true",), priority=10_000),
    JobTemplate(command=("true",), timeout=0.0),
    JobTemplate(command=("true",), queue=""),
    JobTemplate(command=("true",), cwd="relative"),
    JobTemplate(command=("true",), env=(("JOBCTL_X", "1"),)),
    JobTemplate(command=("true",), env=(("A", "a\x00"),)),
    JobTemplate(command=("a" * (MAX_PAYLOAD_BYTES + 1),)),
    JobTemplate(command=("true",), on_failure=""),
    JobTemplate(command=("true",), http=HttpRequest("GET", "https://example.com/")),
    JobTemplate(command=(), http=HttpRequest("GET", "https://example.com/"), retry_on=(1,)),
    JobTemplate(command=(), http=HttpRequest("GET", "https://example.com/"), env=(("A", "1"),)),
]


@pytest.mark.parametrize("template", BAD_TEMPLATES)
def test_template_check_refuses_what_a_job_of_it_would(template: JobTemplate) -> None:
    """The template check runs JobSpec's checks on the template itself (no JobSpec built):
    the same refusal, word for word, for every check JobSpec makes but the key's."""
    expected = _spec_refusal(template)
    assert expected is not None
    assert _check_refusal(template) == expected


def test_template_check_passes_what_a_job_of_it_would() -> None:
    good = [
        JobTemplate(command=("true",)),
        dataclasses.replace(JobTemplate(command=("sh", "-c", "x")), env=(("A", "1"),)),
        JobTemplate(command=(), http=HttpRequest("GET", "https://example.com/")),
    ]
    for template in good:
        assert _spec_refusal(template) is None
        assert _check_refusal(template) is None


def test_schedule_items_share_one_checked_timing_and_refusals_are_not_kept() -> None:
    now = datetime(2027, 3, 14, 6, tzinfo=UTC)
    a, b = (
        ScheduleIn.model_validate({"cron": "*/5 * * * *", "job": {"command": [c]}}) for c in "ab"
    )
    sa, sb = a.to_spec(1000, now, "UTC"), b.to_spec(1000, now, "UTC")
    assert sa.timing is sb.timing and sa.policy is sb.policy
    assert sa.timing == Timing("UTC", cron="*/5 * * * *")
    bad = ScheduleIn.model_validate({"cron": "61 * * * *", "job": {"command": ["x"]}})
    for _ in range(2):  # refused every time: a refusal is raised, never remembered
        with pytest.raises(InvalidSchedule):
            bad.to_spec(1000, now, "UTC")


@pytest.mark.parametrize("outcome", [Outcome.SUCCEEDED, Outcome.FAILED])
def test_the_finished_job_is_what_replace_gives(outcome: Outcome) -> None:
    """``results.after`` (issue 17: a generated copy, not ``dataclasses.replace``) gives
    the job ``replace`` gives, every field set to a value of its own, none default."""
    t = datetime(2030, 1, 1, tzinfo=UTC)
    attempt = Attempt(7, 2, 5, t, t, Outcome.FAILED, 3, "exit code 3", "out", "/l", 9, "h:1:t")
    job = Job(7, "k", full_spec(), JobStatus.RUNNING, t, t - timedelta(days=1), 2, 1, 5,
              "h:1:t", t + timedelta(seconds=30), t - timedelta(hours=1), "before", "old",
              (attempt,), '{"mail": "sent"}')  # fmt: skip
    assert all(getattr(job, f.name) != f.default for f in dataclasses.fields(Job))
    claim = Claim(job, 3, 6, t + timedelta(seconds=30))
    result = AttemptResult(outcome, 0 if outcome is Outcome.SUCCEEDED else 1, "exit code 1")
    done = Finished(7, JobStatus.SCHEDULED, t + timedelta(seconds=9), 2, "why")
    expected = dataclasses.replace(
        job, status=done.status, run_at=done.run_at, attempt=3, failures=2, generation=6,
        lease_owner=None, lease_until=None, dead_reason="why",
        last_error=None if outcome is Outcome.SUCCEEDED else "exit code 1",
    )  # fmt: skip
    got = results.after(claim, result, done)
    assert got == expected and type(got) is Job and hash(got) == hash(expected)


@pytest.mark.parametrize(
    "body",
    [
        {"command": ["true"]},
        {"command": ["true"], "run_at": "2027-03-14T06:00:00+09:00", "key": "k-1"},
        {
            "command": ["sh", "-c", "echo é"],
            "queue": "reports",
            "priority": -3,
            "max_attempts": 5,
            "timeout": 2.5,
            "backoff": {"base": 2, "cap": 1},
            "env": {"B": "2", "A": "1"},
            "cwd": "/srv",
            "retry_on": [3, 1, 3],
            "no_retry_on": [7, 2],
            "nice": 5,
            "memory_max": 1 << 30,
            "cpu_quota": 50.0,
            "on_failure": "notify-send failed",
        },
        {"command": ["true"], "memory_max": 1 << 20},
    ],
)
def test_the_api_s_spec_is_the_checked_spec(body: dict[str, object]) -> None:
    """``JobIn.to_spec`` builds command jobs unchecked (``fields_spec``): what it gives is
    what the checked ``JobSpec`` gives, an empty set of limits included (None)."""
    from jobctl.api.schemas import JobIn

    item = JobIn.model_validate(body)
    now = datetime(2027, 3, 1, tzinfo=UTC)
    got = item.to_spec(1000, now)
    want = JobSpec(
        run_at=(item.run_at or now).astimezone(UTC),
        key=item.key,
        owner_uid=1000,
        schedule_id=None,
        scheduled_for=None,
        **item._job_fields(DEFAULT_RETRY),
    )
    assert got == want
    assert [type(getattr(got, f.name)) for f in dataclasses.fields(JobSpec)] == [
        type(getattr(want, f.name)) for f in dataclasses.fields(JobSpec)
    ]
    if "nice" not in body and "memory_max" not in body:
        assert got.resources is None
