"""Wire models of schedules."""

from __future__ import annotations

import functools
import zoneinfo
from datetime import datetime
from typing import Annotated, Any

import orjson
from pydantic import BaseModel, Field, StrictFloat, field_validator

from jobctl.api.schemas import TIME_SCHEMA, JobTemplateIn
from jobctl.api.views import job_out
from jobctl.api.wiretypes import NUMBER, STRICT, require_offset, time_text
from jobctl.domain import limits
from jobctl.domain.clock import iso
from jobctl.domain.cron import describe, load_zone, parse_cron
from jobctl.domain.durations import format_duration
from jobctl.domain.models import Job
from jobctl.domain.retry import DEFAULT_RETRY, RetryDefaults
from jobctl.domain.schedule import (
    Misfire,
    Overlap,
    Policy,
    Schedule,
    ScheduleSpec,
    SkipRecord,
    Timing,
)
from jobctl.errors import InvalidSchedule
from jobctl.store.schedule_edit import template_text


def _loads(zone: str) -> bool:
    try:
        load_zone(zone)
    except InvalidSchedule:
        return False
    return True


@functools.cache
def zones() -> list[str]:
    """The zones a schedule may name: the OpenAPI document lists them (read when the
    document is built, not at import: loading every zone takes a while)."""
    return sorted(z for z in zoneinfo.available_timezones() if _loads(z))


def _zone_enum(schema: dict[str, Any]) -> None:
    schema["enum"] = zones()


def _one_timing(schema: dict[str, Any]) -> None:
    """In the OpenAPI document: exactly one of ``cron`` and ``every``."""
    schema["oneOf"] = [
        {
            "required": ["cron"],
            "properties": {"cron": {"type": "string"}, "every": {"type": "null"}},
        },
        {
            "required": ["every"],
            "properties": {"every": {"type": "number"}, "cron": {"type": "null"}},
        },
    ]


#: The field types of a schedule: shared by create (ScheduleIn) and edit (SchedulePatch),
#: so both apply the same input limits.
CronText = Annotated[
    str,
    Field(
        min_length=1,
        max_length=limits.MAX_CRON,
        pattern=limits.NONEMPTY_TEXT_PATTERN,
        json_schema_extra={"pattern": limits.CRON_SCHEMA_PATTERN},
    ),
]
EverySeconds = Annotated[StrictFloat, Field(ge=limits.MIN_EVERY, le=limits.MAX_EVERY)]
AnchorTime = Annotated[datetime, Field(json_schema_extra=TIME_SCHEMA)]
ZoneText = Annotated[
    str,
    Field(
        min_length=1,
        max_length=limits.MAX_TZ,
        pattern=limits.NONEMPTY_TEXT_PATTERN,
        json_schema_extra=_zone_enum,
    ),
]
ScheduleName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=limits.MAX_SCHEDULE_NAME,
        pattern=limits.SCHEDULE_NAME_PATTERN,
    ),
]
CatchUpLimit = Annotated[int, Field(ge=1, le=limits.MAX_CATCH_UP), NUMBER]
JitterSeconds = Annotated[StrictFloat, Field(ge=0, le=limits.MAX_JITTER)]


class ScheduleIn(BaseModel):
    """A schedule: ``cron`` (5 fields, in ``tz``) or ``every`` seconds from ``at``."""

    model_config = STRICT | {"json_schema_extra": _one_timing}
    cron: CronText | None = None
    every: EverySeconds | None = None
    at: AnchorTime | None = None
    tz: ZoneText | None = None
    name: ScheduleName | None = None
    misfire: Misfire = Misfire.ONCE
    catch_up_limit: CatchUpLimit = 100
    overlap: Overlap = Overlap.SKIP
    jitter: JitterSeconds = 0.0
    job: JobTemplateIn

    _text = field_validator("at", mode="before")(time_text)
    _aware = field_validator("at")(require_offset)

    def to_spec(
        self,
        owner_uid: int,
        now: datetime,
        default_tz: str,
        defaults: RetryDefaults = DEFAULT_RETRY,
    ) -> ScheduleSpec:
        anchor = (self.at or now.replace(microsecond=0)) if self.every is not None else None
        timing = _timing(self.tz or default_tz, self.cron, self.every, anchor)
        policy = _policy(self.misfire, self.catch_up_limit, self.overlap, self.jitter)
        template = self.job.to_template(defaults)
        template.check(owner_uid)  # what the wire model cannot see: the 64 KiB payload
        return ScheduleSpec(timing, policy, template, owner_uid, self.name)


@functools.lru_cache(maxsize=4096)
def _timing(tz: str, cron: str | None, every: float | None, anchor: datetime | None) -> Timing:
    """A checked Timing, shared by the items of a batch that ask for the same one (it is
    immutable): building and checking one per item (the expression parsed, the zone looked
    up) was a measurable share of a 1,000-schedule list. A refusal is raised, not kept."""
    return Timing(tz, cron=cron, every=every, anchor=anchor)


@functools.lru_cache(maxsize=256)
def _policy(misfire: Misfire, catch_up_limit: int, overlap: Overlap, jitter: float) -> Policy:
    """A Policy, shared as :func:`_timing`'s timings are (most schedules use the defaults)."""
    return Policy(misfire, catch_up_limit, overlap, jitter)


#: The body of ``POST /v1/schedules``: one schedule, or a list of 1 to ``MAX_SCHEDULE_BATCH``.
ScheduleBody = (
    ScheduleIn
    | Annotated[list[ScheduleIn], Field(min_length=1, max_length=limits.MAX_SCHEDULE_BATCH)]
)


def description(s: Schedule) -> str:
    t = s.spec.timing
    if t.cron is not None:
        return _cron_words(t.cron, t.seed)
    assert t.every is not None
    return f"every {format_duration(t.every)} from {iso(t.anchor)}"


@functools.lru_cache(maxsize=4096)
def _cron_words(cron: str, seed: str | None) -> str:
    """Memoized: a batch or a page of schedules repeats a few expressions (seed is None
    for those without ``H``)."""
    try:
        return describe(parse_cron(cron, seed))
    except InvalidSchedule as exc:  # stored by a version that read it differently
        return f"invalid: {exc.message}"


def created_out(s: Schedule) -> dict[str, Any]:
    """A batch's answer for a schedule it created: :func:`schedule_out` with
    ``created: true``, its job the template text the store has just rendered (memoized)
    as an ``orjson.Fragment``, for the orjson page renderer only. Rendering each template
    again was about a tenth of a 1,000-schedule list (issue 18)."""
    out = schedule_out(s, orjson.Fragment(template_text(s.spec.template)))
    out["created"] = True  # a new dict: set in place, no copy
    return out


def schedule_out(s: Schedule, job: Any = None) -> dict[str, Any]:
    """The wire form of a schedule; ``job``: its template's, when the caller has it."""
    t, p = s.spec.timing, s.spec.policy
    last_skip = None
    if s.last_skip_reason is not None:
        last_skip = {
            "reason": s.last_skip_reason,
            "at": iso(s.last_skip_at),
            "scheduled_for": iso(s.last_skip_nominal),
        }
    return {
        "id": s.id,
        "name": s.spec.name,
        "cron": t.cron,
        "every": t.every,
        "at": iso(t.anchor),
        "tz": t.tz,
        "description": description(s),
        "misfire": p.misfire.value,
        "catch_up_limit": p.catch_up_limit,
        "overlap": p.overlap.value,
        "jitter": p.jitter,
        "paused": s.paused,
        "deleted": s.deleted_at is not None,
        "broken": s.broken_at is not None,
        "broken_at": iso(s.broken_at),
        "broken_reason": s.broken_reason,
        "next_run_at": iso(s.next_run_at),
        "waiting": iso(s.waiting),
        "created_at": iso(s.created_at),
        "owner_uid": s.spec.owner_uid,
        "job": s.spec.template.to_json() if job is None else job,
        "last_job_id": s.last_job_id,
        "misfire_skips": s.misfire_skips,
        "overlap_skips": s.overlap_skips,
        "pause_skips": s.pause_skips,
        "last_skip": last_skip,
    }


def skip_out(r: SkipRecord) -> dict[str, Any]:
    return {
        "reason": r.reason,
        "count": r.skips.count,
        "first": iso(r.skips.first),
        "last": iso(r.skips.last),
        "recorded_at": iso(r.recorded_at),
    }


def detail_out(
    s: Schedule, fires: list[datetime], jobs: list[Job], skips: list[SkipRecord]
) -> dict[str, Any]:
    last = jobs[0] if jobs else None
    last_run = None
    if last is not None:
        outcome = last.attempts[-1].outcome if last.attempts else None
        last_run = {
            "job_id": last.id,
            "status": last.status.value,
            "scheduled_for": iso(last.spec.scheduled_for),
            "finished_at": iso(last.finished_at),
            "outcome": outcome.value if outcome else None,
        }
    occurrences = [
        {
            "job_id": j.id,
            "key": j.key,
            "scheduled_for": iso(j.spec.scheduled_for),
            "status": j.status.value,
            "attempt": j.attempt,
        }
        for j in jobs
    ]
    return schedule_out(s) | {
        "next_fires": [iso(t) for t in fires],
        "last_run": last_run,
        "occurrences": occurrences,
        "skips": [skip_out(r) for r in skips],
    }


__all__ = ["ScheduleIn", "created_out", "detail_out", "job_out", "schedule_out", "skip_out"]
