"""Parsing, error messages, the Vixie day rule, macros, describe() and load_zone()."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import islice
from zoneinfo import ZoneInfo

import pytest

from jobctl.domain.cron import (
    CronExpr,
    describe,
    iter_fires,
    load_zone,
    next_fire,
    parse_cron,
)
from jobctl.errors import InvalidSchedule

UTC_ZONE = ZoneInfo("UTC")


def bits(mask: int) -> list[int]:
    return [i for i in range(64) if mask >> i & 1]


def utc(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%d %H:%M").replace(tzinfo=UTC)


def fires(expr: str, after: str, count: int) -> list[str]:
    found = iter_fires(parse_cron(expr), UTC_ZONE, utc(after))
    return [t.strftime("%Y-%m-%d %H:%M %a") for t in islice(found, count)]


# --- syntax -------------------------------------------------------------------------


def test_plain_numbers_and_star() -> None:
    expr = parse_cron("  5 4 3 2 1  ")
    assert expr.text == "5 4 3 2 1"
    assert expr.fields == ("5", "4", "3", "2", "1")
    assert (bits(expr.minutes), bits(expr.hours), bits(expr.days)) == ([5], [4], [3])
    assert (bits(expr.months), bits(expr.weekdays)) == ([2], [1])
    star = parse_cron("* * * * *")
    assert bits(star.minutes) == list(range(60))
    assert bits(star.hours) == list(range(24))
    assert bits(star.days) == list(range(1, 32))
    assert bits(star.months) == list(range(1, 13))
    assert bits(star.weekdays) == list(range(7))


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("1,2,3", [1, 2, 3]),
        ("10-15", [10, 11, 12, 13, 14, 15]),
        ("*/15", [0, 15, 30, 45]),
        ("1-30/5", [1, 6, 11, 16, 21, 26]),
        ("5/10", [5, 15, 25, 35, 45, 55]),  # 5-59/10
        ("0-4,50-59/3,20", [0, 1, 2, 3, 4, 20, 50, 53, 56, 59]),
        ("7-7", [7]),
        ("59", [59]),
        ("*/59", [0, 59]),
    ],
)
def test_minute_lists_ranges_steps(field: str, expected: list[int]) -> None:
    assert bits(parse_cron(f"{field} * * * *").minutes) == expected


def test_steps_in_other_fields() -> None:
    assert bits(parse_cron("0 */6 * * *").hours) == [0, 6, 12, 18]
    assert bits(parse_cron("0 0 */10 * *").days) == [1, 11, 21, 31]
    assert bits(parse_cron("0 0 1 */4 *").months) == [1, 5, 9]
    assert bits(parse_cron("0 0 * * */2").weekdays) == [0, 2, 4, 6]
    assert bits(parse_cron("0 0 * * 1/2").weekdays) == [0, 1, 3, 5]  # 1-7/2: 7 is Sunday


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("jan", [1]),
        ("JAN,Mar,dec", [1, 3, 12]),
        ("feb-apr", [2, 3, 4]),
        ("Jan-Dec/3", [1, 4, 7, 10]),
        ("jun/2", [6, 8, 10, 12]),
        ("1-Mar", [1, 2, 3]),
    ],
)
def test_month_names(field: str, expected: list[int]) -> None:
    assert bits(parse_cron(f"0 0 1 {field} *").months) == expected


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("sun", [0]),
        ("MON-fri", [1, 2, 3, 4, 5]),
        ("sat,Sun", [0, 6]),
        ("0", [0]),
        ("7", [0]),  # Sunday as 7
        ("5-7", [0, 5, 6]),  # fri, sat, sun
        ("0-7", [0, 1, 2, 3, 4, 5, 6]),
        ("thu-7", [0, 4, 5, 6]),
    ],
)
def test_weekday_names_and_sunday(field: str, expected: list[int]) -> None:
    assert bits(parse_cron(f"0 0 * * {field}").weekdays) == expected


@pytest.mark.parametrize(
    ("macro", "fields"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
        ("@DAILY", "0 0 * * *"),
        ("  @Hourly ", "0 * * * *"),
    ],
)
def test_macros(macro: str, fields: str) -> None:
    expr = parse_cron(macro)
    assert expr.text == macro.strip()
    assert " ".join(expr.fields) == fields
    plain = parse_cron(fields)
    assert (expr.minutes, expr.hours, expr.days, expr.months, expr.weekdays) == (
        plain.minutes,
        plain.hours,
        plain.days,
        plain.months,
        plain.weekdays,
    )


@pytest.mark.parametrize(
    ("text", "wildcard"),
    [
        ("@hourly", True),
        ("@daily", False),
        ("@weekly", False),
        ("* 3 * * *", True),
        ("0 * * * *", True),
        ("*/15 2 * * *", True),
        ("0 */2 * * *", True),
        ("0,30 2 * * *", False),
        ("0-59 0-23 * * *", False),  # starts with a digit: fixed-time by cronie's rule
        ("30 2 * * 1-5", False),
    ],
)
def test_is_wildcard(text: str, wildcard: bool) -> None:
    assert parse_cron(text).is_wildcard is wildcard


def test_expr_is_frozen_and_hashable() -> None:
    expr = parse_cron("0 6 * * *")
    assert expr == parse_cron("0 6 * * *")
    assert hash(expr) == hash(parse_cron("0 6 * * *"))
    assert isinstance(expr, CronExpr)
    with pytest.raises(AttributeError):
        expr.text = "x"  # type: ignore[misc]


# --- errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("61 * * * *", "minute field: 61 is out of range 0-59"),
        ("* 24 * * *", "hour field: 24 is out of range 0-23"),
        ("* * 0 * *", "day-of-month field: 0 is out of range 1-31"),
        ("* * 32 * *", "day-of-month field: 32 is out of range 1-31"),
        ("* * * 13 *", "month field: 13 is out of range 1-12"),
        ("* * * * 8", "day-of-week field: 8 is out of range 0-7"),
        ("0 x * * *", "hour field: 'x' is not a number or name"),
        ("0 0 * mon *", "month field: 'mon' is not a number or name"),
        ("0 0 * * jan", "day-of-week field: 'jan' is not a number or name"),
        ("0 0 * * monday", "day-of-week field: 'monday' is not a number or name"),
        ("-1 * * * *", "minute field: '-1' is not a valid range"),
        ("1.5 * * * *", "minute field: '1.5' is not a number or name"),
        ("\u0661 * * * *", "minute field: '\u0661' is not a number or name"),  # Arabic-Indic 1
        ("* * * * */0", "day-of-week field: step 0 is not allowed"),
        ("*/0 * * * *", "minute field: step 0 is not allowed"),
        ("*/x * * * *", "minute field: step 'x' is not a number"),
        ("*/ * * * *", "minute field: missing step after '/'"),
        ("/5 * * * *", "minute field: missing value before '/' in '/5'"),
        ("*/60 * * * *", "minute field: step 60 is too large (at most 59)"),
        ("0 */24 * * *", "hour field: step 24 is too large (at most 23)"),
        ("0 0 1 5-3 *", "month field: range 5-3 is backwards"),
        ("0 0 * * fri-mon", "day-of-week field: range fri-mon is backwards"),
        ("0 0 * * 7-1", "day-of-week field: range 7-1 is backwards"),
        ("30-10 * * * *", "minute field: range 30-10 is backwards"),
        ("1,,2 * * * *", "minute field: empty item in list '1,,2'"),
        ("1, * * * *", "minute field: empty item in list '1,'"),
        ("1-2-3 * * * *", "minute field: '2-3' is not a number or name"),
    ],
)
def test_field_errors(text: str, message: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        parse_cron(text)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("text", "count"),
    [("1 2 3 4", 4), ("", 0), ("   ", 0), ("* * * * * * *", 7), ("*", 1)],
)
def test_wrong_field_count(text: str, count: int) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        parse_cron(text)
    expected = f"expected 5 fields (minute hour day-of-month month day-of-week), got {count}"
    assert str(caught.value) == expected


def test_seconds_field_is_rejected_with_a_hint() -> None:
    with pytest.raises(InvalidSchedule) as caught:
        parse_cron("0 0 6 * * *")
    assert str(caught.value) == (
        "expected 5 fields (minute hour day-of-month month day-of-week), got 6"
        " (a seconds field is not supported)"
    )


def test_reboot_is_rejected_clearly() -> None:
    for text in ("@reboot", "@REBOOT"):
        with pytest.raises(InvalidSchedule, match=r"^@reboot is not supported"):
            parse_cron(text)


def test_unknown_macro() -> None:
    with pytest.raises(
        InvalidSchedule, match=r"^unknown macro '@fortnightly' \(expected one of @yearly,"
    ):
        parse_cron("@fortnightly")
    with pytest.raises(InvalidSchedule, match=r"^unknown macro '@daily 5'"):
        parse_cron("@daily 5")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "L 0 * * *",
            "minute field: 'L': 'L' (last) is allowed only in day-of-month (L, L-3, LW) "
            "and day-of-week (5L, the last Friday)",
        ),
        (
            "0 0 * * 15W",
            "day-of-week field: '15W': 'W' (nearest weekday, e.g. 15W, LW) is allowed only "
            "in day-of-month",
        ),
        (
            "0 0 1#2 * *",
            "day-of-month field: '1#2': '#' (nth weekday, e.g. 1#2) is allowed only in day-of-week",
        ),
        (
            "0 0 * * L",
            "day-of-week field: 'L' alone in day-of-week is ambiguous: write 5L for the last "
            "Friday, or SAT",
        ),
        ("0 0 * * 1#6", "day-of-week field: '1#6': 6 is not a number from 1 to 5"),
        ("0 0 * * 1#", "day-of-week field: '1#': nothing is not a number from 1 to 5"),
        ("0 0 * * 8#1", "day-of-week field: 8 is out of range 0-7"),
        ("0 0 32W * *", "day-of-month field: '32W': 32 is not a number from 1 to 31"),
        ("0 0 L-31 * *", "day-of-month field: 'L-31': 31 is not a number from 1 to 30"),
        ("0 0 ? * 1", "day-of-month field: '?' uses '?', which is not supported (use '*')"),
        ("0 0 1 * ?", "day-of-week field: '?' uses '?', which is not supported (use '*')"),
        ("H(5) * * * *", "minute field: 'H(5)': write a hashed range as H(a-b), e.g. H(0-29)"),
        ("H(0-60) * * * *", "minute field: 60 is out of range 0-59"),
        ("H(9-3) * * * *", "minute field: range 9-3 is backwards"),
        ("Hx * * * *", "minute field: 'Hx' is not H, H(a-b), H/n or H(a-b)/n"),
        ("H/0 * * * *", "minute field: step 0 is not allowed"),
    ],
)
def test_extensions_misplaced_or_malformed_name_the_field(text: str, message: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        parse_cron(text, "sch-1")
    assert str(caught.value) == message


def test_names_containing_l_and_w_still_parse() -> None:
    assert bits(parse_cron("0 0 * jul *").months) == [7]
    assert bits(parse_cron("0 0 * * wed").weekdays) == [3]


def test_errors_are_invalid_schedule_with_code() -> None:
    with pytest.raises(InvalidSchedule) as caught:
        parse_cron("99 * * * *")
    assert caught.value.code == "invalid_schedule"
    assert caught.value.details["field"] == "minute"


# --- Vixie day-of-month / day-of-week rule -------------------------------------------
# 2027-03-01 is a Monday.


def test_both_restricted_means_either() -> None:
    # day 1 OR Friday
    assert fires("0 0 1 * 5", "2027-02-26 12:00", 4) == [
        "2027-03-01 00:00 Mon",
        "2027-03-05 00:00 Fri",
        "2027-03-12 00:00 Fri",
        "2027-03-19 00:00 Fri",
    ]


def test_star_day_of_week_means_day_of_month_only() -> None:
    assert fires("0 0 13 * *", "2027-03-01 00:00", 2) == [
        "2027-03-13 00:00 Sat",
        "2027-04-13 00:00 Tue",
    ]


def test_star_day_of_month_means_weekday_only() -> None:
    assert fires("0 0 * * mon", "2027-03-01 00:00", 2) == [
        "2027-03-08 00:00 Mon",
        "2027-03-15 00:00 Mon",
    ]


def test_star_step_day_of_month_means_both() -> None:
    # `*/2` starts with '*': odd days AND Mondays (1st, 15th, 29th of March 2027).
    assert fires("0 0 */2 * 1", "2027-02-28 00:00", 3) == [
        "2027-03-01 00:00 Mon",
        "2027-03-15 00:00 Mon",
        "2027-03-29 00:00 Mon",
    ]


def test_star_step_day_of_week_means_both() -> None:
    # day 13 AND (Sun, Tue, Thu, Sat): 2027-03-13 Sat, 2027-04-13 Tue, then 2027-05-13 Thu
    assert fires("0 0 13 * */2", "2027-03-01 00:00", 3) == [
        "2027-03-13 00:00 Sat",
        "2027-04-13 00:00 Tue",
        "2027-05-13 00:00 Thu",
    ]


def test_range_covering_all_days_is_not_a_star() -> None:
    # '1-31' does not start with '*', so the rule is OR: every day matches.
    assert fires("0 0 1-31 * 1", "2027-03-01 00:00", 2) == [
        "2027-03-02 00:00 Tue",
        "2027-03-03 00:00 Wed",
    ]


def test_sunday_as_0_and_7() -> None:
    zero = fires("0 12 * * 0", "2027-03-01 00:00", 3)
    assert (
        zero
        == fires("0 12 * * 7", "2027-03-01 00:00", 3)
        == fires("0 12 * * SUN", "2027-03-01 00:00", 3)
    )
    assert zero[0] == "2027-03-07 12:00 Sun"
    assert fires("0 0 * * 5-7", "2027-03-01 00:00", 3) == [
        "2027-03-05 00:00 Fri",
        "2027-03-06 00:00 Sat",
        "2027-03-07 00:00 Sun",
    ]


def test_leap_day() -> None:
    assert fires("0 0 29 2 *", "2027-01-01 00:00", 2) == [
        "2028-02-29 00:00 Tue",
        "2032-02-29 00:00 Sun",
    ]


def test_leap_day_on_a_weekday_across_a_skipped_leap_year() -> None:
    # Feb 29 AND Sunday ('*/7' is 0,7: Sunday, and starts with '*'): 2088, then 2128
    # because 2100 is not a leap year -- a 40-year gap the search must get across.
    assert fires("0 0 29 2 */7", "2060-03-01 00:00", 2) == [
        "2088-02-29 00:00 Sun",
        "2128-02-29 00:00 Sun",
    ]


# --- never fires ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0 0 30 2 *", "'0 0 30 2 *' never fires: day 30 does not occur in February"),
        (
            "0 0 31 4,6,9,11 *",
            "'0 0 31 4,6,9,11 *' never fires: "
            "day 31 does not occur in April, June, September or November",
        ),
        ("0 0 30,31 feb */2", "'0 0 30,31 feb */2' never fires: day 30 does not occur in February"),
    ],
)
def test_never_firing_expression(text: str, message: str) -> None:
    expr = parse_cron(text)  # syntactically fine
    with pytest.raises(InvalidSchedule) as caught:
        next_fire(expr, UTC_ZONE, utc("2027-01-01 00:00"))
    assert str(caught.value) == message
    with pytest.raises(InvalidSchedule):
        next(iter_fires(expr, UTC_ZONE, utc("2027-01-01 00:00")))


def test_day_30_in_february_or_a_weekday_does_fire() -> None:
    # Neither day field starts with '*', so it is "day 30 OR Monday" in February.
    assert fires("0 0 30 2 1", "2027-01-01 00:00", 1) == ["2027-02-01 00:00 Mon"]


def test_end_of_time() -> None:
    expr = parse_cron("0 0 1 1 *")
    with pytest.raises(InvalidSchedule, match="no fire time before year 10000"):
        next_fire(expr, UTC_ZONE, utc("9999-06-01 00:00"))
    assert list(iter_fires(expr, UTC_ZONE, utc("9998-06-01 00:00"))) == [utc("9999-01-01 00:00")]


def test_naive_after_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="aware"):
        next_fire(parse_cron("* * * * *"), UTC_ZONE, datetime(2027, 1, 1))


# --- describe -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("0 6 * * *", "at 06:00 every day"),
        ("*/15 * * * *", "every 15 minutes"),
        ("0 */2 * * 1-5", "at minute 0 past every 2nd hour on Monday through Friday"),
        ("* * * * *", "every minute"),
        ("@hourly", "at minute 0 past every hour"),
        ("@daily", "at 00:00 every day"),
        ("@weekly", "at 00:00 on Sunday"),
        ("@monthly", "at 00:00 on day 1 of the month"),
        ("@yearly", "at 00:00 on day 1 of the month in January"),
        ("30 2 * * 1-5", "at 02:30 on Monday through Friday"),
        ("0,30 9,17 * * *", "at 09:00, 09:30, 17:00 and 17:30 every day"),
        ("0,15,30,45 9-17 * * *", "at minutes 0, 15, 30 and 45 past hours 9 through 17 every day"),
        ("*/7 * * * *", "at every 7th minute from 0 through 59 past every hour"),
        ("5/10 * * * *", "at every 10th minute from 5 through 59 past every hour"),
        ("*/15 9-17 * * *", "every 15 minutes past hours 9 through 17 every day"),
        ("* 3 * * *", "every minute past hour 3 every day"),
        ("0 */5 * * *", "at minute 0 past every 5th hour from 0 through 23"),
        ("0-10 * * * *", "at minutes 0 through 10 past every hour"),
        ("0 0 1,15 * *", "at 00:00 on days 1 and 15 of the month"),
        ("0 0 */2 * *", "at 00:00 on every 2nd day of the month from 1 through 31"),
        ("0 0 1 * 5", "at 00:00 on day 1 of the month or on Friday"),
        ("0 0 */2 * 1", "at 00:00 on every 2nd day of the month from 1 through 31 if it is Monday"),
        (
            "0 0 13 * */2",
            "at 00:00 on day 13 of the month if it is Sunday, Tuesday, Thursday or Saturday",
        ),
        ("0 0 * * 5-7", "at 00:00 on Friday through Sunday"),
        ("0 0 * * 7", "at 00:00 on Sunday"),
        ("0 0 * * mon,wed,FRI", "at 00:00 on Monday, Wednesday and Friday"),
        ("0 0 1 * mon,fri", "at 00:00 on day 1 of the month or on Monday or Friday"),
        (
            "0 0 */2 * mon,fri",
            "at 00:00 on every 2nd day of the month from 1 through 31 if it is Monday or Friday",
        ),
        ("0 0 1 */3 *", "at 00:00 on day 1 of the month in January, April, July and October"),
        ("0 12 * jun-aug *", "at 12:00 every day in June through August"),
        ("0 12 * 12 *", "at 12:00 every day in December"),
    ],
)
def test_describe(text: str, words: str) -> None:
    assert describe(parse_cron(text)) == words


# --- load_zone ------------------------------------------------------------------------


def test_load_zone_ok() -> None:
    assert load_zone("Asia/Tokyo") == ZoneInfo("Asia/Tokyo")
    assert load_zone("UTC").key == "UTC"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("Asia/Tokio", "unknown time zone 'Asia/Tokio' (did you mean Asia/Tokyo?)"),
        ("asia/tokyo", "unknown time zone 'asia/tokyo' (did you mean Asia/Tokyo?)"),
        ("Europe/Londn", "unknown time zone 'Europe/Londn' (did you mean Europe/London?)"),
        ("Qwxz/Vbnm", "unknown time zone 'Qwxz/Vbnm'"),
        ("", "time zone name is empty"),
        ("   ", "time zone name is empty"),
        ("../etc/passwd", "invalid time zone name '../etc/passwd'"),
        ("/etc/localtime", "invalid time zone name '/etc/localtime'"),
        ("localtime", "time zone 'localtime' depends on the host; name an IANA zone"),
    ],
)
def test_load_zone_errors(name: str, message: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        load_zone(name)
    assert str(caught.value) == message
