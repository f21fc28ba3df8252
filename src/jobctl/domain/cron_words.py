"""Saying in words when a cron expression fires (``jobctl next``, ``schedules show``).

The wording follows the structure of the expression rather than trying to be clever,
so it is always true.  Extended items get their own phrases ("the last day of the
month", "the second Monday of the month", "the weekday nearest day 15"), and hashed
``H`` items are worded as the values they resolved to, with a note saying so.
"""

from __future__ import annotations

from jobctl.domain.cron_parse import (
    DAY_WORDS,
    MONTH_WORDS,
    SPECIAL_FORMS,
    CronExpr,
    CronTerm,
    join_words,
)

__all__ = ["describe"]


def describe(expr: CronExpr) -> str:
    """Say in plain English when ``expr`` fires (wall-clock times; zone not included).

    The wording follows the structure of the expression rather than trying to be
    clever, so it is always true: steps are spelled out with their range, and the
    day-of-month/day-of-week rule is stated as "if it is" (both) or "or" (either).
    """
    minute, hour, dom, month, dow = expr.terms
    parts = [_describe_time(minute, hour)]
    day = _describe_days(expr, dom, dow)
    if day:
        parts.append(day)
    elif not expr.fields[1].startswith("*"):
        parts.append("every day")
    if not _is_plain_star(month):
        parts.append("in " + _names_phrase(month, MONTH_WORDS, 1))
    if expr.seed is not None:
        parts.append(
            f"(H hashed from {expr.seed!r})" if expr.seed else "(H: the values vary per schedule)"
        )
    return " ".join(parts)


_NTH = ("", "first", "second", "third", "fourth", "fifth")


def _special_phrase(t: CronTerm) -> str:
    """Words for one extended day item (see :class:`jobctl.domain.cron_ext.DayRule`)."""
    if t.form == "last":
        if not t.lo:
            return "the last day of the month"
        return f"the {_ordinal(t.lo + 1)}-to-last day of the month"
    if t.form == "lastweekday":
        return "the last weekday of the month"
    if t.form == "nearest":
        return f"the weekday nearest day {t.lo} of the month"
    if t.form == "nth":
        return f"the {_NTH[t.hi]} {DAY_WORDS[t.lo % 7]} of the month"
    return f"the last {DAY_WORDS[t.lo % 7]} of the month"


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
        return "at " + join_words(times, "and")
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
        return "on " + _names_phrase(dow, DAY_WORDS, 0)
    if dow_any:
        return "on " + dom_text
    if expr.dom_star or expr.dow_star:  # Vixie: both must match
        return f"on {dom_text} if it is {_names_phrase(dow, DAY_WORDS, 0, 'or')}"
    return f"on {dom_text} or on {_names_phrase(dow, DAY_WORDS, 0, 'or')}"


def _numbers_phrase(terms: tuple[CronTerm, ...], unit: str, units: str, suffix: str) -> str:
    """Word a numeric field: "minutes 0 and 30", "every 5th hour from 1 through 23"."""
    values = [t.lo for t in terms if t.form == "value"]
    phrases = []
    if values:
        noun = unit if len(values) == 1 else units
        phrases.append(f"{noun} {join_words([str(v) for v in values], 'and')}{suffix}")
    for t in terms:
        if t.form == "value":
            continue
        if t.form in SPECIAL_FORMS:
            phrases.append(_special_phrase(t))
            continue
        if t.step == 1:
            phrases.append(
                f"every {unit}{suffix}"
                if t.form == "*"
                else f"{units} {t.lo} through {t.hi}{suffix}"
            )
        else:
            phrases.append(f"every {_ordinal(t.step)} {unit}{suffix} from {t.lo} through {t.hi}")
    return join_words(phrases, "and")


def _names_phrase(
    terms: tuple[CronTerm, ...], words: tuple[str, ...], base: int, word: str = "and"
) -> str:
    """Word a month or weekday field with names; steps are listed day by day."""
    phrases = []
    for t in terms:
        if t.form in SPECIAL_FORMS:
            phrases.append(_special_phrase(t))
        elif t.form == "value":
            phrases.append(words[(t.lo - base) % len(words)])
        elif t.step == 1 and t.form != "*":
            phrases.append(
                f"{words[(t.lo - base) % len(words)]} through {words[(t.hi - base) % len(words)]}"
            )
        else:
            picked = sorted({(v - base) % len(words) for v in range(t.lo, t.hi + 1, t.step)})
            phrases.append(join_words([words[i] for i in picked], word))
    return join_words(phrases, word)


def _ordinal(n: int) -> str:
    suffix = "th" if 11 <= n % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
