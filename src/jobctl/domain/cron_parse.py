"""Parsing and describing five-field cron expressions (Vixie/cronie dialect).

This module turns the text a user typed into a :class:`CronExpr`: bitmasks per field
plus the lookup tables :mod:`jobctl.domain.cron` needs to jump straight to the next
matching month, day, hour and minute.  It is pure: no clock, no I/O.

Why these rules:

* Day-of-month and day-of-week combine the way Vixie cron (and cronie, Debian cron,
  cronsim) combine them: if *either* field starts with ``*`` a day must match both,
  otherwise it must match either.  Users copy crontab lines between systems; a
  different rule would silently change when their jobs run.
* Everything cron-like that we do not implement (``@reboot``, a seconds field,
  Quartz's ``L W # ?``) is rejected with a message naming the field, instead of being
  half-understood.
* Every error says which field is wrong and why, because the message is what the user
  sees in the CLI and the API.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from jobctl.errors import InvalidSchedule

__all__ = ["CronExpr", "CronTerm", "describe", "parse_cron"]

FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week")
MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_MONTH_WORDS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
_DAY_WORDS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
# The most days each month can have (February: 29, in leap years).
_MAX_DAYS = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_FIELDS_HINT = "expected 5 fields (minute hour day-of-month month day-of-week)"
# Bits 1..length set: the days of a month of that length.
_MONTH_BITS = {length: ((1 << (length + 1)) - 1) & ~1 for length in range(28, 32)}
_UNSUPPORTED_LW = r"\d*L|L\d*|\d*W|LW"  # compiled on use: re costs start-up time


class CronTerm(NamedTuple):
    """One comma-separated item of a field, kept so :func:`describe` can word it.

    ``form`` is ``"*"`` for ``*`` and ``*/n``, ``"value"`` for ``a``, ``"range"`` for
    ``a-b`` and ``a-b/n``, ``"open"`` for ``a/n`` (which means ``a-max/n``).  Values
    are as written (day-of-week 7 stays 7 here; the bitmask folds it onto Sunday 0).
    """

    lo: int
    hi: int
    step: int
    form: Literal["*", "value", "range", "open"]


class _Spec(NamedTuple):
    name: str
    lo: int
    hi: int
    names: tuple[str, ...]
    name_base: int  # value of names[0]


_SPECS = (
    _Spec("minute", 0, 59, (), 0),
    _Spec("hour", 0, 23, (), 0),
    _Spec("day-of-month", 1, 31, (), 1),
    _Spec("month", 1, 12, MONTH_NAMES, 1),
    _Spec("day-of-week", 0, 7, DAY_NAMES, 0),
)


@dataclass(frozen=True, slots=True)
class CronExpr:
    """A parsed cron expression.

    Fields are bitmasks (bit ``n`` set when value ``n`` matches; weekdays use bits 0-6
    with Sunday as 0).  The private tables are derived in ``__post_init__`` so that
    ``next_fire`` never has to scan: each one answers "the next matching value at or
    after ``i``" with one index.
    """

    text: str
    fields: tuple[str, str, str, str, str]
    minutes: int
    hours: int
    days: int
    months: int
    weekdays: int
    dom_star: bool
    dow_star: bool
    terms: tuple[tuple[CronTerm, ...], ...] = field(default=(), compare=False, repr=False)
    wildcard: bool = field(init=False, compare=False, repr=False)
    minute_next: tuple[int, ...] = field(init=False, compare=False, repr=False)
    hour_next: tuple[int, ...] = field(init=False, compare=False, repr=False)
    month_next: tuple[int, ...] = field(init=False, compare=False, repr=False)
    day_masks: tuple[int, ...] = field(init=False, compare=False, repr=False)
    never_reason: str | None = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "wildcard", self.fields[0].startswith("*") or self.fields[1].startswith("*"))
        put(self, "minute_next", _next_table(self.minutes, 60))
        put(self, "hour_next", _next_table(self.hours, 24))
        put(self, "month_next", _next_table(self.months, 13))
        put(self, "day_masks", _day_masks(self.days, self.weekdays, self.dom_star or self.dow_star))
        put(self, "never_reason", _never_reason(self))

    @property
    def is_wildcard(self) -> bool:
        """True when the minute or hour field starts with ``*`` (cronie's DST rule).

        Wildcard schedules fire at every local time that exists (both passes of a
        repeated hour, nothing in a skipped one); fixed-time schedules fire once.
        """
        return self.wildcard


@functools.lru_cache(maxsize=1024)
def _next_table(mask: int, size: int) -> tuple[int, ...]:
    """Entry ``i`` is the smallest matching value >= ``i``, or -1; one extra -1 entry
    lets callers ask about ``size`` itself (a carried-over minute 60 or hour 24)."""
    table = [-1] * (size + 1)
    nxt = -1
    for value in range(size - 1, -1, -1):
        if mask >> value & 1:
            nxt = value
        table[value] = nxt
    return tuple(table)


@functools.lru_cache(maxsize=1024)
def _day_masks(days: int, weekdays: int, both: bool) -> tuple[int, ...]:
    """Matching days of a month, indexed by ``weekday_of_the_1st * 4 + (length - 28)``.

    A month's matching days depend only on its length and the weekday of its first
    day, so 28 masks cover every month ever; the day search is then one shift.
    Cached because most schedules share a handful of day fields.
    """
    masks = []
    for first in range(7):
        # Bit r of `week` is set when day r+1 of the month (r < 7) matches by weekday;
        # the pattern repeats every 7 days, so copy it across days 1-35 (and 36-37).
        week = sum(1 << r for r in range(7) if weekdays >> ((first + r) % 7) & 1)
        by_dow = 0
        for repeat in range(6):
            by_dow |= week << (1 + 7 * repeat)
        for length in range(28, 32):
            by_dom = days & _MONTH_BITS[length]
            by_weekday = by_dow & _MONTH_BITS[length]
            masks.append(by_dom & by_weekday if both else by_dom | by_weekday)
    return tuple(masks)


def _never_reason(expr: CronExpr) -> str | None:
    """Why ``expr`` can never fire, or None.

    Only one shape is impossible: both day fields must match (one starts with ``*``)
    and no allowed month is long enough for the earliest allowed day.  Any valid
    calendar date falls on every weekday over the 400-year Gregorian cycle, and when
    either field may match alone some weekday of every month qualifies.
    """
    if not (expr.dom_star or expr.dow_star):
        return None
    first_day = (expr.days & -expr.days).bit_length() - 1
    months = [m for m in range(1, 13) if expr.months >> m & 1]
    if first_day <= max(_MAX_DAYS[m] for m in months):
        return None
    names = _join([_MONTH_WORDS[m - 1] for m in months], "or")
    return f"'{expr.text}' never fires: day {first_day} does not occur in {names}"


def parse_cron(text: str) -> CronExpr:
    """Parse a five-field cron expression or macro; raise InvalidSchedule if invalid.

    Results are cached by text (a CronExpr is immutable), because materializing many
    schedules parses the same few expressions over and over.
    """
    return _parse_cached(text.strip())


@functools.lru_cache(maxsize=4096)
def _parse_cached(stripped: str) -> CronExpr:
    parts = _expand_macro(stripped).split()
    if len(parts) != 5:
        hint = " (a seconds field is not supported)" if len(parts) == 6 else ""
        raise InvalidSchedule(f"{_FIELDS_HINT}, got {len(parts)}{hint}", expression=stripped)
    masks: list[int] = []
    terms: list[tuple[CronTerm, ...]] = []
    for spec, raw in zip(_SPECS, parts, strict=True):
        mask, field_terms = _parse_field(spec, raw)
        masks.append(mask)
        terms.append(field_terms)
    weekdays = (masks[4] | masks[4] >> 7) & 0x7F  # 7 is Sunday too
    return CronExpr(
        text=stripped,
        fields=(parts[0], parts[1], parts[2], parts[3], parts[4]),
        minutes=masks[0],
        hours=masks[1],
        days=masks[2],
        months=masks[3],
        weekdays=weekdays,
        dom_star=parts[2].startswith("*"),
        dow_star=parts[4].startswith("*"),
        terms=tuple(terms),
    )


def _expand_macro(text: str) -> str:
    if not text.startswith("@"):
        return text
    word = text.lower()
    if word in MACROS:
        return MACROS[word]
    if word == "@reboot":
        raise InvalidSchedule(
            "@reboot is not supported: jobctl schedules run at clock times, not at start-up",
            expression=text,
        )
    known = ", ".join(MACROS)
    raise InvalidSchedule(f"unknown macro '{text}' (expected one of {known})", expression=text)


def _error(spec: _Spec, reason: str) -> InvalidSchedule:
    return InvalidSchedule(f"{spec.name} field: {reason}", field=spec.name)


def _parse_field(spec: _Spec, raw: str) -> tuple[int, tuple[CronTerm, ...]]:
    mask = 0
    terms = []
    for item in raw.split(","):
        if not item:
            raise _error(spec, f"empty item in list '{raw}'")
        term = _parse_term(spec, item)
        terms.append(term)
        mask |= _term_mask(term.lo, term.hi, term.step)
    return mask, tuple(terms)


@functools.lru_cache(maxsize=1024)
def _term_mask(lo: int, hi: int, step: int) -> int:
    mask = 0
    for value in range(lo, hi + 1, step):
        mask |= 1 << value
    return mask


def _parse_term(spec: _Spec, item: str) -> CronTerm:
    base, slash, step_text = item.partition("/")
    step = _parse_step(spec, step_text) if slash else 1
    if base == "*":
        return CronTerm(spec.lo, spec.hi, step, "*")
    if not base:
        raise _error(spec, f"missing value before '/' in '{item}'")
    if "-" in base:
        first, _, last = base.partition("-")
        if not first or not last:
            raise _error(spec, f"'{base}' is not a valid range")
        lo, hi = _parse_value(spec, first), _parse_value(spec, last)
        if hi < lo:
            raise _error(spec, f"range {base} is backwards")
        return CronTerm(lo, hi, step, "range")
    value = _parse_value(spec, base)
    if slash:
        return CronTerm(value, spec.hi, step, "open")
    return CronTerm(value, value, 1, "value")


def _parse_step(spec: _Spec, text: str) -> int:
    if not text:
        raise _error(spec, "missing step after '/'")
    if not (text.isascii() and text.isdigit()):
        raise _error(spec, f"step '{text}' is not a number")
    step = int(text)
    if step == 0:
        raise _error(spec, "step 0 is not allowed")
    if step > spec.hi - spec.lo:
        raise _error(spec, f"step {text} is too large (at most {spec.hi - spec.lo})")
    return step


def _parse_value(spec: _Spec, token: str) -> int:
    if token.isascii() and token.isdigit():
        value = int(token)
        if not spec.lo <= value <= spec.hi:
            raise _error(spec, f"{token} is out of range {spec.lo}-{spec.hi}")
        return value
    upper = token.upper()
    if upper in spec.names:
        return spec.names.index(upper) + spec.name_base
    raise _error(spec, _why_not_value(token))


def _why_not_value(token: str) -> str:
    """Name the unsupported extension a token uses, so Quartz users know why."""
    upper = token.upper()
    if "?" in upper:
        return f"'{token}' uses '?', which is not supported (use '*')"
    if "#" in upper:
        return f"'{token}' uses '#' (nth weekday of the month), which is not supported"
    import re

    if re.fullmatch(_UNSUPPORTED_LW, upper):
        letter = "'L' (last)" if "L" in upper else "'W' (nearest weekday)"
        return f"'{token}' uses {letter}, which is not supported"
    return f"'{token}' is not a number or name"


# --- describe -----------------------------------------------------------------------


def describe(expr: CronExpr) -> str:
    """Say in plain English when ``expr`` fires (wall-clock times; zone not included).

    The wording follows the structure of the expression rather than trying to be
    clever, so it is always true: steps are spelled out with their range, and the
    day-of-month/day-of-week rule is stated as "if it is" (both) or "or" (either).
    """
    minute, hour, dom, month, dow = expr.terms or _terms_of(expr)
    parts = [_describe_time(minute, hour)]
    day = _describe_days(expr, dom, dow)
    if day:
        parts.append(day)
    elif not expr.fields[1].startswith("*"):
        parts.append("every day")
    if not _is_plain_star(month):
        parts.append("in " + _names_phrase(month, _MONTH_WORDS, 1))
    return " ".join(parts)


def _terms_of(expr: CronExpr) -> tuple[tuple[CronTerm, ...], ...]:
    return tuple(_parse_field(spec, raw)[1] for spec, raw in zip(_SPECS, expr.fields, strict=True))


def _is_plain_star(terms: tuple[CronTerm, ...]) -> bool:
    return len(terms) == 1 and terms[0].form == "*" and terms[0].step == 1


def _single_star_step(terms: tuple[CronTerm, ...]) -> int:
    """The ``n`` of a field that is exactly ``*/n``, else 0."""
    if len(terms) == 1 and terms[0].form == "*" and terms[0].step > 1:
        return terms[0].step
    return 0


def _values(terms: tuple[CronTerm, ...]) -> list[int] | None:
    """The values of a field made only of plain numbers, else None."""
    if all(t.form == "value" for t in terms):
        return sorted({t.lo for t in terms})
    return None


def _describe_time(minute: tuple[CronTerm, ...], hour: tuple[CronTerm, ...]) -> str:
    minutes, hours = _values(minute), _values(hour)
    if minutes is not None and hours is not None and len(minutes) * len(hours) <= 6:
        times = [f"{h:02d}:{m:02d}" for h in hours for m in minutes]
        return "at " + _join(times, "and")
    step = _single_star_step(minute)
    if _is_plain_star(minute):
        minute_text = "every minute"
    elif step and 60 % step == 0:
        minute_text = f"every {step} minutes"
    else:
        minute_text = "at " + _numbers_phrase(minute, "minute", "minutes", "")
    if _is_plain_star(hour):
        if _is_plain_star(minute) or (step and 60 % step == 0):
            return minute_text
        return minute_text + " past every hour"
    hour_step = _single_star_step(hour)
    if hour_step and 24 % hour_step == 0:
        return f"{minute_text} past every {_ordinal(hour_step)} hour"
    return f"{minute_text} past " + _numbers_phrase(hour, "hour", "hours", "")


def _describe_days(expr: CronExpr, dom: tuple[CronTerm, ...], dow: tuple[CronTerm, ...]) -> str:
    dom_any, dow_any = _is_plain_star(dom), _is_plain_star(dow)
    dom_text = _numbers_phrase(dom, "day", "days", " of the month")
    if dom_any and dow_any:
        return ""
    if dom_any:
        return "on " + _names_phrase(dow, _DAY_WORDS, 0)
    if dow_any:
        return "on " + dom_text
    if expr.dom_star or expr.dow_star:  # Vixie: both must match
        return f"on {dom_text} if it is {_names_phrase(dow, _DAY_WORDS, 0, 'or')}"
    return f"on {dom_text} or on {_names_phrase(dow, _DAY_WORDS, 0, 'or')}"


def _numbers_phrase(terms: tuple[CronTerm, ...], unit: str, units: str, suffix: str) -> str:
    """Word a numeric field: "minutes 0 and 30", "every 5th hour from 1 through 23"."""
    values = [t.lo for t in terms if t.form == "value"]
    phrases = []
    if values:
        noun = unit if len(values) == 1 else units
        phrases.append(f"{noun} {_join([str(v) for v in values], 'and')}{suffix}")
    for t in terms:
        if t.form == "value":
            continue
        if t.step == 1:
            phrases.append(
                f"every {unit}{suffix}"
                if t.form == "*"
                else f"{units} {t.lo} through {t.hi}{suffix}"
            )
        else:
            phrases.append(f"every {_ordinal(t.step)} {unit}{suffix} from {t.lo} through {t.hi}")
    return _join(phrases, "and")


def _names_phrase(
    terms: tuple[CronTerm, ...], words: tuple[str, ...], base: int, word: str = "and"
) -> str:
    """Word a month or weekday field with names; steps are listed day by day."""
    phrases = []
    for t in terms:
        if t.form == "value":
            phrases.append(words[(t.lo - base) % len(words)])
        elif t.step == 1 and t.form != "*":
            phrases.append(
                f"{words[(t.lo - base) % len(words)]} through {words[(t.hi - base) % len(words)]}"
            )
        else:
            picked = sorted({(v - base) % len(words) for v in range(t.lo, t.hi + 1, t.step)})
            phrases.append(_join([words[i] for i in picked], word))
    return _join(phrases, word)


def _ordinal(n: int) -> str:
    suffix = "th" if 11 <= n % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _join(items: list[str], word: str) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + f" {word} " + items[-1]
