"""The unchecked builders of the hot paths give what the checked ones give."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta, timezone

import pytest

from jobctl.domain.clock import iso
from jobctl.domain.limits import MAX_PAYLOAD_BYTES
from jobctl.domain.models import (
    Backoff,
    JobSpec,
    check_payload,
    stored_spec,
    trusted_spec,
)
from jobctl.errors import InvalidInput
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
