from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from jobctl.domain.limits import MAX_BACKOFF
from jobctl.domain.models import Backoff, Job, JobSpec
from jobctl.domain.retry import Step, next_step
from jobctl.domain.states import JobStatus, Outcome
from jobctl.errors import InvalidInput

NOW = datetime(2027, 1, 1, tzinfo=UTC)


def _run_at(step: Step) -> datetime:
    assert step.run_at is not None
    return step.run_at


def job(failures: int = 0, max_attempts: int = 3, backoff: Backoff | None = None) -> Job:
    spec = JobSpec(("true",), NOW, 0, max_attempts=max_attempts, backoff=backoff or Backoff())
    return Job(
        1,
        "k",
        spec,
        JobStatus.RUNNING,
        NOW,
        NOW,
        failures + 1,
        failures,
        1,
        "o",
        NOW,
        None,
        None,
        None,
    )


def test_backoff_ceiling_doubles_then_caps() -> None:
    b = Backoff(10, 60)
    assert [b.ceiling(n) for n in range(1, 6)] == [10, 20, 40, 60, 60]
    assert Backoff(1, MAX_BACKOFF).ceiling(10_000) == MAX_BACKOFF  # no overflow
    with pytest.raises(InvalidInput):
        Backoff(1, MAX_BACKOFF + 1)  # the limit of jobctl.domain.limits
    with pytest.raises(InvalidInput):
        Backoff(10, 5)


def test_full_jitter_stays_within_ceiling_and_varies() -> None:
    rng = random.Random(1)
    delays = [
        (_run_at(next_step(job(1), Outcome.FAILED, 1, NOW, rng)) - NOW).total_seconds()
        for _ in range(200)
    ]
    assert all(0 <= d <= 20 for d in delays)
    assert max(delays) - min(delays) > 10  # full jitter spreads retries


@pytest.mark.parametrize(
    ("outcome", "code", "status", "reason"),
    [
        (Outcome.SUCCEEDED, 0, JobStatus.SUCCEEDED, None),
        (Outcome.CANCELLED, None, JobStatus.CANCELLED, None),
        (Outcome.FAILED, 127, JobStatus.DEAD, "non_retryable"),
        (Outcome.FAILED, 126, JobStatus.DEAD, "non_retryable"),
    ],
)
def test_terminal_outcomes(
    outcome: Outcome, code: int | None, status: JobStatus, reason: str | None
) -> None:
    step = next_step(job(), outcome, code, NOW, random.Random(0))
    assert (step.status, step.dead_reason) == (status, reason)


@pytest.mark.parametrize(
    ("outcome", "reason"),
    [
        (Outcome.FAILED, "max_attempts"),
        (Outcome.TIMEOUT, "timeout"),
        (Outcome.LEASE_EXPIRED, "lease_expired"),
    ],
)
def test_last_budgeted_failure_is_dead_with_reason(outcome: Outcome, reason: str) -> None:
    step = next_step(job(failures=2), outcome, 1, NOW, random.Random(0))
    assert (step.status, step.dead_reason, step.failures) == (JobStatus.DEAD, reason, 3)


def test_interrupted_is_free_and_immediate() -> None:
    step = next_step(job(failures=2), Outcome.INTERRUPTED, None, NOW, random.Random(0))
    assert (step.status, step.failures, step.run_at) == (JobStatus.SCHEDULED, 2, NOW)


@pytest.mark.parametrize("outcome", [Outcome.FAILED, Outcome.TIMEOUT])
def test_the_poison_verdict_is_for_a_lost_lease_only(outcome: Outcome) -> None:
    """A poison verdict kills only an attempt whose lease was lost (the daemon crashed
    under it); any other failure goes on with its budget, whatever the crash evidence."""
    step = next_step(job(), outcome, 1, NOW, random.Random(0), poison=True)
    assert (step.status, step.dead_reason, step.failures) == (JobStatus.SCHEDULED, None, 1)
    lost = next_step(job(), Outcome.LEASE_EXPIRED, None, NOW, random.Random(0), poison=True)
    assert (lost.status, lost.dead_reason) == (JobStatus.DEAD, "poison")
