"""The cron syntax people copy from Quartz, Jenkins and cronsim: ``L``, ``W``, ``#`` and ``H``.

Pure and small: :mod:`jobctl.domain.cron_parse` reads the text and calls in here for
the extended items; :mod:`jobctl.domain.cron` never sees them, because each one is
folded into the per-month day masks the evaluator already uses.

Why that works: every extended day item (``L``, ``L-3``, ``LW``, ``15W``, ``1#2``,
``5L``) picks days that depend only on the month's length and the weekday of its 1st,
exactly the two things the evaluator's 28 day masks are indexed by.  So the search,
and with it the DST rules, stay as they are, and the new syntax costs nothing per
fire time.

``H`` (hashed, as in Jenkins) picks a value from a hash of the schedule's id, so many
schedules written ``H 3 * * *`` spread over the hour instead of starting together,
and each one keeps its own minute across restarts, edits and versions (SHA-256 of the
id, the field and the item's position, not Python's randomized ``hash()``).
"""

from __future__ import annotations

from typing import Literal, NamedTuple

__all__ = ["DayRule", "day_bits", "hash_value"]

DayKind = Literal["last", "lastweekday", "nearest", "nth", "lastof"]


class DayRule(NamedTuple):
    """One extended day item.

    ``last``: day ``length - a`` (``L`` is a=0, ``L-3`` a=3); ``lastweekday``: ``LW``;
    ``nearest``: ``aW``, the weekday (Mon-Fri) nearest day ``a`` within the month;
    ``nth``: ``a#b``, the ``b``-th weekday ``a`` (0 Sunday .. 6 Saturday);
    ``lastof``: ``aL``, the last weekday ``a`` of the month.
    """

    kind: DayKind
    a: int
    b: int = 0


def day_bits(rules: tuple[DayRule, ...], first: int, length: int) -> int:
    """The days (bit n = day n) the ``rules`` pick in a month whose 1st is weekday
    ``first`` (0 Sunday) and which has ``length`` days."""
    bits = 0
    for rule in rules:
        day = _day(rule, first, length)
        if day:
            bits |= 1 << day
    return bits


def _weekday(first: int, day: int) -> int:
    return (first + day - 1) % 7


def _day(rule: DayRule, first: int, length: int) -> int:
    """The day ``rule`` picks, or 0 when this month has none (``31W`` in April,
    a fifth Monday that does not exist, ``L-30`` in February)."""
    kind, a, b = rule
    if kind == "last":
        return max(length - a, 0)
    if kind == "lastweekday":
        weekday = _weekday(first, length)
        return length - (1 if weekday == 6 else 2 if weekday == 0 else 0)
    if kind == "nearest":
        return _nearest_weekday(a, first, length)
    if kind == "nth":
        day = 1 + (a - first) % 7 + 7 * (b - 1)
        return day if day <= length else 0
    return length - (_weekday(first, length) - a) % 7  # lastof


def _nearest_weekday(day: int, first: int, length: int) -> int:
    """Quartz's ``W``: a Saturday moves to Friday and a Sunday to Monday, but never out
    of the month (``1W`` on a Saturday is Monday the 3rd; ``31W`` on a Sunday is Friday
    the 29th).  A day the month does not have matches nothing, like a plain ``31``."""
    if day > length:
        return 0
    weekday = _weekday(first, day)
    if weekday == 6:  # Saturday
        return day - 1 if day > 1 else day + 2
    if weekday == 0:  # Sunday
        return day + 1 if day < length else day - 2
    return day


def hash_value(seed: str, field: int, item: int, span: int) -> int:
    """A stable number in ``[0, span)`` for item ``item`` of field ``field``.

    Each field and item draws its own number, so ``H H * * *`` spreads over all 1,440
    minutes of the day (croniter's ``crc32(id) >> field`` ties the hour to the minute
    and reaches only 240 of them; see docs/dependencies.md).
    """
    import hashlib  # only for expressions with H: start-up time of `jobctl next`

    digest = hashlib.sha256(f"{seed}\x00{field}\x00{item}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % span
