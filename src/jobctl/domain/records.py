"""What the store hands back: jobs and their attempts, claims, finishes, processes and
queue counts. Plain frozen dataclasses, no I/O; times are aware UTC datetimes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from jobctl.domain.states import DeadReason, JobStatus, Outcome

if TYPE_CHECKING:
    from jobctl.domain.models import JobSpec


@dataclass(frozen=True, slots=True)
class Attempt:
    job_id: int
    number: int
    generation: int
    started_at: datetime
    finished_at: datetime | None
    outcome: Outcome | None
    exit_code: int | None
    error: str | None
    output_tail: str
    log_path: str | None
    pid: int | None
    lease_owner: str
    #: An http job's attempt: the answer's status, the call's latency and the SHA-256
    #: (hex) of the exact body bytes sent and signed.
    http_status: int | None = None
    latency_ms: int | None = None
    body_sha256: str | None = None


@dataclass(frozen=True, slots=True)
class Job:
    id: int
    key: str
    spec: JobSpec
    status: JobStatus
    run_at: datetime
    created_at: datetime
    attempt: int
    failures: int
    generation: int
    lease_owner: str | None
    lease_until: datetime | None
    finished_at: datetime | None
    last_error: str | None
    dead_reason: str | None
    attempts: tuple[Attempt, ...] = ()
    #: What the failure notification did (engine/notifier.py), as stored: a JSON object
    #: text, or None when none ran.
    notified: str | None = None


@dataclass(frozen=True, slots=True)
class Claim:
    """A job handed to an executor: run it under ``generation`` until ``lease_until``."""

    job: Job
    attempt: int
    generation: int
    lease_until: datetime


@dataclass(frozen=True, slots=True)
class AttemptResult:
    outcome: Outcome
    exit_code: int | None = None
    error: str | None = None
    output_tail: str = ""
    #: A failure no retry can mend (its owner may no longer run jobs): the job is dead
    #: with this reason whatever budget it has left.
    dead_reason: DeadReason | None = None
    #: The command could not be started for want of a resource (descriptors, memory,
    #: disk): retried with backoff and without using the budget (domain/retry.py).
    transient: bool = False
    #: Size of the attempt's log file when it ended (accounted in ``status``).
    log_bytes: int = 0
    #: A receiver's ``Retry-After`` (seconds, bounded): the retry waits at least this.
    retry_after: float | None = None
    #: An http job's attempt (:class:`Attempt`'s fields of the same names).
    http_status: int | None = None
    latency_ms: int | None = None
    body_sha256: str | None = None


@dataclass(frozen=True, slots=True)
class Finished:
    """What a committed finish did to its job: the few fields the executor reports.

    Lean on purpose (no spec, no attempts): ``Store.finish_many`` returns one per item and
    building a full :class:`Job` per finished attempt was a measurable share of a drain.
    """

    job_id: int
    status: JobStatus
    run_at: datetime
    failures: int
    dead_reason: str | None = None


@dataclass(frozen=True, slots=True)
class ProcessRecord:
    """An attempt's process, for ``Store.record_processes`` (crash recovery stops it)."""

    job_id: int
    generation: int
    pid: int
    pid_start: int | None
    log_path: str


@dataclass(frozen=True, slots=True)
class QueueStats:
    queue: str
    scheduled: int
    due: int
    running: int
    succeeded: int
    dead: int
    cancelled: int
    oldest_due: datetime | None


@dataclass(frozen=True, slots=True)
class Orphan:
    """A running attempt whose daemon died; its process may still be alive."""

    job_id: int
    generation: int
    lease_owner: str
    pid: int | None
    pid_start: int | None
