"""Human time of the CLI (pendulum): --at with its DST notes, relative form, durations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from jobctl.cli import humantime
from jobctl.errors import InvalidInput

NEW_YORK = ZoneInfo("America/New_York")
NOW = datetime(2027, 3, 14, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "utc", "note"),
    [
        ("2027-03-14 06:00", "2027-03-14T10:00:00+00:00", ""),
        ("2027-03-14T06:00:00+09:00", "2027-03-13T21:00:00+00:00", ""),
        ("2027-03-14T06:00Z", "2027-03-14T06:00:00+00:00", ""),
        ("20270314T0600", "2027-03-14T10:00:00+00:00", ""),  # basic ISO-8601
        ("2027-W11-7 06:00", "2027-03-21T10:00:00+00:00", ""),  # a week date
        ("2027-03-15", "2027-03-15T04:00:00+00:00", ""),  # a date: its midnight
        (
            "2027-03-14 02:30",
            "2027-03-14T07:30:00+00:00",
            "02:30 does not exist that day (DST gap): runs at 03:30 EDT",
        ),
        (
            "2027-11-07 01:30",  # the first pass, as a fixed-time schedule (pendulum: second)
            "2027-11-07T05:30:00+00:00",
            "01:30 happens twice that day (DST): runs at the first, 01:30 EDT",
        ),
    ],
)
def test_at_is_read_in_the_zone_with_the_dst_rules(text: str, utc: str, note: str) -> None:
    moment, said = humantime.parse_at(text, NEW_YORK)
    assert (moment.isoformat(), said) == (utc, note)


@pytest.mark.parametrize(
    ("text", "now", "utc", "note"),
    [
        # NOW is 08:00 EDT on 14 March 2027 (the spring-forward day) in New York
        ("13:30", NOW, "2027-03-14T17:30:00+00:00", ""),  # later today
        ("7:15", NOW, "2027-03-15T11:15:00+00:00", ""),  # passed: tomorrow
        ("08:00:00", NOW, "2027-03-15T12:00:00+00:00", ""),  # now exactly: tomorrow
        (" 23:59:59 ", NOW, "2027-03-15T03:59:59+00:00", ""),
        # 01:00 EST the night before: 02:30 today is in the gap, so it runs at its end
        (
            "02:30",
            datetime(2027, 3, 14, 6, tzinfo=UTC),
            "2027-03-14T07:30:00+00:00",
            "02:30 does not exist that day (DST gap): runs at 03:30 EDT",
        ),
        # 00:30 EDT on 7 November (fall back): the first 01:30, in an hour
        (
            "01:30",
            datetime(2027, 11, 7, 4, 30, tzinfo=UTC),
            "2027-11-07T05:30:00+00:00",
            "01:30 happens twice that day (DST): runs at the first, 01:30 EDT",
        ),
    ],
)
def test_a_time_alone_is_its_next_occurrence_as_at_reads_it(
    text: str, now: datetime, utc: str, note: str
) -> None:
    """``--at 06:00`` was refused; at(1) users type it and mean the next 06:00."""
    moment, said = humantime.parse_at(text, NEW_YORK, now)
    assert (moment.isoformat(), said) == (utc, note)


@pytest.mark.parametrize(
    "text", ["tomorrow", "x", "", "24:00", "6:60", "06:00+09:00", "P1D", "9999-12-31 23:00"]
)
def test_bad_at_is_one_clear_error(text: str) -> None:
    with pytest.raises(InvalidInput, match="invalid time"):
        humantime.parse_at(text, NEW_YORK)


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (0.4, "now"),
        (30, "in 30 seconds"),
        (300, "in 5 minutes"),
        (3 * 3600 + 7, "in 3 hours"),
        (-3 * 3600, "3 hours ago"),
        (-3 * 86400, "3 days ago"),
    ],
)
def test_relative(seconds: float, words: str) -> None:
    assert humantime.relative(NOW + timedelta(seconds=seconds), NOW) == words


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (0.25, "250 ms"),
        (45, "45 seconds"),
        (3725, "1 hour 2 minutes"),
        (93784, "1 day 2 hours"),
        (3600, "1 hour"),
    ],
)
def test_duration_in_words(seconds: float, words: str) -> None:
    assert humantime.duration(seconds) == words


def test_one_format_for_full_and_table_times() -> None:
    tokyo = ZoneInfo("Asia/Tokyo")
    assert humantime.full("2027-03-14T12:05:00Z", tokyo, NOW) == (
        "2027-03-14 21:05:00 JST (in 5 minutes)"
    )
    assert humantime.short("2027-03-14T12:05:00Z", tokyo, NOW) == "21:05:00 (in 5 minutes)"
    assert humantime.short("2027-03-16T12:05:00Z", tokyo, NOW) == "2027-03-16 21:05 (in 2 days)"
    assert humantime.full(None, tokyo, NOW) == "-"


def test_relative_and_duration_words_are_pendulums() -> None:
    """The CLI words its times without importing pendulum (start-up time), so hold the
    words equal to pendulum's own over a sweep from a second to four weeks, both ways.
    (Past four weeks pendulum counts calendar months with quirks of its own at month
    ends, e.g. 29 January to 26 February is "1 month"; jobctl counts whole calendar
    months, see test_months_are_whole_calendar_months.)"""
    import random

    import pendulum

    rng = random.Random(20270314)
    spans = [1, 9, 11, 59, 60, 61, 3599, 3600, 86399, 86400, 79200, 604800, 2419200]
    spans += [rng.randrange(1, 10**4) for _ in range(200)]
    spans += [rng.randrange(1, 10**6) for _ in range(300)]
    spans += [rng.randrange(1, 27 * 86400) for _ in range(500)]
    for span in spans:
        now = NOW + timedelta(seconds=rng.randrange(-(10**8), 10**8))
        for then in (now + timedelta(seconds=span), now - timedelta(seconds=span)):
            theirs = pendulum.instance(now).diff_for_humans(pendulum.instance(then), absolute=True)
            ours = humantime.relative(then, now)
            assert ours in (f"in {theirs}", f"{theirs} ago"), (now, then)
    for span in [*spans, *(rng.randrange(1, 10**9) for _ in range(300))]:
        words = pendulum.duration(seconds=span).in_words(locale="en").split()
        assert humantime.duration(span) == " ".join(words[:4]), span


@pytest.mark.parametrize(
    ("then", "words"),
    [
        ("2027-04-14T12:00:00+00:00", "in 1 month"),
        ("2027-04-10T12:00:00+00:00", "in 4 weeks"),  # 27 days, not a month
        ("2027-09-14T12:00:00+00:00", "in 6 months"),
        ("2028-03-14T12:00:00+00:00", "in 1 year"),
        ("2029-01-14T12:00:00+00:00", "in 2 years"),  # 1 year 10 months rounds up
        ("2026-03-14T12:00:00+00:00", "1 year ago"),
    ],
)
def test_months_are_whole_calendar_months(then: str, words: str) -> None:
    assert humantime.relative(datetime.fromisoformat(then), NOW) == words


def test_drawing_times_does_not_import_pendulum() -> None:
    """list, show and status draw times and durations: pendulum must stay unloaded there
    (its import is a third of their start-up budget); --at loads it."""
    import subprocess
    import sys

    code = (
        "import sys; from jobctl.cli import render; "
        "render.when('2027-03-14T12:00:00Z'); render.short_when('2027-03-14T12:00:00Z'); "
        "render.format_duration(3725); print('pendulum' in sys.modules); "
        "from jobctl.cli import humantime; from zoneinfo import ZoneInfo; "
        "humantime.parse_at('2027-03-14 06:00', ZoneInfo('UTC')); print('pendulum' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


def test_since_is_a_time_or_how_long_ago_and_its_error_says_both() -> None:
    """``dlq list --since 1h`` was refused as an invalid time while ``audit --since 1h``
    worked; both read it the same way now, and the error names both forms."""
    assert humantime.since("90m", NOW) == "2027-03-14T10:30:00+00:00"
    assert humantime.since("2027-03-14T06:00:00Z", NOW) == "2027-03-14T06:00:00+00:00"
    with pytest.raises(InvalidInput, match=r"\(local time\), or how long ago, e\.g\. 1h or 2d$"):
        humantime.since("bogus", NOW)
