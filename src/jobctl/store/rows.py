"""Conversions between domain values and SQL values (times as integer milliseconds);
the ``jobs`` row itself is :mod:`jobctl.store.jobrow`."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Protocol

from jobctl.domain.models import Attempt
from jobctl.domain.states import Outcome


class RowLike(Protocol):
    """A row of any backend, read by column name (``sqlite3.Row``, a psycopg dict row)."""

    def __getitem__(self, key: str, /) -> Any: ...


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


def env_pairs(text: str) -> tuple[tuple[str, str], ...]:
    """The stored JSON ``env`` column as the spec's pairs."""
    return tuple((k, v) for k, v in json.loads(text))


def attempt_from_row(row: RowLike) -> Attempt:
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
        http_status=row["http_status"],
        latency_ms=row["latency_ms"],
        body_sha256=row["body_sha256"],
    )
