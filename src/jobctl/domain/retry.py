"""What happens to a job after an attempt ends: the retry policy, pure.

The store applies the :class:`Step` this returns inside the same transaction that
records the attempt, so a decision and its effect can never come apart.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from jobctl.domain.models import Job
from jobctl.domain.states import JobStatus, Outcome

#: Exit codes a shell uses for "cannot execute" and "not found": retrying cannot help.
NON_RETRYABLE_EXIT_CODES = frozenset({126, 127})


@dataclass(frozen=True, slots=True)
class Step:
    status: JobStatus
    failures: int
    run_at: datetime | None = None
    dead_reason: str | None = None


def next_step(
    job: Job, outcome: Outcome, exit_code: int | None, now: datetime, rng: random.Random
) -> Step:
    """Decide the job's next state after an attempt with ``outcome`` ended at ``now``."""
    failures = job.failures + (1 if outcome.uses_budget else 0)
    if outcome is Outcome.SUCCEEDED:
        return Step(JobStatus.SUCCEEDED, failures)
    if outcome is Outcome.CANCELLED:
        return Step(JobStatus.CANCELLED, failures)
    if outcome is Outcome.INTERRUPTED:
        return Step(JobStatus.SCHEDULED, failures, run_at=now)
    if outcome is Outcome.FAILED and exit_code in NON_RETRYABLE_EXIT_CODES:
        return Step(JobStatus.DEAD, failures, dead_reason="non_retryable")
    if failures >= job.spec.max_attempts:
        reason = {Outcome.TIMEOUT: "timeout", Outcome.LEASE_EXPIRED: "lease_expired"}
        return Step(JobStatus.DEAD, failures, dead_reason=reason.get(outcome, "max_attempts"))
    delay = rng.uniform(0.0, job.spec.backoff.ceiling(failures))
    return Step(JobStatus.SCHEDULED, failures, run_at=now + timedelta(seconds=delay))
