"""Schedules: when they fire, and what to do when the materializer gets to them. Pure.

A schedule is a definition (cron expression or fixed interval, a zone, policies and a job
template), never a pile of future rows. The materializer asks :func:`plan` what to do
with the occurrences that have come due and the store applies that plan in the same
transaction that advances the schedule (see ``docs/schedules.md``).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from jobctl.domain.cron import load_zone, next_fire, parse_cron
from jobctl.domain.cron_parse import has_hash
from jobctl.domain.limits import MAX_EVERY, MIN_EVERY
from jobctl.domain.models import JobTemplate
from jobctl.domain.policies import Misfire, Overlap
from jobctl.errors import InvalidInput, InvalidSchedule

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

#: An occurrence more than this far in the past when the materializer reaches it was
#: missed (the daemon was down or the host asleep) and the misfire policy decides.
MISFIRE_GRACE = timedelta(seconds=60)
#: How many occurrences one plan enumerates at most; a longer backlog continues next pass.
MAX_ENUMERATED = 100_000
#: Bound of the memo of cron fire times (see :func:`_next_cron`): ~350 bytes an entry.
FIRE_CACHE_SIZE = 16_384


@dataclass(frozen=True, slots=True)
class Timing:
    """When a schedule fires: a cron expression in a zone, or every N seconds from an anchor.

    ``seed`` is the schedule id that ``H`` fields of ``cron`` are hashed from (see
    :func:`hash_seed`); None for a timing without ``H``, and for one not yet stored,
    which is then only checked for validity.
    """

    tz: str
    cron: str | None = None
    every: float | None = None
    anchor: datetime | None = None
    seed: str | None = None

    def __post_init__(self) -> None:
        if (self.cron is None) == (self.every is None):
            raise InvalidSchedule("a schedule needs exactly one of cron or every")
        if self.every is not None:
            if not MIN_EVERY <= self.every <= MAX_EVERY:
                raise InvalidSchedule(
                    f"every must be at least {MIN_EVERY:.0f}s and at most {MAX_EVERY:.0f}s"
                )
            if self.anchor is None:
                raise InvalidSchedule("an interval schedule needs an anchor time")
        else:
            parse_cron(self.cron or "", self.seed)
        _zone(self.tz)

    @classmethod
    def unchecked(
        cls,
        tz: str,
        cron: str | None,
        every: float | None,
        anchor: datetime | None,
        seed: str | None = None,
    ) -> Timing:
        """A stored timing that no longer validates (its zone left tzdata), for showing
        it: the schedule is listed, and the materializer marks it broken."""
        timing = object.__new__(cls)
        values = (("tz", tz), ("cron", cron), ("every", every), ("anchor", anchor))
        for name, value in (*values, ("seed", seed)):
            object.__setattr__(timing, name, value)
        return timing

    def seeded(self, schedule_id: str) -> Timing:
        """This timing as the schedule ``schedule_id`` fires it (its ``H`` fields hashed)."""
        seed = hash_seed(self.cron, schedule_id)
        return self if seed == self.seed else replace(self, seed=seed)

    def next_after(self, after: datetime) -> datetime:
        """The first nominal fire time strictly after ``after`` (UTC)."""
        if self.every is not None:
            assert self.anchor is not None
            if after < self.anchor:
                return self.anchor
            step = timedelta(seconds=self.every)
            n = int((after - self.anchor) / step) + 1
            t = self.anchor + n * step
            return t if t > after else t + step
        return _next_cron(self.cron or "", self.tz, after, self.seed)

    def fires(self, after: datetime, count: int) -> list[datetime]:
        out: list[datetime] = []
        t = after
        for _ in range(count):
            t = self.next_after(t)
            out.append(t)
        return out


def hash_seed(cron: str | None, schedule_id: str) -> str | None:
    """The seed of a stored schedule's timing: its id when ``cron`` uses ``H``, else None,
    so that timings (and the caches keyed by them) stay shared by schedules without H."""
    return schedule_id if cron is not None and has_hash(cron) else None


def _next_cron(cron: str, tz: str, after: datetime, seed: str | None = None) -> datetime:
    """:func:`next_fire`, memoized by the start of ``after``'s minute.

    Cron fires on whole minutes, so the first fire after any instant of a minute is the
    first after the minute's start unless it falls within that minute: one entry serves
    every request of the minute. A batch of new schedules asks for the first fire of each
    of its expressions after its own ``now``, a new instant every request: memoized by
    the instant itself, a list of 1,000 schedules over a few hundred expressions missed
    for each of them (~11% of the batch's Python, issue 18). A result not after ``after``
    (a zone whose offset has seconds) is computed for ``after`` itself: always exact."""
    start = after.astimezone(UTC).replace(second=0, microsecond=0)  # not after ``after``
    found = _next_cron_at(cron, tz, start, seed)
    return found if found > after else _next_cron_at(cron, tz, after, seed)


@functools.lru_cache(maxsize=FIRE_CACHE_SIZE)
def _next_cron_at(cron: str, tz: str, after: datetime, seed: str | None = None) -> datetime:
    """Memoized :func:`next_fire`: a pure function of its arguments.

    Many schedules share an expression and a zone, and their cursors sit on the same
    nominal times, so the materializer asks the same question over and over.
    """
    return next_fire(parse_cron(cron, seed), _zone(tz), after)


@functools.lru_cache(maxsize=1024)
def _zone(name: str) -> ZoneInfo:
    """Hold loaded zones: ``ZoneInfo``'s own strong cache keeps only the last 8."""
    return load_zone(name)


@dataclass(frozen=True, slots=True)
class Policy:
    misfire: Misfire = Misfire.ONCE
    catch_up_limit: int = 100
    overlap: Overlap = Overlap.SKIP
    jitter: float = 0.0


@dataclass(frozen=True, slots=True)
class Skips:
    """A run of skipped occurrences, recorded as a count and its ends (never silent)."""

    count: int = 0
    first: datetime | None = None
    last: datetime | None = None

    def add(self, times: list[datetime]) -> Skips:
        if not times:
            return self
        return Skips(self.count + len(times), self.first or times[0], times[-1])


@dataclass(frozen=True, slots=True)
class Plan:
    create: tuple[datetime, ...]  # nominal times that become jobs now, oldest first
    wait: datetime | None  # overlap=queue: the occurrence that waits for the running one
    misfire_skips: Skips
    overlap_skips: Skips
    next_run_at: datetime  # the first nominal time not yet handled


def plan(
    timing: Timing,
    policy: Policy,
    next_run_at: datetime,
    now: datetime,
    previous_active: bool,
    waiting: datetime | None = None,
) -> Plan:
    """Decide the fate of every occurrence from ``next_run_at`` up to ``now``.

    ``previous_active``: the schedule's last job is not finished yet. ``waiting``: an
    occurrence that waits for that job (overlap=queue); once the job is finished the
    waiting occurrence is released first.
    """
    due, after = _due(timing, next_run_at, now)
    fire, misfire_skips = _apply_misfire(policy, due, now)
    create: list[datetime] = []
    if waiting is not None and not previous_active:
        create, waiting, previous_active = [waiting], None, True
    overlap_skips = Skips()
    if previous_active and fire and policy.overlap is Overlap.SKIP:
        overlap_skips, fire = overlap_skips.add(fire), []
    elif previous_active and fire and policy.overlap is Overlap.QUEUE:
        older = ([waiting] if waiting is not None else []) + fire[:-1]
        overlap_skips, waiting, fire = overlap_skips.add(older), fire[-1], []
    return Plan(tuple(create + fire), waiting, misfire_skips, overlap_skips, after)


def _due(timing: Timing, first: datetime, now: datetime) -> tuple[list[datetime], datetime]:
    due: list[datetime] = []
    t = first
    while t <= now and len(due) < MAX_ENUMERATED:
        due.append(t)
        t = timing.next_after(t)
    return due, t


def _apply_misfire(
    policy: Policy, due: list[datetime], now: datetime
) -> tuple[list[datetime], Skips]:
    if not due:
        return [], Skips()
    missed = [t for t in due if now - t > MISFIRE_GRACE]
    if policy.misfire is Misfire.SKIP:
        return due[len(missed) :], Skips().add(missed)
    if policy.misfire is Misfire.ONCE:
        if len(due) == 1:
            return due, Skips()
        return due[-1:], Skips().add(due[:-1])
    keep = due[-policy.catch_up_limit :]
    return keep, Skips().add(due[: len(due) - len(keep)])


def jitter_offset(schedule_id: str, jitter: float) -> timedelta:
    """A stable offset in [0, jitter) for this schedule (Jenkins' ``H``): same every run."""
    if jitter <= 0:
        return timedelta(0)
    digest = int.from_bytes(hashlib.sha256(schedule_id.encode()).digest()[:8], "big")
    millis = digest % max(1, int(jitter * 1000))
    return timedelta(milliseconds=millis)


@functools.lru_cache(maxsize=4096)
def nominal_text(t: datetime) -> str:
    """The nominal time as it appears in occurrence keys: UTC, ``Z``, ms only when needed."""
    t = t.astimezone(UTC)
    if t.microsecond:
        return t.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def occurrence_key(schedule_id: str, nominal: datetime) -> str:
    return f"{schedule_id}@{nominal_text(nominal)}"


def manual_key(schedule_id: str, now: datetime) -> str:
    return f"{schedule_id}@manual-{nominal_text(now)}"


def is_occurrence_key(key: str) -> bool:
    """Whether ``key`` has the shape of :func:`occurrence_key` or :func:`manual_key`
    (schedule ids start with ``sch-``). Such keys are the materializer's alone: a user's
    enqueue with one is refused, so nobody can take a schedule's next occurrence."""
    return key.startswith("sch-") and "@" in key


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """What a caller asks for: timing, policies, and the template of every occurrence's job."""

    timing: Timing
    policy: Policy
    template: JobTemplate
    owner_uid: int
    name: str | None = None

    def __post_init__(self) -> None:
        if self.name is not None and not _valid_name(self.name):
            raise InvalidInput(
                f"invalid schedule name {self.name!r}: use 1-100 letters, digits, '.', '_' "
                "or '-', not starting with 'sch-'"
            )
        if self.policy.catch_up_limit < 1:
            raise InvalidInput("catch_up_limit must be >= 1")
        if self.policy.jitter < 0:
            raise InvalidInput("jitter must be >= 0")


def _valid_name(name: str) -> bool:
    return (
        0 < len(name) <= 100
        and not name.startswith("sch-")
        and all(c.isalnum() or c in "._-" for c in name)
    )


@dataclass(frozen=True, slots=True)
class Schedule:
    id: str
    spec: ScheduleSpec
    paused: bool
    deleted_at: datetime | None
    created_at: datetime
    next_run_at: datetime
    waiting: datetime | None
    last_job_id: int | None
    misfire_skips: int
    overlap_skips: int
    pause_skips: int
    last_skip_at: datetime | None
    last_skip_reason: str | None
    last_skip_nominal: datetime | None
    #: Set when an occurrence could not be built or stored: the materializer skips the
    #: schedule (everything else goes on) until ``resume`` tries that occurrence again.
    broken_at: datetime | None = None
    broken_reason: str | None = None


@dataclass(frozen=True, slots=True)
class SkipRecord:
    schedule_id: str
    reason: str  # misfire | overlap | paused
    skips: Skips
    recorded_at: datetime


@dataclass(frozen=True, slots=True)
class Materialized:
    """What one materializer pass did: jobs created, skips recorded, schedules broken."""

    schedules: int  # how many were handled (broken ones included)
    created: tuple[tuple[str, int, datetime], ...]  # (schedule id, job id, nominal)
    skipped: tuple[SkipRecord, ...]
    broken: tuple[tuple[str, str], ...] = ()  # (schedule id, reason)


__all__ = [
    "MAX_ENUMERATED",
    "MISFIRE_GRACE",
    "Materialized",
    "Misfire",
    "Overlap",
    "Plan",
    "Policy",
    "Schedule",
    "ScheduleSpec",
    "SkipRecord",
    "Skips",
    "Timing",
    "is_occurrence_key",
    "jitter_offset",
    "manual_key",
    "nominal_text",
    "occurrence_key",
    "plan",
]


@dataclass(frozen=True, slots=True)
class ScheduleEdit:
    """One recorded edit of a schedule: who (peer uid), when, and what changed.

    ``changes`` maps each changed field (``cron``, ``every``, ``at``, ``tz``, ``name``,
    ``misfire``, ``catch_up_limit``, ``overlap``, ``jitter``, ``job``) to its value before
    and after; ``next_before``/``next_after`` are the cursor before and after the edit
    (equal unless the timing changed or the edit settled a due occurrence)."""

    schedule_id: str
    edited_at: datetime
    editor_uid: int
    changes: dict[str, tuple[object, object]]
    next_before: datetime
    next_after: datetime
    cleared_broken: bool = False

    @property
    def timing_changed(self) -> bool:
        return bool(TIMING_FIELDS & self.changes.keys())


#: The fields of an edit that change when a schedule fires (the cursor is recomputed).
TIMING_FIELDS = frozenset(("cron", "every", "at", "tz", "jitter"))
