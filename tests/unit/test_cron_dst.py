"""DST behaviour of next_fire, zone by zone, with hand-computed UTC instants.

Every expected value below was worked out by hand from the zone's rules (written in
the comment of each block), not produced by the code under test.  The contract
(cronie's): a *fixed-time* schedule (minute and hour fields not starting with ``*``)
runs a skipped occurrence once at the first instant after the gap and a repeated one
once at the first instant; a *wildcard* schedule fires only at wall times that exist,
and in both passes of a repeated hour.
"""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import islice, pairwise

import pytest

from jobctl.domain.cron import iter_fires, load_zone, next_fire, parse_cron


def utc(text: str) -> datetime:
    """'2027-03-14 07:00' -> aware UTC datetime."""
    return datetime.strptime(text, "%Y-%m-%d %H:%M").replace(tzinfo=UTC)


def fires(expr: str, zone: str, after: str, count: int) -> list[str]:
    """The next ``count`` fires as 'YYYY-MM-DD HH:MM' UTC strings."""
    found = []
    for instant in islice(iter_fires(parse_cron(expr), load_zone(zone), utc(after)), count):
        assert instant.tzinfo is UTC
        found.append(instant.strftime("%Y-%m-%d %H:%M"))
    return found


# (zone, expression, after (UTC), expected fires (UTC, in the year of `after`))
CASES = [
    # --- America/New_York: EST -05:00 / EDT -04:00 -------------------------------
    # 2027-03-14 02:00 EST -> 03:00 EDT (07:00Z); 02:00-03:00 is skipped.
    ("America/New_York", "30 2 * * *", "2027-03-13 12:00", "03-14 07:00, 03-15 06:30"),
    (
        "America/New_York",
        "*/30 * * * *",
        "2027-03-14 06:00",
        "03-14 06:30, 03-14 07:00, 03-14 07:30",
    ),
    # 2027-11-07 02:00 EDT -> 01:00 EST (06:00Z); 01:00-02:00 happens twice.
    ("America/New_York", "30 1 * * *", "2027-11-06 12:00", "11-07 05:30, 11-08 06:30"),
    (
        "America/New_York",
        "*/30 * * * *",
        "2027-11-07 04:45",
        "11-07 05:00, 11-07 05:30, 11-07 06:00, 11-07 06:30, 11-07 07:00",
    ),
    # 2028-03-12 02:00 EST -> 03:00 EDT (07:00Z).
    ("America/New_York", "30 2 * * *", "2028-03-11 12:00", "03-12 07:00, 03-13 06:30"),
    ("America/New_York", "0 * * * *", "2028-03-12 05:30", "03-12 06:00, 03-12 07:00, 03-12 08:00"),
    # 2028-11-05 02:00 EDT -> 01:00 EST (06:00Z).
    ("America/New_York", "30 1 * * *", "2028-11-04 12:00", "11-05 05:30, 11-06 06:30"),
    ("America/New_York", "30 * * * *", "2028-11-05 04:45", "11-05 05:30, 11-05 06:30, 11-05 07:30"),
    # --- Europe/London: GMT +00:00 / BST +01:00 ----------------------------------
    # 2027-03-28 01:00 GMT -> 02:00 BST (01:00Z); 01:00-02:00 is skipped.
    ("Europe/London", "30 1 * * *", "2027-03-27 12:00", "03-28 01:00, 03-29 00:30"),
    (
        "Europe/London",
        "15,45 * * * *",
        "2027-03-28 00:00",
        "03-28 00:15, 03-28 00:45, 03-28 01:15, 03-28 01:45",
    ),
    # 2027-10-31 02:00 BST -> 01:00 GMT (01:00Z); 01:00-02:00 happens twice.
    ("Europe/London", "30 1 * * *", "2027-10-30 12:00", "10-31 00:30, 11-01 01:30"),
    (
        "Europe/London",
        "*/30 * * * *",
        "2027-10-30 23:45",
        "10-31 00:00, 10-31 00:30, 10-31 01:00, 10-31 01:30, 10-31 02:00",
    ),
    # 2028-03-26 01:00 GMT -> 02:00 BST (01:00Z).
    ("Europe/London", "0 1 * * *", "2028-03-25 12:00", "03-26 01:00, 03-27 00:00"),
    ("Europe/London", "*/30 * * * *", "2028-03-26 00:15", "03-26 00:30, 03-26 01:00, 03-26 01:30"),
    # 2028-10-29 02:00 BST -> 01:00 GMT (01:00Z).
    ("Europe/London", "0 1 * * *", "2028-10-28 12:00", "10-29 00:00, 10-30 01:00"),
    ("Europe/London", "0 * * * *", "2028-10-28 23:30", "10-29 00:00, 10-29 01:00, 10-29 02:00"),
    # --- Australia/Sydney: AEST +10:00 / AEDT +11:00 (southern hemisphere) -------
    # 2027-04-04 03:00 AEDT -> 02:00 AEST (2027-04-03 16:00Z); 02:00-03:00 twice.
    ("Australia/Sydney", "30 2 * * *", "2027-04-03 00:00", "04-03 15:30, 04-04 16:30"),
    ("Australia/Sydney", "0 * * * *", "2027-04-03 14:30", "04-03 15:00, 04-03 16:00, 04-03 17:00"),
    # 2027-10-03 02:00 AEST -> 03:00 AEDT (2027-10-02 16:00Z); 02:00-03:00 skipped.
    ("Australia/Sydney", "30 2 * * *", "2027-10-02 00:00", "10-02 16:00, 10-03 15:30"),
    ("Australia/Sydney", "0 * * * *", "2027-10-02 14:30", "10-02 15:00, 10-02 16:00, 10-02 17:00"),
    # 2028-04-02 03:00 AEDT -> 02:00 AEST (2028-04-01 16:00Z).
    ("Australia/Sydney", "30 2 * * *", "2028-04-01 00:00", "04-01 15:30, 04-02 16:30"),
    ("Australia/Sydney", "30 * * * *", "2028-04-01 14:45", "04-01 15:30, 04-01 16:30, 04-01 17:30"),
    # 2028-10-01 02:00 AEST -> 03:00 AEDT (2028-09-30 16:00Z).
    ("Australia/Sydney", "30 2 * * *", "2028-09-30 00:00", "09-30 16:00, 10-01 15:30"),
    ("Australia/Sydney", "30 * * * *", "2028-09-30 14:45", "09-30 15:30, 09-30 16:30"),
    # --- Australia/Lord_Howe: LHST +10:30 / LHDT +11:00 (30-minute shift) --------
    # 2027-04-04 02:00 LHDT -> 01:30 LHST (2027-04-03 15:00Z); 01:30-02:00 twice.
    ("Australia/Lord_Howe", "45 1 * * *", "2027-04-03 00:00", "04-03 14:45, 04-04 15:15"),
    (
        "Australia/Lord_Howe",
        "*/30 * * * *",
        "2027-04-03 14:10",
        "04-03 14:30, 04-03 15:00, 04-03 15:30",
    ),
    # 2027-10-03 02:00 LHST -> 02:30 LHDT (2027-10-02 15:30Z); 02:00-02:30 skipped.
    ("Australia/Lord_Howe", "15 2 * * *", "2027-10-02 00:00", "10-02 15:30, 10-03 15:15"),
    (
        "Australia/Lord_Howe",
        "*/30 * * * *",
        "2027-10-02 14:45",
        "10-02 15:00, 10-02 15:30, 10-02 16:00",
    ),
    # 2028-04-02 02:00 LHDT -> 01:30 LHST (2028-04-01 15:00Z).
    ("Australia/Lord_Howe", "45 1 * * *", "2028-04-01 00:00", "04-01 14:45, 04-02 15:15"),
    (
        "Australia/Lord_Howe",
        "45 * * * *",
        "2028-04-01 13:00",
        "04-01 13:45, 04-01 14:45, 04-01 15:15",
    ),
    # 2028-10-01 02:00 LHST -> 02:30 LHDT (2028-09-30 15:30Z).
    ("Australia/Lord_Howe", "0,15 2 * * *", "2028-09-30 00:00", "09-30 15:30, 10-01 15:00"),
    ("Australia/Lord_Howe", "15 * * * *", "2028-09-30 14:00", "09-30 14:45, 09-30 16:15"),
    # --- Pacific/Chatham: CHAST +12:45 / CHADT +13:45 (odd offset) ---------------
    # 2027-04-04 03:45 CHADT -> 02:45 CHAST (2027-04-03 14:00Z); 02:45-03:45 twice.
    ("Pacific/Chatham", "0 3 * * *", "2027-04-03 00:00", "04-03 13:15, 04-04 14:15"),
    (
        "Pacific/Chatham",
        "0 * * * *",
        "2027-04-03 12:00",
        "04-03 12:15, 04-03 13:15, 04-03 14:15, 04-03 15:15",
    ),
    # 2027-09-26 02:45 CHAST -> 03:45 CHADT (2027-09-25 14:00Z); 02:45-03:45 skipped.
    ("Pacific/Chatham", "0 3 * * *", "2027-09-25 00:00", "09-25 14:00, 09-26 13:15"),
    ("Pacific/Chatham", "0 * * * *", "2027-09-25 12:00", "09-25 12:15, 09-25 13:15, 09-25 14:15"),
    # 2028-04-02 03:45 CHADT -> 02:45 CHAST (2028-04-01 14:00Z).
    ("Pacific/Chatham", "15 3 * * *", "2028-04-01 00:00", "04-01 13:30, 04-02 14:30"),
    ("Pacific/Chatham", "15 * * * *", "2028-04-01 13:00", "04-01 13:30, 04-01 14:30, 04-01 15:30"),
    # 2028-09-24 02:45 CHAST -> 03:45 CHADT (2028-09-23 14:00Z).
    ("Pacific/Chatham", "15 3 * * *", "2028-09-23 00:00", "09-23 14:00, 09-24 13:30"),
    (
        "Pacific/Chatham",
        "*/30 * * * *",
        "2028-09-23 13:00",
        "09-23 13:15, 09-23 13:45, 09-23 14:15, 09-23 14:45",
    ),
    # --- America/Santiago: -04 / -03, changes at local midnight ------------------
    # 2027-04-04 00:00 -03 -> 2027-04-03 23:00 -04 (03:00Z); 23:00-24:00 on Apr 3 twice.
    ("America/Santiago", "30 23 * * *", "2027-04-03 12:00", "04-04 02:30, 04-05 03:30"),
    ("America/Santiago", "0 0 * * *", "2027-04-03 00:00", "04-03 03:00, 04-04 04:00, 04-05 04:00"),
    (
        "America/Santiago",
        "*/30 * * * *",
        "2027-04-04 01:45",
        "04-04 02:00, 04-04 02:30, 04-04 03:00, 04-04 03:30, 04-04 04:00",
    ),
    # 2027-09-05 00:00 -04 -> 01:00 -03 (04:00Z); 00:00-01:00 on Sep 5 skipped.
    ("America/Santiago", "0 0 * * *", "2027-09-04 12:00", "09-05 04:00, 09-06 03:00"),
    (
        "America/Santiago",
        "*/30 * * * *",
        "2027-09-05 03:00",
        "09-05 03:30, 09-05 04:00, 09-05 04:30",
    ),
    # 2028-04-02 00:00 -03 -> 2028-04-01 23:00 -04 (03:00Z).
    ("America/Santiago", "30 23 * * *", "2028-04-01 12:00", "04-02 02:30, 04-03 03:30"),
    ("America/Santiago", "0 * * * *", "2028-04-02 01:30", "04-02 02:00, 04-02 03:00, 04-02 04:00"),
    # 2028-09-03 00:00 -04 -> 01:00 -03 (04:00Z).
    ("America/Santiago", "0 0 * * *", "2028-09-02 12:00", "09-03 04:00, 09-04 03:00"),
    ("America/Santiago", "0 * * * *", "2028-09-03 02:30", "09-03 03:00, 09-03 04:00, 09-03 05:00"),
    # --- Asia/Kolkata: IST +05:30 all year (no DST since 1945) -------------------
    # 2027 and 2028: no transitions; the half-hour offset must simply carry through.
    ("Asia/Kolkata", "0 6 * * *", "2027-03-14 00:00", "03-14 00:30, 03-15 00:30"),
    ("Asia/Kolkata", "*/45 * * * *", "2027-11-07 00:00", "11-07 00:15, 11-07 00:30, 11-07 01:15"),
    ("Asia/Kolkata", "30 2 * * *", "2028-03-12 00:00", "03-12 21:00, 03-13 21:00"),
    ("Asia/Kolkata", "0 * * * *", "2028-11-05 05:00", "11-05 05:30, 11-05 06:30"),
    # --- Antarctica/Troll: +00 / +02 (a two-hour shift) --------------------------
    # 2027-03-28 01:00 +00 -> 03:00 +02 (01:00Z); 01:00-03:00 skipped.  01:00, 02:00
    # and the existing 03:00 all collapse into one run at 01:00Z.
    (
        "Antarctica/Troll",
        "0 1-3 * * *",
        "2027-03-27 12:00",
        "03-28 01:00, 03-28 23:00, 03-29 00:00",
    ),
    # 2027-10-31 03:00 +02 -> 01:00 +00 (01:00Z); 01:00-03:00 twice.
    ("Antarctica/Troll", "0 2 * * *", "2027-10-30 12:00", "10-31 00:00, 11-01 02:00"),
    (
        "Antarctica/Troll",
        "0 * * * *",
        "2027-10-30 23:30",
        "10-31 00:00, 10-31 01:00, 10-31 02:00, 10-31 03:00",
    ),
]


@pytest.mark.parametrize(("zone", "expr", "after", "expected"), CASES)
def test_transition(zone: str, expr: str, after: str, expected: str) -> None:
    want = [f"{after[:4]}-{item}" for item in expected.split(", ")]
    assert fires(expr, zone, after, len(want)) == want


# --- the examples of the contract, spelled out ------------------------------------
NY = "America/New_York"


def test_spring_forward_fixed_time_runs_at_gap_end() -> None:
    # 2027-03-14 02:00 EST -> 03:00 EDT: 02:30 does not exist; run at 03:00 EDT.
    assert next_fire(parse_cron("30 2 * * *"), load_zone(NY), utc("2027-03-14 06:00")) == utc(
        "2027-03-14 07:00"
    )


@pytest.mark.parametrize("expr", ["0,30 2 * * *", "0 2,3 * * *", "0,20,40 2 * * *"])
def test_occurrences_in_one_gap_collapse_into_one_run(expr: str) -> None:
    # 02:00, 02:30 (and the real 03:00 EDT) all map to 07:00Z: fired once, then the
    # next day's first occurrence.
    got = fires(expr, NY, "2027-03-14 06:00", 2)
    assert got == ["2027-03-14 07:00", "2027-03-15 06:00"]


def test_real_occurrence_after_the_gap_end_still_fires() -> None:
    assert fires("30 2,3 * * *", NY, "2027-03-14 06:00", 3) == [
        "2027-03-14 07:00",  # 02:30, skipped -> 03:00 EDT
        "2027-03-14 07:30",  # 03:30 EDT exists
        "2027-03-15 06:30",
    ]


def test_wildcard_skips_missing_minutes() -> None:
    # 01:59 EST is 06:59Z; the next minute that exists is 03:00 EDT = 07:00Z.
    assert fires("* * * * *", NY, "2027-03-14 06:58", 3) == [
        "2027-03-14 06:59",
        "2027-03-14 07:00",
        "2027-03-14 07:01",
    ]
    # A wildcard schedule whose only hour is skipped does not fire that day.
    assert fires("*/30 2 * * *", NY, "2027-03-14 00:00", 1) == ["2027-03-15 06:00"]


def test_fall_back_fixed_time_fires_once_at_first_instant() -> None:
    # 2027-11-07 02:00 EDT -> 01:00 EST: 01:30 EDT = 05:30Z, 01:30 EST = 06:30Z.
    assert fires("30 1 * * *", NY, "2027-11-07 00:00", 2) == [
        "2027-11-07 05:30",
        "2027-11-08 06:30",
    ]


def test_fall_back_fixed_time_not_again_in_second_pass() -> None:
    # after = 01:10 EST (second pass): 01:30 already ran at 05:30Z.
    assert next_fire(parse_cron("30 1 * * *"), load_zone(NY), utc("2027-11-07 06:10")) == utc(
        "2027-11-08 06:30"
    )


def test_fall_back_wildcard_fires_in_both_passes() -> None:
    # 01:00 EDT, 01:30 EDT, 01:00 EST, 01:30 EST
    assert fires("*/30 * * * *", NY, "2027-11-07 04:59", 4) == [
        "2027-11-07 05:00",
        "2027-11-07 05:30",
        "2027-11-07 06:00",
        "2027-11-07 06:30",
    ]


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        ("2027-11-07 05:30", "2027-11-07 06:00"),  # 01:30 EDT -> 01:00 EST
        ("2027-11-07 05:45", "2027-11-07 06:00"),  # 01:45 EDT -> 01:00 EST
        ("2027-11-07 06:00", "2027-11-07 06:30"),  # 01:00 EST -> 01:30 EST
        ("2027-11-07 06:30", "2027-11-07 07:00"),  # 01:30 EST -> 02:00 EST
    ],
)
def test_fall_back_wildcard_from_inside_the_fold(after: str, expected: str) -> None:
    assert next_fire(parse_cron("*/30 * * * *"), load_zone(NY), utc(after)) == utc(expected)


def test_fall_back_wildcard_minutes_of_a_fixed_hour() -> None:
    # `* 1 * * *` is wildcard (minute starts with *): all 120 minutes of 01:xx fire.
    got = fires("* 1 * * *", NY, "2027-11-07 04:00", 121)
    assert got[0] == "2027-11-07 05:00"
    assert got[59] == "2027-11-07 05:59"
    assert got[60] == "2027-11-07 06:00"
    assert got[119] == "2027-11-07 06:59"
    assert got[120] == "2027-11-08 06:00"


def test_after_with_seconds_and_other_zone() -> None:
    # `after` may be in any zone and carry seconds; fires are strictly after it.
    tokyo = load_zone("Asia/Tokyo")
    after = datetime(2027, 11, 7, 1, 30, 0, 1, tzinfo=load_zone(NY))  # 05:30:00.000001Z
    assert next_fire(parse_cron("*/30 * * * *"), tokyo, after) == utc("2027-11-07 06:00")
    exact = datetime(2027, 11, 7, 1, 30, tzinfo=load_zone(NY), fold=1)  # 06:30Z
    assert next_fire(parse_cron("*/30 * * * *"), load_zone(NY), exact) == utc("2027-11-07 07:00")


def test_iteration_across_a_year_never_repeats_an_instant() -> None:
    # NY midnight to midnight (EST both ends) over 2027: 6 runs a day, except
    # 2027-03-14, where 02:00, 02:30 and the real 03:00 EDT collapse into one run at
    # 07:00Z (4 runs), and 2027-11-07, where 01:00 and 01:30 run once each (6 runs).
    tz = load_zone(NY)
    start, end = utc("2027-01-01 05:00"), utc("2028-01-01 05:00")
    instants = []
    for instant in iter_fires(parse_cron("0,30 1-3 * * *"), tz, start):
        if instant >= end:
            break
        instants.append(instant)
    assert all(a < b for a, b in pairwise(instants))
    assert len(instants) == 365 * 6 - 2
