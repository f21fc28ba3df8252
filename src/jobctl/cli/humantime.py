"""Human time in the CLI, one way everywhere: ``--at`` input, times and durations shown.

pendulum parses ``--at`` (ISO-8601 in all its forms: ``2027-03-14 06:00``,
``2027-03-14T06:00:00+09:00``, ``20270314T0600``, week dates such as ``2027-W11-7``) and
is imported only then.  The relative form ("in 5 minutes", "3 hours ago") and durations
in words ("2 hours 5 minutes") use pendulum's wording, rule for rule, computed here:
importing pendulum would add about a third to the start-up of ``list``, ``show`` and
``status``, whose target is 100 ms (figures in docs/dependencies.md).  A test compares
the two over a sweep of instants, so the words stay pendulum's.

The instant of a wall time is jobctl's rule, not pendulum's default: a wall time that a
fall-back change repeats is its first pass (as a fixed-time schedule fires), and one a
spring-forward gap skips moves forward by the gap (02:30 becomes 03:30 EDT); the answer
of ``jobctl add --at`` says so.  pendulum's own default would take the second pass.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta, tzinfo

from jobctl.errors import InvalidInput

#: ``YYYY-MM-DD HH:MM:SS ZONE``: the one format of a full time in every view.
FULL = "%Y-%m-%d %H:%M:%S %Z"


def wire(text: str) -> datetime:
    """An API time (``...Z`` or with an offset) as an aware datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def parse_at(text: str, zone: tzinfo, now: datetime | None = None) -> tuple[datetime, str]:
    """The UTC instant of ``--at`` and a note on a wall time DST moved (or "").

    Text with an offset is that instant; a wall time is read in ``zone``; a time alone
    (``06:00``) is the next time ``zone``'s clocks show it after ``now``, as at(1) reads
    it: today, or tomorrow once it has passed (a user typing ``--at 06:00`` at 07:00
    means tomorrow morning, not "at once").
    """
    import pendulum

    parsed: object = _next_wall_time(text, zone, now or datetime.now(UTC))  # CLI boundary
    if parsed is None:
        try:
            parsed = pendulum.parse(text.strip(), tz=None, exact=True)
        except (ValueError, pendulum.parsing.exceptions.ParserError):
            parsed = None
    if isinstance(parsed, date) and not isinstance(parsed, datetime):
        parsed = datetime(parsed.year, parsed.month, parsed.day)  # a date: its midnight
    if not isinstance(parsed, datetime):  # a duration, a time with an offset, or nothing
        raise InvalidInput(
            f"invalid time {text!r}: use ISO-8601, e.g. 2027-03-14T06:00:00+09:00 "
            "or 2027-03-14 06:00 (local time), or a time alone, 06:00 (the next one)"
        )
    naive = datetime(*parsed.timetuple()[:6], parsed.microsecond)
    if parsed.utcoffset() is not None:
        return _utc(naive.replace(tzinfo=parsed.tzinfo), text), ""
    local = naive.replace(tzinfo=zone, fold=0)
    return _utc(local, text), _dst_note(naive, local)


_TIME_ALONE = re.compile(r"([01]?\d|2[0-3]):([0-5]\d)(?::([0-5]\d))?")


def _next_wall_time(text: str, zone: tzinfo, now: datetime) -> datetime | None:
    """``HH:MM[:SS]`` alone: the naive wall time of its next instant in ``zone`` after
    ``now`` (None for any other text). A time in a DST gap today counts as passed once
    the gap's end has."""
    found = _TIME_ALONE.fullmatch(text.strip())
    if found is None:
        return None
    wall = time(int(found[1]), int(found[2]), int(found[3] or 0))
    today = now.astimezone(zone).date()
    for day in (today, today + timedelta(days=1)):
        naive = datetime.combine(day, wall)
        if naive.replace(tzinfo=zone, fold=0).astimezone(UTC) > now:
            return naive
    return datetime.combine(today + timedelta(days=2), wall)  # a zone that skipped a day


def since(text: str, now: datetime | None = None) -> str:
    """``--since`` of audit and ``dlq list``: an ISO (or local wall) time, or a duration
    meaning that long before ``now``; the ISO instant to ask for."""
    from jobctl.domain.durations import parse_duration, parse_when
    from jobctl.localzone import local_zone

    try:
        ago = parse_duration(text)
    except InvalidInput:
        try:
            return parse_when(text, local_zone()).isoformat()
        except InvalidInput as exc:
            raise InvalidInput(f"{exc}, or how long ago, e.g. 1h or 2d") from None
    try:
        return ((now or datetime.now(UTC)) - timedelta(seconds=ago)).isoformat()
    except OverflowError:  # before the year 1
        raise InvalidInput(
            f"--since {text}: too far back (the calendar starts in year 1)"
        ) from None


def _utc(moment: datetime, text: str) -> datetime:
    try:
        return moment.astimezone(UTC)
    except (OverflowError, ValueError):
        raise InvalidInput(
            f"invalid time {text!r}: out of range (years 1 to 9999 in UTC)"
        ) from None


def _dst_note(naive: datetime, local: datetime) -> str:
    """Why the instant of a wall time is not simply that wall time, if it is not."""
    back = local.astimezone(UTC).astimezone(local.tzinfo)
    if back.replace(tzinfo=None) != naive:
        return f"{naive:%H:%M} does not exist that day (DST gap): runs at {back:%H:%M %Z}"
    if local.replace(fold=1).utcoffset() != local.utcoffset():
        return f"{naive:%H:%M} happens twice that day (DST): runs at the first, {back:%H:%M %Z}"
    return ""


def relative(then: datetime, now: datetime) -> str:
    """``in 5 minutes``, ``3 hours ago``, ``now``: how far ``then`` is from ``now``.

    pendulum's wording (``diff_for_humans``, English), computed here without importing
    pendulum: ``list``, ``show`` and ``status`` must start in under 100 ms and pendulum's
    import alone costs a third of that budget (docs/dependencies.md).  A test holds the
    two equal over a sweep of instants, so the words are pendulum's.
    """
    seconds = (then - now).total_seconds()
    if abs(seconds) < 1:
        return "now"
    words = _diff_words(min(then, now), max(then, now))
    return f"in {words}" if seconds > 0 else f"{words} ago"


_UNITS = (("week", 604800), ("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1))


def _plural(count: int, unit: str) -> str:
    return f"{count} {unit}" + ("" if count == 1 else "s")


def _diff_words(early: datetime, late: datetime) -> str:
    """pendulum's DifferenceFormatter (absolute, English), rule for rule."""
    months, rest = _calendar_months(early, late)
    years, months = divmod(months, 12)
    whole = int(rest.total_seconds())
    weeks, whole = divmod(whole, 604800)
    days, whole = divmod(whole, 86400)
    hours, whole = divmod(whole, 3600)
    minutes, secs = divmod(whole, 60)
    in_days = weeks * 7 + days
    if years:
        return _plural(years + (months > 6), "year")
    if months == 11 and in_days > 15:
        return _plural(1, "year")
    if months:
        return _plural(months + (in_days >= 27), "month")
    if weeks:
        return _plural(weeks + (days > 3), "week")
    if days:
        return _plural(days + (hours >= 22), "day")
    if hours:
        return _plural(hours, "hour")
    if minutes:
        return _plural(minutes, "minute")
    return _plural(secs, "second") if 10 < secs < 60 else "a few seconds"


def _calendar_months(early: datetime, late: datetime) -> tuple[int, timedelta]:
    """Whole calendar months from ``early`` to ``late`` (UTC), and what is left over."""
    a, b = early.astimezone(UTC), late.astimezone(UTC)
    months = (b.year - a.year) * 12 + b.month - a.month
    while months > 0 and _add_months(a, months) > b:
        months -= 1
    return months, b - _add_months(a, months)


def _add_months(moment: datetime, months: int) -> datetime:
    import calendar

    year, month = divmod(moment.month - 1 + months, 12)
    year, month = moment.year + year, month + 1
    day = min(moment.day, calendar.monthrange(year, month)[1])
    return moment.replace(year=year, month=month, day=day)


def duration(seconds: float) -> str:
    """A duration in words, its two largest units: ``2 hours 5 minutes``, ``45 seconds``.

    pendulum's ``Duration.in_words`` (English) cut to two units, computed here for the
    start-up reason of :func:`relative` (a test holds the two equal).  Below a second,
    milliseconds (``250 ms``): a quick job's run time is worth seeing.
    """
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    whole, parts = round(seconds), []
    for unit, size in _UNITS:
        count, whole = divmod(whole, size)
        if count:
            parts.append(_plural(count, unit))
    return " ".join(parts[:2])


def full(text: str | None, zone: tzinfo, now: datetime) -> str:
    """A wire time as ``2027-03-14 06:00:00 JST (in 5 minutes)``; ``-`` for none."""
    if not text:
        return "-"
    moment = wire(text)
    return f"{moment.astimezone(zone).strftime(FULL)} ({relative(moment, now)})"


def short(text: str | None, zone: tzinfo, now: datetime) -> str:
    """For tables: the time alone when it is today in ``zone``, else the date and time,
    then the relative form: ``06:00:00 (in 5 minutes)``."""
    if not text:
        return "-"
    moment = wire(text)
    local = moment.astimezone(zone)
    today = local.date() == now.astimezone(zone).date()
    shown = f"{local:%H:%M:%S}" if today else f"{local:%Y-%m-%d %H:%M}"
    return f"{shown} ({relative(moment, now)})"
