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


@pytest.mark.parametrize("text", ["tomorrow", "x", "", "06:00", "P1D", "9999-12-31 23:00"])
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
