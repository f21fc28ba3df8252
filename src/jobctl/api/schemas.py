"""Wire models of the HTTP API (also the source of its OpenAPI document).

Requests forbid unknown fields: a typo such as ``max_attempt`` is a 422, not a job that
silently ignores what the caller meant.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from jobctl.domain.clock import iso
from jobctl.domain.models import (
    Attempt,
    Backoff,
    Job,
    JobSpec,
    JobTemplate,
    QueueStats,
    check_payload,
    trusted_spec,
)
from jobctl.domain.retry import DEFAULT_RETRY, RetryDefaults


def require_offset(v: datetime | None) -> datetime | None:
    """Times on the wire are absolute: a naive one would mean the daemon's zone, silently."""
    if v is not None and v.tzinfo is None:
        raise ValueError("needs a UTC offset, e.g. 2027-03-14T06:00:00Z")
    return v


DeadReason = Literal[
    "max_attempts", "non_retryable", "timeout", "lease_expired", "poison", "denied"
]


class BackoffIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    base: Annotated[float, Field(ge=0, le=86400 * 30)] = 10.0
    cap: Annotated[float, Field(ge=0, le=86400 * 30)] = 3600.0


class JobTemplateIn(BaseModel):
    """What a job runs and how: the body of a job, or the template of a schedule."""

    model_config = ConfigDict(extra="forbid")
    command: Annotated[list[str], Field(min_length=1)]
    queue: Annotated[str, Field(min_length=1, max_length=100)] = "default"
    priority: Annotated[int, Field(ge=-1000, le=1000)] = 0
    max_attempts: Annotated[int, Field(ge=1, le=1000)] | None = None  # None: daemon default
    timeout: Annotated[float, Field(gt=0, le=86400 * 365)] | None = None
    backoff: BackoffIn | None = None  # None: the daemon's default
    env: dict[str, str] = Field(default_factory=dict)  # a factory: no deepcopy per job
    cwd: Annotated[str, Field(min_length=1, max_length=4096)] = "/"
    retry_on: list[Annotated[int, Field(ge=0, le=255)]] | None = None
    no_retry_on: list[Annotated[int, Field(ge=0, le=255)]] = Field(default_factory=list)

    @field_validator("cwd")
    @classmethod
    def _absolute(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError("must be an absolute path")
        return v

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            if not name or "=" in name or "\0" in name or name.startswith("JOBCTL_"):
                raise ValueError(f"invalid environment variable name {name!r}")
        return v

    def to_template(self, defaults: RetryDefaults = DEFAULT_RETRY) -> JobTemplate:
        """The job template, with the daemon's retry defaults where the caller said nothing."""
        return JobTemplate(**self._job_fields(defaults))

    def _job_fields(self, defaults: RetryDefaults) -> dict[str, Any]:
        """The fields a template and a job share, defaults filled in."""
        backoff = defaults.backoff
        if self.backoff is not None:
            backoff = Backoff(self.backoff.base, max(self.backoff.cap, self.backoff.base))
        return {
            "command": tuple(self.command),
            "queue": self.queue,
            "priority": self.priority,
            "max_attempts": self.max_attempts or defaults.max_attempts,
            "timeout": self.timeout,
            "backoff": backoff,
            "env": tuple(sorted(self.env.items())) if self.env else (),
            "cwd": self.cwd,
            "retry_on": None if self.retry_on is None else tuple(sorted(set(self.retry_on))),
            "no_retry_on": tuple(sorted(set(self.no_retry_on))) if self.no_retry_on else (),
        }


class JobIn(JobTemplateIn):
    """A job to enqueue. ``run_at`` defaults to now; times need an offset (or ``Z``)."""

    run_at: datetime | None = None
    key: Annotated[str, Field(min_length=1, max_length=512)] | None = None

    _aware = field_validator("run_at")(require_offset)

    def to_spec(
        self, owner_uid: int, now: datetime, defaults: RetryDefaults = DEFAULT_RETRY
    ) -> JobSpec:
        run_at = (self.run_at or now).astimezone(UTC)
        fields = self._job_fields(defaults)
        # Every check JobSpec.__post_init__ makes, this model's field constraints made
        # already (tests/api/test_schemas_match_spec.py holds them equal), except the size.
        check_payload(fields["command"], fields["env"])
        return trusted_spec(
            run_at=run_at,
            key=self.key,
            owner_uid=owner_uid,
            schedule_id=None,
            scheduled_for=None,
            **fields,
        )


class ReplayIn(BaseModel):
    """Which dead jobs to replay, and how fast to release them (jobs per second)."""

    model_config = ConfigDict(extra="forbid")
    limit: Annotated[int, Field(ge=1, le=100_000)] = 10
    ids: list[int] | None = None
    queue: str | None = None
    reason: DeadReason | None = None
    rate: Annotated[float, Field(gt=0, le=100_000)] | None = 1.0
    #: Without ids: everyone's dead jobs, not only the caller's (admins only).
    all_users: bool = False


class QueueIn(BaseModel):
    """Queue limits to change; a field left out keeps its value, null removes the limit."""

    model_config = ConfigDict(extra="forbid")
    concurrency: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    rate: Annotated[float, Field(gt=0, le=1_000_000)] | None = None
    burst: Annotated[int, Field(ge=1, le=1_000_000)] = 1
    weight: Annotated[int, Field(ge=1, le=1000)] = 1


def attempt_out(a: Attempt) -> dict[str, Any]:
    return {
        "number": a.number,
        "generation": a.generation,
        "started_at": iso(a.started_at),
        "finished_at": iso(a.finished_at),
        "outcome": a.outcome.value if a.outcome else None,
        "exit_code": a.exit_code,
        "error": a.error,
        "output_tail": a.output_tail,
        "output_cut": "[jobctl: output cut at " in a.output_tail,  # engine.process.CUT_MARK
        "pid": a.pid,
        "lease_owner": a.lease_owner,
    }


def job_out(job: Job, with_attempts: bool = False) -> dict[str, Any]:
    s = job.spec
    out: dict[str, Any] = {
        "id": job.id,
        "key": job.key,
        "queue": s.queue,
        "status": job.status.value,
        "run_at": iso(job.run_at),
        "priority": s.priority,
        "attempt": job.attempt,
        "max_attempts": s.max_attempts,
        "failures": job.failures,
        "command": list(s.command),
        "env": dict(s.env),
        "cwd": s.cwd,
        "timeout": s.timeout,
        "backoff": {"base": s.backoff.base, "cap": s.backoff.cap},
        "owner_uid": s.owner_uid,
        "created_at": iso(job.created_at),
        "generation": job.generation,
        "lease_owner": job.lease_owner,
        "lease_until": iso(job.lease_until),
        "finished_at": iso(job.finished_at),
        "retry_on": None if s.retry_on is None else list(s.retry_on),
        "no_retry_on": list(s.no_retry_on),
        "schedule_id": s.schedule_id,
        "scheduled_for": iso(s.scheduled_for),
        "last_error": job.last_error,
        "dead_reason": job.dead_reason,
    }
    if with_attempts:
        out["attempts"] = [attempt_out(a) for a in job.attempts]
    return out


def queue_out(q: QueueStats, now: datetime) -> dict[str, Any]:
    age = None if q.oldest_due is None else max(0.0, (now - q.oldest_due).total_seconds())
    return {
        "queue": q.queue,
        "waiting": q.scheduled,
        "due": q.due,
        "running": q.running,
        "succeeded": q.succeeded,
        "dead": q.dead,
        "cancelled": q.cancelled,
        "oldest_due_age": age,
    }
