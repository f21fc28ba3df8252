"""Misfire, overlap, jitter and interval rules of schedules, as pure functions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobctl.domain.schedule import (
    MISFIRE_GRACE,
    Misfire,
    Overlap,
    Policy,
    Timing,
    jitter_offset,
    manual_key,
    occurrence_key,
    plan,
)
from jobctl.errors import InvalidSchedule

T0 = datetime(2027, 3, 1, 0, 0, tzinfo=UTC)
HOURLY = Timing("UTC", cron="0 * * * *")


def h(n: float) -> datetime:
    return T0 + timedelta(hours=n)


def test_on_time_occurrence_is_created_and_the_schedule_advances() -> None:
    p = plan(HOURLY, Policy(), h(1), h(1) + timedelta(seconds=2), previous_active=False)
    assert (p.create, p.next_run_at, p.misfire_skips.count) == ((h(1),), h(2), 0)


def test_nothing_due_yet() -> None:
    p = plan(HOURLY, Policy(), h(1), h(0.5), previous_active=False)
    assert (p.create, p.next_run_at) == ((), h(1))


@pytest.mark.parametrize(
    ("misfire", "created", "skipped"),
    [
        # down from 00:30 to 06:30: occurrences 01:00..06:00 (six) were missed
        (Misfire.SKIP, (), 6),
        (Misfire.ONCE, (h(6),), 5),
        (Misfire.ALL, tuple(h(n) for n in range(1, 7)), 0),
    ],
)
def test_six_hours_down(misfire: Misfire, created: tuple[datetime, ...], skipped: int) -> None:
    p = plan(HOURLY, Policy(misfire=misfire), h(1), h(6.5), previous_active=False)
    assert p.create == created
    assert p.misfire_skips.count == skipped
    assert p.next_run_at == h(7)
    if skipped:
        assert p.misfire_skips.first == h(1)


@pytest.mark.parametrize("down_until", [2.5, 3.5])
def test_once_fires_only_the_latest_of_two_or_more_missed(down_until: float) -> None:
    """However few were missed (two is the edge: one is simply on time), ``once`` fires
    the latest occurrence and records every earlier one as a skip."""
    p = plan(HOURLY, Policy(misfire=Misfire.ONCE), h(1), h(down_until), previous_active=False)
    last = h(int(down_until))
    assert p.create == (last,)
    assert (p.misfire_skips.count, p.misfire_skips.first) == (int(down_until) - 1, h(1))
    assert p.next_run_at == last + timedelta(hours=1)


def test_all_is_bounded_by_the_catch_up_limit() -> None:
    p = plan(HOURLY, Policy(misfire=Misfire.ALL, catch_up_limit=2), h(1), h(6.5), False)
    assert p.create == (h(5), h(6))
    assert (p.misfire_skips.count, p.misfire_skips.first, p.misfire_skips.last) == (4, h(1), h(4))


def test_skip_still_runs_what_is_within_the_grace() -> None:
    now = h(6) + MISFIRE_GRACE
    p = plan(HOURLY, Policy(misfire=Misfire.SKIP), h(1), now, previous_active=False)
    assert p.create == (h(6),) and p.misfire_skips.count == 5
    late = plan(HOURLY, Policy(misfire=Misfire.SKIP), h(6), now + timedelta(seconds=1), False)
    assert late.create == () and late.misfire_skips.count == 1


def test_overlap_skip_records_the_occurrence() -> None:
    p = plan(HOURLY, Policy(overlap=Overlap.SKIP), h(1), h(1), previous_active=True)
    assert p.create == () and p.overlap_skips.count == 1 and p.next_run_at == h(2)


def test_overlap_allow_runs_anyway() -> None:
    p = plan(HOURLY, Policy(overlap=Overlap.ALLOW), h(1), h(1), previous_active=True)
    assert p.create == (h(1),)


def test_overlap_queue_waits_then_is_released_first() -> None:
    pol = Policy(overlap=Overlap.QUEUE)
    p1 = plan(HOURLY, pol, h(1), h(1), previous_active=True)
    assert (p1.create, p1.wait, p1.overlap_skips.count) == ((), h(1), 0)
    # another occurrence while still waiting: coalesced into the newer one
    p2 = plan(HOURLY, pol, h(2), h(2), previous_active=True, waiting=h(1))
    assert (p2.wait, p2.overlap_skips.count, p2.overlap_skips.last) == (h(2), 1, h(1))
    # the running job finished: the waiting occurrence runs now
    p3 = plan(HOURLY, pol, h(3), h(2.5), previous_active=False, waiting=h(2))
    assert (p3.create, p3.wait, p3.next_run_at) == ((h(2),), None, h(3))
    # released and a new one due at the same moment: the new one waits for the released
    p4 = plan(HOURLY, pol, h(3), h(3), previous_active=False, waiting=h(2))
    assert (p4.create, p4.wait) == ((h(2),), h(3))


def test_interval_is_anchored_and_never_drifts() -> None:
    anchor = T0 + timedelta(seconds=7)
    every = Timing("UTC", every=600, anchor=anchor)
    assert every.next_after(T0) == anchor
    assert every.next_after(anchor) == anchor + timedelta(minutes=10)
    # however late the last run ended, the next fire stays on the anchor's grid
    assert every.next_after(anchor + timedelta(minutes=27, seconds=1)) == anchor + timedelta(
        minutes=30
    )
    assert every.fires(anchor, 3) == [anchor + timedelta(minutes=10 * n) for n in (1, 2, 3)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tz": "UTC"}, "exactly one"),
        ({"tz": "UTC", "cron": "* * * * *", "every": 60.0}, "exactly one"),
        ({"tz": "UTC", "every": 0.5, "anchor": T0}, "at least 1s"),
        ({"tz": "Mars/Olympus", "cron": "* * * * *"}, "unknown time zone"),
        ({"tz": "UTC", "cron": "61 * * * *"}, "minute field"),
    ],
)
def test_bad_timings(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidSchedule, match=message):
        Timing(**kwargs)  # type: ignore[arg-type]


def test_jitter_is_stable_bounded_and_spread() -> None:
    offsets = [jitter_offset(f"sch-{i:08x}", 60) for i in range(1000)]
    assert all(timedelta(0) <= o < timedelta(seconds=60) for o in offsets)
    assert jitter_offset("sch-00000001", 60) == jitter_offset("sch-00000001", 60)
    assert len({o.seconds for o in offsets}) > 50
    assert jitter_offset("x", 0) == timedelta(0)


def test_keys() -> None:
    assert occurrence_key("sch-1", h(6)) == "sch-1@2027-03-01T06:00:00Z"
    assert occurrence_key("sch-1", h(6) + timedelta(milliseconds=5)).endswith("06:00:00.005Z")
    assert manual_key("sch-1", h(1)) == "sch-1@manual-2027-03-01T01:00:00Z"
