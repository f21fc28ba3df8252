"""What happens to a job after an attempt ends: the retry policy, pure.

The store applies the :class:`Step` this returns inside the same transaction that
records the attempt, so a decision and its effect can never come apart.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from jobctl.domain.models import Backoff, Job
from jobctl.domain.states import DeadReason, JobStatus, Outcome

#: Exit codes a shell uses for "cannot execute" and "not found": retrying cannot help.
NON_RETRYABLE_EXIT_CODES = frozenset({126, 127})
#: This many daemon crashes in a row that each point at a job make it poison: it most
#: likely takes down whatever runs it, so it is not offered to a worker again. What points
#: at a job is :func:`crash_poison`'s rule (docs/guarantees.md#crashes-and-poison-jobs).
POISON_CRASHES = 3
#: A start that failed for want of a resource waits at least this long before the next.
TRANSIENT_MIN_DELAY = 1.0
#: The dead reason of a spent budget, by the outcome of the last attempt (else max_attempts).
_SPENT = {Outcome.TIMEOUT: DeadReason.TIMEOUT, Outcome.LEASE_EXPIRED: DeadReason.LEASE_EXPIRED}


@dataclass(frozen=True, slots=True)
class RetryDefaults:
    """What a job gets when it does not say: the daemon's configured retry policy."""

    max_attempts: int = 3
    backoff: Backoff = field(default_factory=Backoff)


DEFAULT_RETRY = RetryDefaults()


@dataclass(frozen=True, slots=True)
class Step:
    status: JobStatus
    failures: int
    run_at: datetime | None = None
    dead_reason: DeadReason | None = None


def retryable(job: Job, exit_code: int | None) -> bool:
    """Whether a failed attempt with ``exit_code`` may be retried at all."""
    spec = job.spec
    if spec.http is not None:  # the runner judged the answer (domain/http.classify)
        return True
    if exit_code in NON_RETRYABLE_EXIT_CODES or exit_code in spec.no_retry_on:
        return False
    return spec.retry_on is None or exit_code in spec.retry_on


def next_step(
    job: Job,
    outcome: Outcome,
    exit_code: int | None,
    now: datetime,
    rng: random.Random,
    poison: bool = False,
    dead_reason: DeadReason | None = None,
    transient: bool = False,
    retry_after: float | None = None,
) -> Step:
    """Decide the job's next state after an attempt with ``outcome`` ended at ``now``.

    ``poison``: the evidence of :func:`crash_poison` points at the job (a lost lease only).
    ``dead_reason``: a failure that must not be retried (:class:`AttemptResult`'s).
    ``transient``: a failure to start for want of a resource (see :func:`transient_step`).
    ``retry_after``: a receiver's ``Retry-After`` (seconds): a retry waits at least this;
    for an interruption (a worker's release), the delay before the job is due again.
    """
    if outcome is Outcome.FAILED and transient:
        return transient_step(job, now, rng)
    failures = job.failures + (1 if outcome.uses_budget else 0)
    if outcome is Outcome.SUCCEEDED:
        return Step(JobStatus.SUCCEEDED, failures)
    if outcome is Outcome.FAILED and dead_reason is not None:
        return Step(JobStatus.DEAD, failures, dead_reason=dead_reason)
    if outcome is Outcome.CANCELLED:
        return Step(JobStatus.CANCELLED, failures)
    if outcome is Outcome.INTERRUPTED:  # a shutdown or a worker's release: due again
        return Step(JobStatus.SCHEDULED, failures, run_at=now + _delay(retry_after))
    if outcome is Outcome.FAILED and not retryable(job, exit_code):
        return Step(JobStatus.DEAD, failures, dead_reason=DeadReason.NON_RETRYABLE)
    if outcome is Outcome.LEASE_EXPIRED and poison:
        return Step(JobStatus.DEAD, failures, dead_reason=DeadReason.POISON)
    if failures >= job.spec.max_attempts:
        reason = _SPENT.get(outcome, DeadReason.MAX_ATTEMPTS)
        return Step(JobStatus.DEAD, failures, dead_reason=reason)
    delay = rng.uniform(0.0, job.spec.backoff.ceiling(failures))
    if retry_after is not None:
        delay = max(delay, retry_after)
    return Step(JobStatus.SCHEDULED, failures, run_at=now + timedelta(seconds=delay))


def _delay(seconds: float | None) -> timedelta:
    return timedelta(seconds=seconds or 0.0)


def crash_poison(job_id: int, crashes: Sequence[set[int]]) -> bool:
    """Whether the daemon crashes that ended the job's last attempts point at the job.

    ``crashes``: for each of the job's most recent attempts in a row (newest first) that
    ended in a daemon crash with the job as a *suspect* (its command had already gone when
    the next daemon started: a command still running had outlived the crash, so the crash
    was not its doing), the set of every suspect of that crash. Poison needs
    :data:`POISON_CRASHES` such crashes in a row and this job as the only suspect common to
    all of them: unrelated crashes (a ``kill -9``, an OOM kill of the daemon, a power cut)
    hit whatever happened to be running, a job that takes the daemon down is there every time.
    """
    if len(crashes) < POISON_CRASHES:
        return False
    common = set.intersection(*crashes[:POISON_CRASHES])
    return common == {job_id}


def transient_step(job: Job, now: datetime, rng: random.Random) -> Step:
    """The host ran out of descriptors, memory or disk when the command was to start: not
    the job's fault, so it costs no attempt of the budget and is never a reason to die.
    It waits with the job's backoff, counted over the attempts that used no budget, with
    "equal jitter" (between half the ceiling and the ceiling) and at least
    :data:`TRANSIENT_MIN_DELAY`, so a host out of descriptors is not hammered."""
    free = max(1, job.attempt - job.failures)
    ceiling = max(TRANSIENT_MIN_DELAY, job.spec.backoff.ceiling(free))
    delay = rng.uniform(ceiling / 2, ceiling)
    return Step(JobStatus.SCHEDULED, job.failures, run_at=now + timedelta(seconds=delay))
