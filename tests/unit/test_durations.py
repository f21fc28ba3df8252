from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from jobctl.domain.durations import format_duration, parse_duration, parse_when
from jobctl.errors import InvalidInput


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("5m", 300),
        ("2h", 7200),
        ("1d", 86400),
        ("1w", 604800),
        ("250ms", 0.25),
        ("1h30m", 5400),
        ("15", 15),
        ("0.5", 0.5),
        (" 2H ", 7200),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5x", "m5", "-3", "1h 30m", "nan", "inf", "5mm"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(InvalidInput, match="duration"):
        parse_duration(text)


def test_format_duration() -> None:
    assert [format_duration(s) for s in (0.25, 45, 3725, 90061)] == ["250ms", "45s", "1h2m", "1d1h"]


def test_parse_when_with_offset_and_local() -> None:
    tokyo = ZoneInfo("Asia/Tokyo")
    assert parse_when("2027-03-14T06:00:00+09:00", UTC) == datetime(2027, 3, 13, 21, tzinfo=UTC)
    assert parse_when("2027-03-14T06:00:00Z", tokyo) == datetime(2027, 3, 14, 6, tzinfo=UTC)
    assert parse_when("2027-03-14 06:00", tokyo) == datetime(2027, 3, 13, 21, tzinfo=UTC)
    plus2 = timezone(timedelta(hours=2))
    assert parse_when("2027-01-01T00:00", plus2) == datetime(2026, 12, 31, 22, tzinfo=UTC)
    with pytest.raises(InvalidInput, match="invalid time 'tomorrow'"):
        parse_when("tomorrow", UTC)
