"""The extended syntax (L, LW, W, #, nL, H): what each picks, against independent code.

* L, LW, # and nL are compared with cronsim, which implements them independently.
* W (which cronsim does not read) is compared with a plain calendar walk written here.
* On the DST edges of docs/schedules.md the extended items pick the transition days
  themselves (the second Sunday of March in New York, the last Sunday of March in
  London, ...), so the rules of the DST contract are checked through the new syntax.
* H is checked for what it promises: stable per seed, inside its range, spread.
"""

from __future__ import annotations

import calendar
import random
from datetime import UTC, date, datetime, timedelta
from itertools import islice
from zoneinfo import ZoneInfo

import cronsim
import pytest

from jobctl.domain.cron import describe, iter_fires, next_fire, parse_cron
from jobctl.domain.schedule import Timing, hash_seed
from jobctl.errors import InvalidSchedule

UTC_ZONE = ZoneInfo("UTC")
DOM_SPECIALS = ["L", "LW", "L,15", "1,L", "*"]
DOW_SPECIALS = ["5L", "1#1", "FRI#2", "0#5", "sun#1,sat#3", "1L,3L", "*", "MON"]


def _days(text: str, year: int) -> list[date]:
    start = datetime(year, 1, 1, tzinfo=UTC) - timedelta(seconds=1)
    fires = islice(iter_fires(parse_cron(text), UTC_ZONE, start), 400)
    return [f.date() for f in fires if f.year == year]


# --- L, LW, #, nL: agree with cronsim ----------------------------------------------


@pytest.mark.parametrize("dom", DOM_SPECIALS)
@pytest.mark.parametrize("dow", DOW_SPECIALS)
def test_day_specials_match_cronsim(dom: str, dow: str) -> None:
    if dom == dow == "*":
        return
    text = f"0 9 {dom} * {dow}"
    start = datetime(2027, 1, 1, tzinfo=UTC)
    ours = iter_fires(parse_cron(text), UTC_ZONE, start)
    reference = cronsim.CronSim(text, start)
    for _ in range(40):  # more than three years of monthly picks
        assert next(ours) == next(reference), text


def test_random_extended_expressions_match_cronsim() -> None:
    rng = random.Random(20270329)
    for _ in range(150):
        minute = rng.choice(["0", "*/20", "5,35"])
        hour = rng.choice(["0", "9", "*/6", "23"])
        dom = rng.choice([*DOM_SPECIALS, "1-7", "*/2", "29"])
        month = rng.choice(["*", "2", "*/3", "jan-jun"])
        dow = rng.choice([*DOW_SPECIALS, "1-5"])
        text = f"{minute} {hour} {dom} {month} {dow}"
        start = datetime(rng.randrange(2000, 2040), rng.randrange(1, 13), 1, tzinfo=UTC)
        ours = iter_fires(parse_cron(text), UTC_ZONE, start)
        reference = cronsim.CronSim(text, start)
        for _ in range(12):
            assert next(ours) == next(reference), (text, start)


def test_what_each_item_picks_in_one_month() -> None:
    # February 2028 (leap): Tue 1 .. Tue 29.  March 2027: Mon 1 .. Wed 31.
    assert _days("0 0 L 2 *", 2028) == [date(2028, 2, 29)]
    assert _days("0 0 L-1 2 *", 2028) == [date(2028, 2, 28)]
    assert _days("0 0 LW 2 *", 2027) == [date(2027, 2, 26)]  # Sun 28 -> Fri 26
    assert _days("0 0 * 2 2#5", 2028) == [date(2028, 2, 29)]  # the only fifth Tuesday
    assert _days("0 0 * 2 2#5", 2027) == []  # February 2027 has four Tuesdays
    assert _days("0 0 * 3 0L", 2027) == [date(2027, 3, 28)]  # the last Sunday
    assert _days("0 0 * 3 SUN#2", 2027) == [date(2027, 3, 14)]


# --- W: agree with a plain calendar walk --------------------------------------------


def _nearest_weekday(year: int, month: int, day: int) -> date | None:
    """Quartz's W, stated as a search: of the month's weekdays, the one closest to
    ``day`` (never a tie: a weekend day is 1 day from one weekday and 2 from the other)."""
    length = calendar.monthrange(year, month)[1]
    if day > length:
        return None
    weekdays = [d for d in range(1, length + 1) if date(year, month, d).weekday() < 5]
    return date(year, month, min(weekdays, key=lambda d: abs(d - day)))


@pytest.mark.parametrize("day", [1, 2, 15, 28, 29, 30, 31])
def test_nearest_weekday_matches_a_calendar_walk(day: int) -> None:
    for year in (2027, 2028):
        expected = [
            found
            for month in range(1, 13)
            if (found := _nearest_weekday(year, month, day)) is not None
        ]
        assert _days(f"0 0 {day}W * *", year) == expected


def test_nearest_weekday_stays_in_its_month() -> None:
    assert _days("0 0 1W 5 *", 2027) == [date(2027, 5, 3)]  # Sat 1 May -> Mon 3
    assert _days("0 0 31W 10 *", 2027) == [date(2027, 10, 29)]  # Sun 31 Oct -> Fri 29
    assert _days("0 0 31W 4,5 *", 2027) == [date(2027, 5, 31)]  # no 31 April: like a plain 31


# --- the DST contract, reached through the extended syntax ---------------------------


@pytest.mark.parametrize(
    ("zone", "text", "after", "expected"),
    [
        # New York: the second Sunday of March 2027 is the spring-forward day.
        (
            "America/New_York",
            "30 2 * * 0#2",
            "2027-03-01",
            ["2027-03-14T07:00", "2027-04-11T06:30"],
        ),
        # ... and the first Sunday of November the fall-back day: first pass only.
        (
            "America/New_York",
            "30 1 * * SUN#1",
            "2027-11-01",
            ["2027-11-07T05:30", "2027-12-05T06:30"],
        ),
        # London changes on the last Sundays of March and October.
        ("Europe/London", "30 1 * * 0L", "2027-03-20", ["2027-03-28T01:00", "2027-04-25T00:30"]),
        ("Europe/London", "30 1 * * 0L", "2027-10-20", ["2027-10-31T00:30", "2027-11-28T01:30"]),
        # Wildcard minute: both passes of the repeated hour.
        (
            "Europe/London",
            "*/30 1 * * 0L",
            "2027-10-30",
            ["2027-10-31T00:00", "2027-10-31T00:30", "2027-10-31T01:00", "2027-10-31T01:30"],
        ),
        (
            "Australia/Sydney",
            "30 2 * * 0#1",
            "2027-04-01",
            ["2027-04-03T15:30", "2027-05-01T16:30"],
        ),
        ("Australia/Sydney", "30 2 * * 0#1", "2027-09-25", ["2027-10-02T16:00"]),
        ("Australia/Lord_Howe", "15 2 * * 0#1", "2027-09-25", ["2027-10-02T15:30"]),
        ("Pacific/Chatham", "0 3 * * 0L", "2027-09-20", ["2027-09-25T14:00", "2027-10-30T13:15"]),
        (
            "America/Santiago",
            "30 23 * * 6#1",
            "2027-04-01",
            ["2027-04-04T02:30", "2027-05-02T03:30"],
        ),
        ("America/Santiago", "0 0 * * 0#1", "2027-09-01", ["2027-09-05T04:00", "2027-10-03T03:00"]),
        ("Asia/Kolkata", "0 6 L * *", "2027-03-01", ["2027-03-31T00:30", "2027-04-30T00:30"]),
    ],
)
def test_dst_rules_hold_on_extended_days(
    zone: str, text: str, after: str, expected: list[str]
) -> None:
    start = datetime.fromisoformat(after).replace(tzinfo=UTC)
    fires = islice(iter_fires(parse_cron(text), ZoneInfo(zone), start), len(expected))
    assert [f.strftime("%Y-%m-%dT%H:%M") for f in fires] == expected


# --- H -------------------------------------------------------------------------------


def test_hash_is_stable_per_seed_and_differs_between_seeds() -> None:
    one = parse_cron("H H * * *", "sch-0a1b2c3d4e5f")
    assert parse_cron("H H * * *", "sch-0a1b2c3d4e5f") == one
    pairs = {(parse_cron("H H * * *", f"sch-{n:012x}").minutes,) for n in range(300)}
    assert len(pairs) > 50  # 60 minutes: a fixed or weak hash would give a handful


def test_hash_spreads_over_the_whole_day() -> None:
    """Each field draws its own number: (minute, hour) pairs are not tied together."""
    slots = set()
    for n in range(3000):
        expr = parse_cron("H H * * *", f"sch-{n:012x}")
        slots.add((expr.minutes.bit_length() - 1, expr.hours.bit_length() - 1))
    assert len(slots) > 1000  # of 1,440; croniter's crc32 scheme reaches 240


@pytest.mark.parametrize(
    ("text", "field", "allowed", "count"),
    [
        ("H * * * *", "minutes", range(60), 1),
        ("H(0-29)/10 * * * *", "minutes", range(30), 3),
        ("H/15 * * * *", "minutes", range(60), 4),
        ("0 H(9-17) * * *", "hours", range(9, 18), 1),
        ("0 0 H * *", "days", range(1, 29), 1),  # 1-28: a hashed day exists every month
        ("0 0 H/7 * *", "days", range(1, 29), 4),
        ("0 0 * H *", "months", range(1, 13), 1),
        ("0 0 * * H", "weekdays", range(7), 1),
        ("0 0 * * H(1-5)", "weekdays", range(1, 6), 1),
    ],
)
def test_hash_stays_in_its_range(text: str, field: str, allowed: range, count: int) -> None:
    for n in range(200):
        mask = getattr(parse_cron(text, f"sch-{n}"), field)
        values = [v for v in range(64) if mask >> v & 1]
        assert len(values) == count and set(values) <= set(allowed), (text, n, values)


def test_hash_with_a_step_is_a_shifted_star_for_the_dst_and_day_rules() -> None:
    cadence = parse_cron("H/15 2 * * *", "sch-1")
    assert cadence.is_wildcard  # like */15: keeps its cadence through a fold
    assert not parse_cron("H 2 * * *", "sch-1").is_wildcard  # a time of day
    both = parse_cron("0 0 H/2 * MON", "sch-1")
    assert both.dom_star  # Vixie: a star-like field makes both day fields count


def test_hashed_fixed_time_follows_the_gap_rule() -> None:
    seed = "sch-0a1b2c3d4e5f"
    expr = parse_cron("H 2 * * *", seed)
    minute = expr.minutes.bit_length() - 1
    zone = ZoneInfo("America/New_York")
    fire = next_fire(expr, zone, datetime(2027, 3, 13, 12, tzinfo=UTC))
    assert fire == datetime(2027, 3, 14, 7, 0, tzinfo=UTC)  # 02:MM skipped: the gap's end
    later = next_fire(expr, zone, fire)
    assert later == datetime(2027, 3, 15, 6, minute, tzinfo=UTC)
    assert describe(expr) == f"at 02:{minute:02d} every day (H hashed from '{seed}')"


def test_a_schedule_hashes_from_its_id_and_shares_nothing_else() -> None:
    after = datetime(2027, 1, 1, tzinfo=UTC)
    timing = Timing("UTC", cron="H 3 * * *")
    one, two = timing.seeded("sch-000000000001"), timing.seeded("sch-000000000002")
    assert one.next_after(after) == next_fire(
        parse_cron("H 3 * * *", "sch-000000000001"), UTC_ZONE, after
    )
    assert {one.next_after(after), two.next_after(after)} != {one.next_after(after)}
    plain = Timing("UTC", cron="0 3 * * THU")  # THU holds an H, but no item starts with one
    assert plain.seeded("sch-000000000001") is plain
    assert hash_seed("0 3 * * THU", "sch-1") is None and hash_seed("H 3 * * *", "sch-1") == "sch-1"


def test_never_firing_extended_expressions_are_refused() -> None:
    with pytest.raises(InvalidSchedule, match="never fires: no day in any month matches both"):
        next_fire(parse_cron("0 0 */20 * 1#5"), UTC_ZONE, datetime(2027, 1, 1, tzinfo=UTC))
    with pytest.raises(InvalidSchedule, match="never fires"):
        next_fire(parse_cron("0 0 31W 2,4 *"), UTC_ZONE, datetime(2027, 1, 1, tzinfo=UTC))
    reason = parse_cron("0 0 31W 4 *").never_reason
    assert reason == "'0 0 31W 4 *' never fires: its day-of-month picks no day in April"
    fifth = next_fire(parse_cron("0 0 * 2 1#5"), UTC_ZONE, datetime(2027, 1, 1, tzinfo=UTC))
    assert fifth == datetime(2044, 2, 29, tzinfo=UTC)  # the next February with five Mondays
