"""Parsing and describing five-field cron expressions (Vixie/cronie dialect).

This module turns the text a user typed into a :class:`CronExpr`: bitmasks per field
plus the lookup tables :mod:`jobctl.domain.cron` needs to jump straight to the next
matching month, day, hour and minute.  It is pure: no clock, no I/O.

Why these rules:

* Day-of-month and day-of-week combine the way Vixie cron (and cronie, Debian cron,
  cronsim) combine them: if *either* field starts with ``*`` a day must match both,
  otherwise it must match either.  Users copy crontab lines between systems; a
  different rule would silently change when their jobs run.
* The extensions people copy from Quartz, Jenkins and cronsim are read:
  ``L``, ``L-n``, ``LW``, ``nW`` in day-of-month, ``d#n`` and ``dL`` in day-of-week,
  and hashed ``H``, ``H(a-b)``, ``H/n``, ``H(a-b)/n`` in any field
  (:mod:`jobctl.domain.cron_ext`).  A field that starts with ``*`` or ``H/`` is
  "star-like" for the day rule below and for the DST rules: ``H/15`` is ``*/15``
  shifted by a hashed offset.
* Everything cron-like that we do not implement (``@reboot``, a seconds field,
  Quartz's ``?``) is rejected with a message naming the field, instead of being
  half-understood.
* Every error says which field is wrong and why, because the message is what the user
  sees in the CLI and the API.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import date
from typing import Literal, NamedTuple

from jobctl.domain.cron_ext import DayRule, day_bits, hash_value
from jobctl.errors import InvalidSchedule

__all__ = ["CronExpr", "CronTerm", "has_hash", "parse_cron", "star_like"]

FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week")
MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
MONTH_WORDS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
DAY_WORDS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
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
#: The values ``H`` draws from when it names no range: day-of-month stops at 28 (as in
#: Jenkins) so that a hashed day occurs in every month.
_HASH_SPANS = ((0, 59), (0, 23), (1, 28), (1, 12), (0, 6))
SPECIAL_FORMS = frozenset({"last", "lastweekday", "nearest", "nth", "lastof"})


class CronTerm(NamedTuple):
    """One comma-separated item of a field, kept so :func:`describe` can word it.

    ``form`` is ``"*"`` for ``*`` and ``*/n``, ``"value"`` for ``a``, ``"range"`` for
    ``a-b`` and ``a-b/n``, ``"open"`` for ``a/n`` (which means ``a-max/n``).  Values
    are as written (day-of-week 7 stays 7 here; the bitmask folds it onto Sunday 0).
    An ``H`` item is stored as the value or range it resolved to, with ``hashed`` set.
    The extended day items have the forms of :class:`jobctl.domain.cron_ext.DayRule`
    (``lo`` and ``hi`` are its ``a`` and ``b``) and add no bits to the field's mask.
    """

    lo: int
    hi: int
    step: int
    form: Literal["*", "value", "range", "open", "last", "lastweekday", "nearest", "nth", "lastof"]
    hashed: bool = False


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
    seed: str | None = None  # what H fields were hashed from (None: no H)
    wildcard: bool = field(init=False, compare=False, repr=False)
    minute_next: tuple[int, ...] = field(init=False, compare=False, repr=False)
    hour_next: tuple[int, ...] = field(init=False, compare=False, repr=False)
    month_next: tuple[int, ...] = field(init=False, compare=False, repr=False)
    day_masks: tuple[int, ...] = field(init=False, compare=False, repr=False)
    never_reason: str | None = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "wildcard", star_like(self.fields[0]) or star_like(self.fields[1]))
        put(self, "minute_next", _next_table(self.minutes, 60))
        put(self, "hour_next", _next_table(self.hours, 24))
        put(self, "month_next", _next_table(self.months, 13))
        terms = self.terms or ((), (), (), (), ())
        both = self.dom_star or self.dow_star
        masks = _day_masks(self.days, self.weekdays, both, _rules(terms[2]), _rules(terms[4]))
        put(self, "day_masks", masks)
        put(self, "never_reason", _never_reason(self))

    @property
    def is_wildcard(self) -> bool:
        """True when the minute or hour field starts with ``*`` (cronie's DST rule).

        Wildcard schedules fire at every local time that exists (both passes of a
        repeated hour, nothing in a skipped one); fixed-time schedules fire once.
        """
        return self.wildcard

    def matches_day(self, year: int, month: int, day: int) -> bool:
        """Whether the date is one the day fields pick (both rules, all extensions)."""
        first = (date(year, month, 1).weekday() + 1) % 7
        return bool(self.day_masks[first * 4 + _month_length(year, month) - 28] >> day & 1)


def star_like(text: str) -> bool:
    """A field that starts with ``*``, or ``H/n`` (``*/n`` at a hashed offset)."""
    return text.startswith("*") or text[:2].upper() == "H/"


def _month_length(year: int, month: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return _MAX_DAYS[month]


def _rules(terms: tuple[CronTerm, ...]) -> tuple[DayRule, ...]:
    return tuple(
        DayRule(t.form, t.lo % 7 if t.form in ("nth", "lastof") else t.lo, t.hi)  # type: ignore[arg-type]
        for t in terms
        if t.form in SPECIAL_FORMS
    )


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
def _day_masks(
    days: int,
    weekdays: int,
    both: bool,
    dom_rules: tuple[DayRule, ...] = (),
    dow_rules: tuple[DayRule, ...] = (),
) -> tuple[int, ...]:
    """Matching days of a month, indexed by ``weekday_of_the_1st * 4 + (length - 28)``.

    A month's matching days depend only on its length and the weekday of its first
    day (the extended items ``L``, ``W``, ``#`` too), so 28 masks cover every month
    ever; the day search is then one shift.  Cached because most schedules share a
    handful of day fields.
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
            by_dom = days & _MONTH_BITS[length] | day_bits(dom_rules, first, length)
            by_weekday = by_dow & _MONTH_BITS[length] | day_bits(dow_rules, first, length)
            masks.append(by_dom & by_weekday if both else by_dom | by_weekday)
    return tuple(masks)


def _never_reason(expr: CronExpr) -> str | None:
    """Why ``expr`` can never fire, or None.

    Exact: a month's matching days depend only on its length and the weekday of its
    1st, and over the 400-year Gregorian cycle every allowed month occurs with every
    weekday for its 1st (February with both of its lengths), so the expression fires
    if and only if one of those day masks is not empty.
    """
    months = [m for m in range(1, 13) if expr.months >> m & 1]
    for month in months:
        for length in (28, 29) if month == 2 else (_MAX_DAYS[month],):
            if any(expr.day_masks[first * 4 + length - 28] for first in range(7)):
                return None
    names = join_words([MONTH_WORDS[m - 1] for m in months], "or")
    names = "any month" if len(months) == 12 else names
    plain = not any(_rules(t) for t in expr.terms)
    if plain and expr.days and (expr.dom_star or expr.dow_star):
        first_day = (expr.days & -expr.days).bit_length() - 1
        return f"'{expr.text}' never fires: day {first_day} does not occur in {names}"
    if expr.weekdays == 0x7F and not _rules(expr.terms[4]):
        return f"'{expr.text}' never fires: its day-of-month picks no day in {names}"
    return f"'{expr.text}' never fires: no day in {names} matches both day fields"


def parse_cron(text: str, seed: str | None = None) -> CronExpr:
    """Parse a five-field cron expression or macro; raise InvalidSchedule if invalid.

    ``seed`` is what ``H`` fields are hashed from: the schedule's id.  An expression
    with ``H`` and no seed is hashed from the empty string, which is right only for
    checking that it is valid (before the schedule has an id).  Results are cached by
    text (a CronExpr is immutable), because materializing many schedules parses the
    same few expressions over and over.
    """
    stripped = text.strip()
    return _parse_cached(stripped, (seed or "") if has_hash(stripped) else None)


@functools.lru_cache(maxsize=4096)
def has_hash(text: str) -> bool:
    """Whether any item starts with ``H`` (no name does; ``THU`` holds one inside)."""
    upper = text.upper()
    return "H" in upper and any(
        item[:1] == "H" for field in upper.split() for item in field.split(",")
    )


@functools.lru_cache(maxsize=4096)
def _parse_cached(stripped: str, seed: str | None) -> CronExpr:
    parts = _expand_macro(stripped).split()
    if len(parts) != 5:
        hint = " (a seconds field is not supported)" if len(parts) == 6 else ""
        raise InvalidSchedule(f"{_FIELDS_HINT}, got {len(parts)}{hint}", expression=stripped)
    masks: list[int] = []
    terms: list[tuple[CronTerm, ...]] = []
    for index, (spec, raw) in enumerate(zip(_SPECS, parts, strict=True)):
        mask, field_terms = _parse_field(spec, raw, _Hash(seed or "", index))
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
        dom_star=star_like(parts[2]),
        dow_star=star_like(parts[4]),
        terms=tuple(terms),
        seed=seed,
    )


class _Hash(NamedTuple):
    """Where an ``H`` item draws from: the seed and the field's position."""

    seed: str
    field: int


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


def _parse_field(spec: _Spec, raw: str, hashing: _Hash) -> tuple[int, tuple[CronTerm, ...]]:
    mask = 0
    terms = []
    for position, item in enumerate(raw.split(",")):
        if not item:
            raise _error(spec, f"empty item in list '{raw}'")
        if item[:1] in "Hh":
            term = _parse_hash(spec, item, hashing, position)
        else:
            term = _parse_special(spec, item) or _parse_term(spec, item)
        terms.append(term)
        if term.form not in SPECIAL_FORMS:
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
    raise _error(spec, _why_not_value(spec, token))


def _number(spec: _Spec, item: str, text: str, lo: int, hi: int) -> int:
    if not (text.isascii() and text.isdigit()) or not lo <= int(text) <= hi:
        raise _error(spec, f"'{item}': {text or 'nothing'} is not a number from {lo} to {hi}")
    return int(text)


def _parse_special(spec: _Spec, item: str) -> CronTerm | None:
    """An extended day item (``L``, ``L-3``, ``LW``, ``15W``; ``1#2``, ``5L``), or None."""
    upper = item.upper()
    if spec.name == "day-of-month":
        if upper == "L":
            return CronTerm(0, 0, 1, "last")
        if upper == "LW":
            return CronTerm(0, 0, 1, "lastweekday")
        if upper.startswith("L-"):
            return CronTerm(_number(spec, item, upper[2:], 1, 30), 0, 1, "last")
        if upper.endswith("W") and upper[:-1].isdigit():
            return CronTerm(_number(spec, item, upper[:-1], 1, 31), 0, 1, "nearest")
    elif spec.name == "day-of-week":
        if "#" in upper:
            base, _, nth = upper.partition("#")
            weekday = _parse_value(spec, base)
            return CronTerm(weekday, _number(spec, item, nth, 1, 5), 1, "nth")
        if len(upper) > 1 and upper.endswith("L") and "-" not in upper and "/" not in upper:
            return CronTerm(_parse_value(spec, upper[:-1]), 0, 1, "lastof")
    return None


def _parse_hash(spec: _Spec, item: str, hashing: _Hash, position: int) -> CronTerm:
    """``H``, ``H(a-b)``, ``H/n`` or ``H(a-b)/n``, resolved with the schedule's seed."""
    lo, hi = _HASH_SPANS[hashing.field]
    rest = item[1:]
    if rest.startswith("("):
        inner, close, rest = rest[1:].partition(")")
        first, dash, last = inner.partition("-")
        if not close or not (dash and first and last):
            raise _error(spec, f"'{item}': write a hashed range as H(a-b), e.g. H(0-29)")
        lo, hi = _parse_value(spec, first), _parse_value(spec, last)
        if hi < lo:
            raise _error(spec, f"range {inner} is backwards")
    step = 1
    if rest.startswith("/"):
        step = _parse_step(spec, rest[1:])
    elif rest:
        raise _error(spec, f"'{item}' is not H, H(a-b), H/n or H(a-b)/n")
    if step == 1:
        value = lo + hash_value(hashing.seed, hashing.field, position, hi - lo + 1)
        return CronTerm(value, value, 1, "value", hashed=True)
    start = lo + hash_value(hashing.seed, hashing.field, position, min(step, hi - lo + 1))
    return CronTerm(start, hi, step, "range", hashed=True)


def _why_not_value(spec: _Spec, token: str) -> str:
    """Name the extension a token uses, and where it is allowed, so Quartz users know why."""
    upper = token.upper()
    if "?" in upper:
        return f"'{token}' uses '?', which is not supported (use '*')"
    if "#" in upper:
        return f"'{token}': '#' (nth weekday, e.g. 1#2) is allowed only in day-of-week"
    if upper == "L" and spec.name == "day-of-week":
        return "'L' alone in day-of-week is ambiguous: write 5L for the last Friday, or SAT"
    if "L" in upper and upper.strip("L0123456789-") == "":
        return (
            f"'{token}': 'L' (last) is allowed only in day-of-month (L, L-3, LW) "
            "and day-of-week (5L, the last Friday)"
        )
    if "W" in upper and upper.strip("LW0123456789") == "":
        return f"'{token}': 'W' (nearest weekday, e.g. 15W, LW) is allowed only in day-of-month"
    return f"'{token}' is not a number or name"


def join_words(items: list[str], word: str) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + f" {word} " + items[-1]
