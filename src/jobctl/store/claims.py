"""Claimed rows to :class:`Claim` objects, cheaply.

A claim of a thousand jobs used to spend about half its time in
:func:`jobctl.store.rows.job_from_row`: JSON parsing, ``datetime`` conversion and the
re-validation of each :class:`JobSpec` the store validated when the job was accepted.
Here the rows of one claim share a cache (a herd's jobs have the same command, env,
``run_at`` and lease), and specs are rebuilt without re-validation: the row holds exactly
what an earlier, validated ``JobSpec`` wrote.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Hashable
from datetime import datetime
from typing import Any, TypeVar

from jobctl.domain import resources
from jobctl.domain.models import Backoff, Claim, Job, JobSpec, trusted_spec
from jobctl.domain.states import JobStatus
from jobctl.store import rows

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Memo:
    """Per-claim memo of conversions by their input."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, Hashable], Any] = {}

    def get(self, kind: str, value: K, fn: Callable[[K], V]) -> V:
        key = (kind, value)
        try:
            out: V = self._seen[key]
        except KeyError:
            out = self._seen[key] = fn(value)
        return out

    def dt(self, ms: int | None) -> datetime | None:
        return None if ms is None else self.get("dt", ms, rows.ms_to_dt)


def _spec(r: sqlite3.Row, memo: _Memo, run_at: datetime) -> JobSpec:
    timeout = r["timeout_ms"]
    backoff = (r["backoff_base_ms"], r["backoff_cap_ms"])
    return trusted_spec(
        command=memo.get("cmd", r["command"], lambda t: tuple(json.loads(t))),
        run_at=run_at,
        owner_uid=r["owner_uid"],
        key=r["key"],
        queue=r["queue"],
        priority=r["priority"],
        max_attempts=r["max_attempts"],
        timeout=None if timeout is None else timeout / 1000,
        backoff=memo.get("backoff", backoff, lambda b: Backoff(b[0] / 1000, b[1] / 1000)),
        env=memo.get("env", r["env"], rows.env_pairs),
        cwd=r["cwd"],
        schedule_id=r["schedule_id"],
        scheduled_for=memo.dt(r["scheduled_for"]),
        retry_on=memo.get("codes", r["retry_on"], rows.codes),
        no_retry_on=memo.get("codes", r["no_retry_on"], rows.codes) or (),
        resources=memo.get("res", r["resources"], resources.from_text),
    )


def claims_from_rows(found: list[sqlite3.Row]) -> list[Claim]:
    """Claims of rows returned by ``claim_lane`` (``RETURNING *``), in the given order."""
    memo = _Memo()
    out = []
    for r in found:
        run_at = memo.get("dt", r["run_at"], rows.ms_to_dt)
        lease_until = memo.get("dt", r["lease_until"], rows.ms_to_dt)
        job = Job(
            id=r["id"],
            key=r["key"],
            spec=_spec(r, memo, run_at),
            status=JobStatus.RUNNING,
            run_at=run_at,
            created_at=memo.get("dt", r["created_at"], rows.ms_to_dt),
            attempt=r["attempt"],
            failures=r["failures"],
            generation=r["generation"],
            lease_owner=r["lease_owner"],
            lease_until=lease_until,
            finished_at=memo.dt(r["finished_at"]),
            last_error=r["last_error"],
            dead_reason=r["dead_reason"],
        )
        out.append(Claim(job, r["attempt"], r["generation"], lease_until))
    return out


__all__ = ["claims_from_rows"]
