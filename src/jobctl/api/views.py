"""The API's answers: jobs (with their attempts) and queue counts as JSON objects."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from jobctl.domain.clock import iso, iso_at
from jobctl.domain.models import (
    Attempt,
    Job,
    QueueStats,
)


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
    } | (
        {"http_status": a.http_status, "latency_ms": a.latency_ms, "body_sha256": a.body_sha256}
        if a.body_sha256 is not None
        else {}
    )


def job_out(job: Job, with_attempts: bool = False) -> dict[str, Any]:
    """A job as the API answers it.

    A batch enqueue renders thousands of these a second on the event loop: the times go
    straight to the cached :func:`iso_at` (a job's run and creation times are never None,
    the others are tested here), and the empty collections of a plain job are literals.
    tests/api/test_job_out_differential.py holds the output byte-equal to the plain form.
    """
    s = job.spec
    lease_until, finished_at, scheduled_for = job.lease_until, job.finished_at, s.scheduled_for
    out: dict[str, Any] = {
        "id": job.id,
        "key": job.key,
        "queue": s.queue,
        "status": job.status._value_,  # the enum's .value is a Python property: 0.3 µs
        "run_at": iso_at(job.run_at),
        "priority": s.priority,
        "attempt": job.attempt,
        "max_attempts": s.max_attempts,
        "failures": job.failures,
        "command": list(s.command),
        "env": dict(s.env) if s.env else {},
        "cwd": s.cwd,
        "timeout": s.timeout,
        "backoff": {"base": s.backoff.base, "cap": s.backoff.cap},
        "owner_uid": s.owner_uid,
        "created_at": iso_at(job.created_at),
        "generation": job.generation,
        "lease_owner": job.lease_owner,
        "lease_until": None if lease_until is None else iso_at(lease_until),
        "finished_at": None if finished_at is None else iso_at(finished_at),
        "retry_on": None if s.retry_on is None else list(s.retry_on),
        "no_retry_on": list(s.no_retry_on) if s.no_retry_on else [],
        "resources": s.resources.to_json() if s.resources else {},
        "http": None if s.http is None else s.http.to_json(),
        "payload": None if s.payload is None else json.loads(s.payload),
        "schedule_id": s.schedule_id,
        "scheduled_for": None if scheduled_for is None else iso_at(scheduled_for),
        "last_error": job.last_error,
        "dead_reason": job.dead_reason,
        "on_failure": s.on_failure,
        "notified": None if job.notified is None else json.loads(job.notified),
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
