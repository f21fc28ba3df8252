"""Conversions between domain objects and SQL rows (times as integer milliseconds)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime

from jobctl.domain import resources
from jobctl.domain.models import Attempt, Backoff, Job, trusted_spec
from jobctl.domain.states import JobStatus, Outcome


def to_ms(dt: datetime) -> int:
    return int(round(dt.timestamp() * 1000))


def opt_ms(dt: datetime | None) -> int | None:
    """:func:`to_ms` of an optional time (the inverse of :func:`from_ms`)."""
    return None if dt is None else to_ms(dt)


def from_ms(ms: int | None) -> datetime | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC)


def ms_to_dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def whole_ms(dt: datetime) -> datetime:
    """``dt`` as the store gives it back: UTC, cut to whole milliseconds."""
    if dt.tzinfo is UTC and dt.microsecond % 1000 == 0:
        return dt  # already so (the common case): no round trip through a float
    return ms_to_dt(to_ms(dt))


def job_from_row(row: sqlite3.Row, attempts: Sequence[Attempt] = ()) -> Job:
    run_at = ms_to_dt(row["run_at"])
    timeout = row["timeout_ms"]
    # Checked when it was written: a row is never refused on the way out (one old row
    # that today's limits would refuse must not make a listing fail for everyone).
    spec = trusted_spec(
        command=tuple(json.loads(row["command"])),
        run_at=run_at,
        owner_uid=row["owner_uid"],
        key=row["key"],
        queue=row["queue"],
        priority=row["priority"],
        max_attempts=row["max_attempts"],
        timeout=None if timeout is None else timeout / 1000,
        backoff=Backoff(row["backoff_base_ms"] / 1000, row["backoff_cap_ms"] / 1000),
        env=env_pairs(row["env"]),
        cwd=row["cwd"],
        schedule_id=row["schedule_id"],
        scheduled_for=from_ms(row["scheduled_for"]),
        retry_on=codes(row["retry_on"]),
        no_retry_on=codes(row["no_retry_on"]) or (),
        resources=resources.from_text(row["resources"]),
    )
    return Job(
        id=row["id"],
        key=row["key"],
        spec=spec,
        status=JobStatus(row["status"]),
        run_at=run_at,
        created_at=ms_to_dt(row["created_at"]),
        attempt=row["attempt"],
        failures=row["failures"],
        generation=row["generation"],
        lease_owner=row["lease_owner"],
        lease_until=from_ms(row["lease_until"]),
        finished_at=from_ms(row["finished_at"]),
        last_error=row["last_error"],
        dead_reason=row["dead_reason"],
        attempts=tuple(attempts),
    )


def codes(text: str | None) -> tuple[int, ...] | None:
    """A stored JSON list of exit codes (``retry_on``, ``no_retry_on``)."""
    return None if text is None else tuple(json.loads(text))


def env_pairs(text: str) -> tuple[tuple[str, str], ...]:
    """The stored JSON ``env`` column as the spec's pairs."""
    return tuple((k, v) for k, v in json.loads(text))


def attempt_from_row(row: sqlite3.Row) -> Attempt:
    outcome = row["outcome"]
    return Attempt(
        job_id=row["job_id"],
        number=row["number"],
        generation=row["generation"],
        started_at=ms_to_dt(row["started_at"]),
        finished_at=from_ms(row["finished_at"]),
        outcome=None if outcome is None else Outcome(outcome),
        exit_code=row["exit_code"],
        error=row["error"],
        output_tail=row["output_tail"],
        log_path=row["log_path"],
        pid=row["pid"],
        lease_owner=row["lease_owner"],
    )
