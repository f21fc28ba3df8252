"""A Chronos-style checker: what should have fired, computed without jobctl, against what ran.

Expected occurrences come from each schedule's definition and zone by a brute-force walk
over every UTC minute with :mod:`zoneinfo` and a small cron matcher of its own, applying
the contract of docs/schedules.md (cronie's DST rule) -- not jobctl's evaluator, so a bug
there cannot hide itself. They are joined with what ran by occurrence key (the nominal UTC
time): ``missed = expected - ran - recorded skips`` and ``duplicates = runs per key - 1``,
where a run is a distinct job that started for the key (the journal the commands write)
or exists for it in the store. A run at a time that was not expected is ``unexpected``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

MINUTE = timedelta(minutes=1)
NAMES = {
    3: "JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split(),
    4: "SUN MON TUE WED THU FRI SAT".split(),
}
BOUNDS = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def _value(text: str, index: int) -> int:
    names = NAMES.get(index)
    if names and text.upper() in names:
        return names.index(text.upper()) + (1 if index == 3 else 0)
    return int(text)


def _field(text: str, index: int) -> set[int]:
    lo, hi = BOUNDS[index]
    out: set[int] = set()
    for item in text.split(","):
        rng, _, step = item.partition("/")
        if rng == "*":
            a, b = lo, hi
        elif "-" in rng:
            a, b = (_value(x, index) for x in rng.split("-"))
        else:
            a = _value(rng, index)
            b = hi if step else a
        out.update(range(a, b + 1, int(step) if step else 1))
    if index == 4 and 7 in out:
        out.add(0)
    return out


@dataclass(frozen=True)
class Cron:
    fields: tuple[set[int], ...]
    wildcard: bool
    dom_star: bool
    dow_star: bool

    @classmethod
    def parse(cls, expr: str) -> Cron:
        parts = MACROS.get(expr.lower(), expr).split()
        fields = tuple(_field(p, i) for i, p in enumerate(parts))
        wildcard = parts[0].startswith("*") or parts[1].startswith("*")
        return cls(fields, wildcard, parts[2].startswith("*"), parts[4].startswith("*"))

    def matches(self, wall: datetime) -> bool:
        minute, hour, dom, month, dow = self.fields
        if wall.minute not in minute or wall.hour not in hour or wall.month not in month:
            return False
        on_dom, on_dow = wall.day in dom, (wall.isoweekday() % 7) in dow
        if self.dom_star or self.dow_star:
            return on_dom and on_dow
        return on_dom or on_dow


def cron_times(expr: str, zone: str, start: datetime, end: datetime) -> list[datetime]:
    """Fire instants in (start, end] by walking every UTC minute (cronie's DST rule)."""
    cron, tz = Cron.parse(expr), ZoneInfo(zone)
    t = start.astimezone(UTC).replace(second=0, microsecond=0) + MINUTE
    prev = (t - MINUTE).astimezone(tz).replace(tzinfo=None)
    out: list[datetime] = []
    while t <= end:
        local = t.astimezone(tz)
        wall = local.replace(tzinfo=None)
        fire = cron.matches(wall) and (cron.wildcard or local.fold == 0)
        if not cron.wildcard and wall - prev > MINUTE:  # a gap: skipped wall times
            skipped = prev + MINUTE
            while skipped < wall and not fire:
                fire = cron.matches(skipped)
                skipped += MINUTE
        if fire:
            out.append(t)
        prev = wall
        t += MINUTE
    return out


def interval_times(
    anchor: datetime, every: float, start: datetime, end: datetime
) -> list[datetime]:
    """anchor + n * every in (start, end], the anchor itself when it is after ``start``."""
    step = timedelta(seconds=every)
    n = max(0, int((start - anchor) / step))
    out = []
    t = anchor + n * step
    while t <= end:
        if t > start or (t == anchor and anchor >= start):
            out.append(t)
        t += step
    return out


def expected(schedule: dict[str, Any], start: datetime, end: datetime) -> list[datetime]:
    """The occurrences of ``schedule`` (its API representation) in (start, end]."""
    if schedule["cron"] is not None:
        return cron_times(schedule["cron"], schedule["tz"], start, end)
    return interval_times(parse_time(schedule["at"]), schedule["every"], start, end)


@dataclass
class Check:
    """The checker's figures, summed over schedules; ``missed`` and the rest must be 0."""

    expected: int = 0
    ran: int = 0
    skipped: int = 0
    missed: int = 0
    duplicates: int = 0
    unexpected: int = 0

    def add(self, other: Check) -> None:
        for name in vars(self):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def figures(self) -> dict[str, int]:
        return dict(vars(self))


def check_schedule(
    schedule: dict[str, Any],
    jobs: Iterable[dict[str, Any]],
    started: dict[str, set[int]],
    end: datetime,
) -> Check:
    """Join one schedule's expected occurrences in (created, end] with what ran.

    ``schedule`` is ``GET /v1/schedules/{id}`` (with its skip records), ``jobs`` the
    store's jobs and ``started`` the journal's distinct job ids per key.
    """
    start = parse_time(schedule["created_at"])
    want = {t for t in expected(schedule, start, end)}
    runs: dict[datetime, set[int]] = {}
    for job in jobs:
        if job["schedule_id"] == schedule["id"] and "@manual-" not in job["key"]:
            runs.setdefault(parse_time(job["scheduled_for"]), set()).add(job["id"])
    for key, ids in started.items():
        sid, _, when = key.partition("@")
        if sid == schedule["id"] and not when.startswith("manual-"):
            runs.setdefault(parse_time(when), set()).update(ids)
    runs = {t: ids for t, ids in runs.items() if t <= end}
    # The schedule's own counters, not its skip records (the detail shows only the latest
    # few): the drills read a schedule created in the window and paused at its end.
    skipped = schedule["misfire_skips"] + schedule["overlap_skips"] + schedule["pause_skips"]
    ran = len(want & runs.keys())
    return Check(
        expected=len(want),
        ran=ran,
        skipped=skipped,
        missed=len(want) - ran - skipped,
        duplicates=sum(len(ids) - 1 for ids in runs.values()),
        unexpected=len(runs.keys() - want),
    )
