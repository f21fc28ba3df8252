"""croniter as a second, independent reading of the extended syntax, and the measured
reasons it is not jobctl's front-end (docs/dependencies.md, docs/schedules.md).

Where croniter reads an item the way jobctl documents it (``nW`` for days every month
has, ``L``, ``#``), the two must agree: croniter is the only Python library here that
implements ``W``, so it is the reference for it.  Where they differ, the difference is
pinned, so the docs that name it cannot go stale when either side changes.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from croniter.croniter import CroniterBadCronError

from jobctl.domain.cron import iter_fires, next_fire, parse_cron

UTC_ZONE = ZoneInfo("UTC")
START = datetime(2027, 1, 1)


def _ours(text: str, count: int, zone: str = "UTC", start: datetime = START) -> list[datetime]:
    fires = iter_fires(parse_cron(text), ZoneInfo(zone), start.replace(tzinfo=UTC))
    return [next(fires).replace(tzinfo=None) for _ in range(count)]


def _theirs(text: str, count: int, start: datetime = START) -> list[datetime]:
    it = croniter(text, start)
    return [it.get_next(datetime) for _ in range(count)]


@pytest.mark.parametrize(
    "text",
    ["0 0 1W * *", "0 0 2W * *", "0 12 15W * *", "30 6 28W * *", "0 9 L * *", "0 9 * * 1#1",
     "0 9 * * 5#5", "0 9 * * SUN#2", "*/30 8 1W 2,5 *"],
)  # fmt: skip
def test_agrees_with_croniter_where_croniter_reads_the_item_the_same(text: str) -> None:
    assert _ours(text, 60) == _theirs(text, 60)


def test_w_on_a_day_the_month_lacks_differs() -> None:
    # jobctl: like a plain 31, nothing in a month without day 31 (February: none).
    # croniter: clamps to the month, so 31W fires on the last weekday of February.
    assert _ours("0 0 31W * *", 2) == [datetime(2027, 1, 29), datetime(2027, 3, 31)]
    assert _theirs("0 0 31W * *", 2) == [datetime(2027, 1, 29), datetime(2027, 2, 26)]


@pytest.mark.parametrize("text", ["0 0 LW * *", "0 9 * * 5L"])
def test_croniter_refuses_lw_and_nl(text: str) -> None:
    with pytest.raises(CroniterBadCronError):
        croniter.expand(text)
    assert _ours(text, 1)  # jobctl reads both (cronsim agrees: test_cron_ext)


def test_croniter_misreads_a_one_value_range_with_a_step() -> None:
    # Vixie cron: 5-5/2 is minute 5.  croniter expands it to the even minutes.
    assert croniter.expand("5-5/2 * * * *")[0][0][:3] == [0, 2, 4]
    assert _ours("5-5/2 * * * *", 2) == [datetime(2027, 1, 1, 0, 5), datetime(2027, 1, 1, 1, 5)]


def test_croniter_reads_a_star_step_day_field_as_either() -> None:
    # Vixie (and jobctl, cronsim): '*/2' starts with '*', so a day must match both.
    ours = _ours("0 9 */2 * MON", 2)
    assert ours == [datetime(2027, 1, 11, 9), datetime(2027, 1, 25, 9)]
    assert _theirs("0 9 */2 * MON", 1) == [datetime(2027, 1, 1, 9)]  # Friday the 1st


def test_croniter_fires_a_fixed_time_twice_in_a_fold() -> None:
    zone = ZoneInfo("America/New_York")
    start = datetime(2027, 11, 6, 12, tzinfo=zone)
    it = croniter("30 1 * * *", start)
    theirs = [it.get_next(datetime).astimezone(UTC) for _ in range(2)]
    assert theirs[1] - theirs[0] == timedelta(hours=1)  # 01:30 EDT and 01:30 EST
    ours = next_fire(parse_cron("30 1 * * *"), zone, start)
    assert next_fire(parse_cron("30 1 * * *"), zone, ours) - ours == timedelta(hours=25)


def test_croniter_hash_ties_the_hour_to_the_minute() -> None:
    """croniter hashes every field from one crc32 (shifted by the field's index)."""
    theirs, ours = set(), set()
    for n in range(3000):
        seed = f"sch-{n:012x}"
        fields = croniter.expand("H H * * *", hash_id=seed.encode())[0]
        theirs.add((fields[0][0], fields[1][0]))
        expr = parse_cron("H H * * *", seed)
        ours.add((expr.minutes.bit_length() - 1, expr.hours.bit_length() - 1))
    assert len(theirs) == 240  # of the 1,440 minutes of a day
    assert len(ours) > 1000


@pytest.mark.parametrize("text", ["0 0 ? * 1", "0 0 1-0 * *"])
def test_croniter_accepts_what_cron_rejects(text: str) -> None:
    croniter.expand(text)
    with pytest.raises(Exception, match="field"):
        parse_cron(text)
