"""The job lifecycle, written down once.

States (who moves a job in and out):

``scheduled``
    Waiting for its ``run_at``. Enqueue puts a job here; the timer's claim moves it to
    ``running``; a retry, a reclaimed lease, an interrupted shutdown and a DLQ replay move
    it back here; cancel moves it to ``cancelled``.
``running``
    Claimed under a lease (``lease_owner``, ``lease_until``, ``generation``). Only the
    holder of the current generation may heartbeat or finish it. It leaves by success
    (``succeeded``), a failure with budget left or an expired/interrupted lease
    (``scheduled``), a spent budget (``dead``) or a cancel (``cancelled``).
``succeeded``
    Final. The last attempt exited 0.
``dead``
    The retry budget is spent or the failure is not retryable. Stays until a replay moves
    it back to ``scheduled`` with a fresh budget, or retention prunes it.
``cancelled``
    Final. Cancelled by a user before or while running.

The same table is enforced by a trigger in the schema (``store/sql/migrations``) and a
test checks that both agree, so an illegal move is an error in the code *and* in SQL.
"""

from __future__ import annotations

from enum import StrEnum

from jobctl.errors import IllegalTransition


class JobStatus(StrEnum):
    SCHEDULED = "scheduled"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self in (JobStatus.SUCCEEDED, JobStatus.CANCELLED)


class Outcome(StrEnum):
    """How one attempt ended; separate from the job's status (one job, many attempts)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMEOUT = "timeout"
    LEASE_EXPIRED = "lease_expired"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"

    @property
    def uses_budget(self) -> bool:
        """Whether the attempt counts against ``max_attempts``.

        A shutdown interruption is the daemon's doing, not the job's, so it is free.
        """
        return self in (Outcome.FAILED, Outcome.TIMEOUT, Outcome.LEASE_EXPIRED)


S = JobStatus

#: (from, to) -> the operations that may make that move.
TRANSITIONS: dict[tuple[JobStatus, JobStatus], frozenset[str]] = {
    (S.SCHEDULED, S.RUNNING): frozenset({"claim"}),
    (S.SCHEDULED, S.CANCELLED): frozenset({"cancel"}),
    (S.RUNNING, S.SUCCEEDED): frozenset({"finish"}),
    (S.RUNNING, S.SCHEDULED): frozenset({"finish", "reclaim", "interrupt"}),
    (S.RUNNING, S.DEAD): frozenset({"finish", "reclaim"}),
    (S.RUNNING, S.CANCELLED): frozenset({"cancel", "finish"}),
    (S.DEAD, S.SCHEDULED): frozenset({"replay"}),
}


def check_transition(job_id: int, old: JobStatus, new: JobStatus, op: str) -> None:
    """Raise :class:`IllegalTransition` unless ``op`` may move a job from ``old`` to ``new``."""
    if op not in TRANSITIONS.get((old, new), frozenset()):
        raise IllegalTransition(
            f"job {job_id}: cannot {op} a job that is {old.value} (to {new.value})",
            job_id=job_id,
            status=old.value,
        )
