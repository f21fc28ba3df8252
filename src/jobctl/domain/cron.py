"""When does a cron schedule fire next?  Pure evaluation with exact DST rules.

The caller always passes the instant to search after (``after``); nothing here reads
the clock or does I/O beyond :mod:`zoneinfo` loading zone data.

The search runs on local wall time, jumping field by field (next matching month, day,
hour, minute) through precomputed tables, and only then maps the wall time to UTC.
That mapping is where DST lives.  The rules are cronie's, written down once:

A schedule is *wildcard* when its minute or hour field starts with ``*``; every other
schedule is *fixed-time*.

* **Skipped wall time** (spring forward gap).  A fixed-time occurrence whose wall time
  does not exist runs once, at the first instant after the gap.  Several such
  occurrences in one gap, and a real occurrence exactly at the gap's end, collapse
  into that one run.  Wildcard schedules only fire at wall times that exist.
* **Repeated wall time** (fall back fold).  A fixed-time schedule fires once, at the
  first of the two instants.  A wildcard schedule fires at both, in order.

Why: a daily 02:30 backup must run on the day the clocks skip 02:30 and must not run
twice on the day 01:30 happens twice, while an every-15-minutes job should keep its
cadence in real time.  APScheduler, Celery beat, systemd timers and Kubernetes
CronJobs have all shipped bugs on exactly these edges.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from jobctl.domain.cron_parse import CronExpr, parse_cron
from jobctl.domain.cron_words import describe
from jobctl.errors import InvalidSchedule

__all__ = ["CronExpr", "describe", "iter_fires", "load_zone", "next_fire", "parse_cron"]

_UTC = UTC
_EPOCH = datetime(1970, 1, 1, tzinfo=_UTC)
_EPOCH_NAIVE = datetime(1970, 1, 1)
_EPOCH_ORDINAL = _EPOCH_NAIVE.toordinal()
_SECOND = timedelta(seconds=1)
_MONTH_DAYS = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_MAX_YEAR = 9999
# A satisfiable expression (see CronExpr.never_reason) fires at least every 40 years
# (February 29 on one weekday, across a skipped century leap year).  The search gives
# up after a full 400-year Gregorian cycle, which can only happen through a bug.
_SEARCH_YEARS = 400

Wall = tuple[int, int, int, int, int]  # year, month, day, hour, minute (local, naive)


def next_fire(expr: CronExpr, tz: ZoneInfo, after: datetime) -> datetime:
    """The first instant strictly after ``after`` at which ``expr`` fires in ``tz``.

    ``after`` must be aware (any zone); the result is an aware UTC datetime with
    whole seconds.  Raises InvalidSchedule when ``expr`` can never fire, or has no
    fire time before the end of year 9999.
    """
    found = _next_instant(expr, tz, after)
    if found is None:
        raise InvalidSchedule(f"'{expr.text}' has no fire time before year {_MAX_YEAR + 1}")
    return _EPOCH + timedelta(seconds=found)


def iter_fires(expr: CronExpr, tz: ZoneInfo, after: datetime) -> Iterator[datetime]:
    """Successive fire instants after ``after`` (UTC); ends only at year 9999."""
    current = after
    while True:
        found = _next_instant(expr, tz, current)
        if found is None:
            return
        current = _EPOCH + timedelta(seconds=found)
        yield current


def _next_instant(expr: CronExpr, tz: ZoneInfo, after: datetime) -> int | None:
    """Epoch second of the next fire, or None past year 9999.

    Fire instants are whole seconds, so "strictly after ``after``" is "greater than
    the floor of ``after`` in epoch seconds".  The forward search starts at the wall
    minute after ``after``'s own wall time; the only fires that can sit at an earlier
    wall time are second-pass instants of a fold ``after`` is in the first pass of.
    """
    if expr.never_reason is not None:
        raise InvalidSchedule(expr.never_reason, expression=expr.text)
    if after.tzinfo is None:
        raise ValueError("next_fire needs an aware datetime for 'after'")
    # timestamp() is exact for whole seconds; the timedelta floor is exact always.
    floor = int(after.timestamp()) if not after.microsecond else (after - _EPOCH) // _SECOND
    local = after.astimezone(tz)
    start = (local.year, local.month, local.day, local.hour, local.minute + 1)
    found = _forward(expr, tz, floor, start)
    if expr.wildcard and local.fold == 0 and _ambiguous(local, tz):
        second = _second_pass(expr, tz, floor, local)
        if second is not None and (found is None or second < found):
            return second
    return found


def _ambiguous(local: datetime, tz: ZoneInfo) -> bool:
    """Whether the wall time of ``local`` occurs twice (it is inside a fold)."""
    twin = datetime(
        local.year, local.month, local.day, local.hour, local.minute, local.second, fold=1
    )
    return tz.utcoffset(twin) != local.utcoffset()


def _forward(expr: CronExpr, tz: ZoneInfo, floor: int, start: Wall) -> int | None:
    """The first fire after ``floor`` among wall times at or after ``start``.

    Walls come in order; each maps to at most one usable instant given ``floor``
    (the first pass of a fold precedes the second, a gap maps to its end), and later
    walls never map to earlier instants once we are past ``floor``'s own wall.
    """
    wall: Wall | None = start
    limit = min(start[0] + _SEARCH_YEARS, _MAX_YEAR)
    while wall is not None:
        wall = _next_wall(expr, wall, limit)
        if wall is None:
            break
        instant = _instant_for(expr, tz, wall, floor)
        if instant is not None:
            return instant
        wall = _resume_after(tz, wall)
    if limit < _MAX_YEAR:
        raise InvalidSchedule(f"'{expr.text}' does not fire within {_SEARCH_YEARS} years")
    return None


def _instant_for(expr: CronExpr, tz: ZoneInfo, wall: Wall, floor: int) -> int | None:
    """Map one matching wall time to its fire instant after ``floor``, if any."""
    year, month, day, hour, minute = wall
    naive = datetime(year, month, day, hour, minute)
    before = _seconds(tz.utcoffset(naive))  # the offset before a transition (fold=0)
    after = _seconds(tz.utcoffset(datetime(year, month, day, hour, minute, fold=1)))
    wall_seconds = (naive.toordinal() - _EPOCH_ORDINAL) * 86400 + hour * 3600 + minute * 60
    first = wall_seconds - before
    if before == after:  # the wall time exists once
        return first if first > floor else None
    if before > after:  # repeated: first pass at `first`, second pass at `second`
        if first > floor:
            return first
        second = wall_seconds - after
        return second if expr.wildcard and second > floor else None
    if expr.wildcard:  # skipped: wildcard schedules only fire at times that exist
        return None
    gap_end = _transition(tz, wall_seconds - after, first)
    return gap_end if gap_end > floor else None


def _resume_after(tz: ZoneInfo, wall: Wall) -> Wall:
    """Where to continue after a matching wall time that did not fire.

    Normally the next minute; inside a gap, the gap's end, so that a wildcard
    schedule does not step through a skipped hour (or a skipped day) minute by minute.
    """
    year, month, day, hour, minute = wall
    local = datetime(year, month, day, hour, minute, tzinfo=tz)
    before = _seconds(local.utcoffset())
    after = _seconds(local.replace(fold=1).utcoffset())
    if before >= after:
        return year, month, day, hour, minute + 1
    wall_seconds = int((local.replace(tzinfo=None) - _EPOCH_NAIVE) // _SECOND)
    gap_end = _transition(tz, wall_seconds - after, wall_seconds - before) + after
    end = _EPOCH_NAIVE + timedelta(seconds=-(-gap_end // 60) * 60)
    return end.year, end.month, end.day, end.hour, end.minute


def _second_pass(expr: CronExpr, tz: ZoneInfo, floor: int, local: datetime) -> int | None:
    """For ``after`` in the first pass of a fold: the first second-pass fire.

    Every second-pass instant comes after every first-pass instant, so this only
    wins when no first-pass wall time after ``after`` matches; the caller takes the
    smaller of the two.
    """
    before = _seconds(local.utcoffset())
    after = _seconds(local.replace(fold=1).utcoffset())
    change = _transition(tz, floor, floor + before - after)
    fold_start = change + after  # wall seconds where the second pass begins
    fold_end = change + before
    first_minute = -(-fold_start // 60) * 60
    begin = _EPOCH_NAIVE + timedelta(seconds=first_minute)
    start = (begin.year, begin.month, begin.day, begin.hour, begin.minute)
    wall = _next_wall(expr, start, min(begin.year + 1, _MAX_YEAR))
    if wall is None:
        return None
    year, month, day, hour, minute = wall
    wall_seconds = int((datetime(year, month, day, hour, minute) - _EPOCH_NAIVE) // _SECOND)
    if wall_seconds >= fold_end:
        return None
    return wall_seconds - after


def _transition(tz: ZoneInfo, lo: int, hi: int) -> int:
    """The first epoch second in ``(lo, hi]`` whose UTC offset differs from ``lo``'s.

    zoneinfo does not expose its transition table, so bisect on offsets; this only
    runs at the rare DST boundaries, and ``hi - lo`` is at most a gap or fold wide.
    """
    base = _offset_at(tz, lo)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _offset_at(tz, mid) == base:
            lo = mid
        else:
            hi = mid
    return hi


def _offset_at(tz: ZoneInfo, epoch_second: int) -> int:
    return _seconds((_EPOCH + timedelta(seconds=epoch_second)).astimezone(tz).utcoffset())


def _seconds(offset: timedelta | None) -> int:
    assert offset is not None  # ZoneInfo always knows the offset of an aware datetime
    return offset.days * 86400 + offset.seconds


def _next_wall(expr: CronExpr, wall: Wall, limit: int) -> Wall | None:
    """The first wall time at or after ``wall`` that matches ``expr``, or None.

    ``wall`` may carry over (minute 60, hour 24, a day past the month's end); the
    tables map those to "none in this unit", which moves the search up one unit.
    Returns None once the year passes ``limit``.
    """
    year, month, day, hour, minute = wall
    month_next, hour_next, minute_next = expr.month_next, expr.hour_next, expr.minute_next
    day_masks = expr.day_masks
    while True:
        found = month_next[month]
        if found != month:
            if found < 0:
                year += 1
                found = month_next[1]
            if year > limit:
                return None
            month, day, hour, minute = found, 1, 0, 0
        first_weekday = (date(year, month, 1).weekday() + 1) % 7
        length = _MONTH_DAYS[month]
        if month == 2 and year % 4 == 0 and (year % 100 != 0 or year % 400 == 0):
            length = 29
        days = day_masks[first_weekday * 4 + length - 28] >> day
        if not days:
            month, day, hour, minute = month + 1, 1, 0, 0
            continue
        if not days & 1:
            day += (days & -days).bit_length() - 1
            hour = minute = 0
        found = hour_next[hour]
        if found < 0:
            day, hour, minute = day + 1, 0, 0
            continue
        if found != hour:
            hour, minute = found, 0
        found = minute_next[minute]
        if found < 0:
            hour, minute = hour + 1, 0
            continue
        return year, month, day, hour, found


# --- time zones ----------------------------------------------------------------------


def load_zone(name: str) -> ZoneInfo:
    """Load an IANA time zone, or raise InvalidSchedule with a did-you-mean hint.

    ``localtime`` is refused: it names whatever zone the host is set to, so the same
    schedule would fire at different instants on different machines.
    """
    if not isinstance(name, str) or not name.strip():
        raise InvalidSchedule("time zone name is empty")
    if name == "localtime":
        raise InvalidSchedule("time zone 'localtime' depends on the host; name an IANA zone")
    try:
        return ZoneInfo(name)
    except ZoneInfoNotFoundError:
        pass
    except (ValueError, OSError):
        raise InvalidSchedule(f"invalid time zone name {name!r}") from None
    guess = _closest_zone(name)
    hint = f" (did you mean {guess}?)" if guess else ""
    raise InvalidSchedule(f"unknown time zone '{name}'{hint}", zone=name)


def _closest_zone(name: str) -> str | None:
    import difflib  # only for a mistyped zone; it costs start-up time (jobctl next)

    zones = _zone_names()
    by_lower = {zone.lower(): zone for zone in zones}
    if name.strip().lower() in by_lower:
        return by_lower[name.strip().lower()]
    matches = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[matches[0]] if matches else None


@functools.cache
def _zone_names() -> frozenset[str]:
    """All zone keys; scanning the zone database takes ~0.1 s, so do it once."""
    return frozenset(available_timezones() - {"localtime"})
