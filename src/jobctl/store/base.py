"""The store contract: the only way any other part of jobctl reads or changes jobs.

Every method is one atomic state-machine operation. Writes are compare-and-sets on
``(status, generation)``; when the condition does not hold they raise a typed error
(:class:`~jobctl.errors.LeaseLost`, :class:`~jobctl.errors.IllegalTransition`,
:class:`~jobctl.errors.NotFound`) and change nothing. Time comes from the store's
injected clock, never from the caller, so every backend agrees on "now".

Methods are synchronous and safe to call from any thread; the daemon calls them through
:class:`jobctl.store.aio.AsyncStore`. The contract suite in ``tests/contract`` runs
against every backend for the parts of this contract the backend declares (PostgreSQL:
the job part only, not schedules; see ``BACKENDS`` in ``tests/contract/conftest.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar

from jobctl.domain.audit import AuditRecord
from jobctl.domain.clock import Clock
from jobctl.domain.cluster import DaemonBeat
from jobctl.domain.dispatch import QueuePolicy
from jobctl.domain.http import WebhookSecret
from jobctl.domain.models import (
    Attempt,
    AttemptResult,
    Claim,
    Finished,
    Job,
    JobSpec,
    Orphan,
    ProcessRecord,
    QueueStats,
)
from jobctl.domain.schedule import (
    Materialized,
    Schedule,
    ScheduleEdit,
    ScheduleSpec,
    SkipRecord,
    Skips,
)
from jobctl.domain.states import JobStatus
from jobctl.domain.workers import Lessee
from jobctl.errors import JobctlError, Unavailable
from jobctl.store.retention import Pruned

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Inserted:
    job: Job
    created: bool  # False: the key existed with the same body; this is that job


@dataclass(frozen=True, slots=True)
class Cancelled:
    job: Job
    was_running: bool
    generation: int  # of the attempt that was stopped, when was_running


@dataclass(frozen=True, slots=True)
class Wakeups:
    due_now: bool
    next_run_at: datetime | None
    next_lease_expiry: datetime | None
    #: Jobs whose time has come still sit in the future bucket (not yet promoted).
    unpromoted: bool = False


class Store(Protocol):
    clock: Clock

    def insert(self, specs: Sequence[JobSpec]) -> list[Inserted]:
        """Insert all jobs or none.

        A known key returns the stored job; KeyConflict if its body differs.
        """
        ...

    def claim_due(self, owner: str, limit: int, lease_ttl: float) -> list[Claim]:
        """Lease up to ``limit`` due jobs, highest priority first, then oldest ``run_at``.

        Each claim's job carries the limits its attempt runs under: its own, else its
        queue's (read in the claim's transaction; the stored job keeps its own)."""
        ...

    def lease(
        self, queues: Sequence[str], lessee: Lessee, limit: int, lease_ttl: float
    ) -> list[Claim]:
        """A pull worker's lease (docs/workers.md): up to ``limit`` due jobs of the asked
        worker queues the lessee may take (their own; every owner's if an admin or named
        by the queue's list), leased as ``@worker:UID``; the executor never claims them."""
        ...

    def worker_queues(self) -> dict[str, tuple[str, ...]]:
        """The worker queues and who besides owners and admins may lease their jobs."""
        ...

    def set_worker_queue(self, name: str, allow: Sequence[str] | None) -> tuple[str, ...]:
        """Make ``name`` a worker queue (Conflict if command or http jobs wait or run in
        it); ``allow``: its list of ``uid:N``/``gid:N`` (None: keep it)."""
        ...

    def promote_due(self, limit: int) -> int:
        """Move up to ``limit`` jobs whose ``run_at`` has passed from the future bucket to
        the due bucket (oldest first); returns how many moved. Claims do this too; the
        timer calls it while every executor slot is busy, so a backlog is counted in
        ``job_counts`` (cheap, exact status) long before it can start."""
        ...

    def record_process(
        self, job_id: int, generation: int, pid: int, pid_start: int | None, log_path: str
    ) -> None:
        """Remember the attempt's process so a restarted daemon can stop a survivor."""
        ...

    def record_notification(self, job_id: int, notified: str) -> None:
        """Keep what a dead job's failure notification did (a JSON object text), shown by
        ``show``. NotFound if the job is gone (purged meanwhile)."""
        ...

    def heartbeat(self, leases: Sequence[tuple[int, int]], lease_ttl: float) -> list[int]:
        """Extend each ``(job_id, generation)`` lease; return the job ids whose lease is lost."""
        ...

    def finish(self, job_id: int, generation: int, result: AttemptResult) -> Job:
        """Record the attempt's end and move the job on (retry, succeed, die).

        LeaseLost if ``generation`` is not the job's current running generation.
        """
        ...

    def record_processes(self, records: Sequence[ProcessRecord]) -> list[int]:
        """:meth:`record_process` for many attempts in one atomic write; return the job ids
        whose lease is lost (those records change nothing; the others are stored).

        Why: the executor starts many commands at once, and one write per command made the
        writer round trip, not the work, the cost of a drain. Per item, like
        :meth:`heartbeat`: one stale generation must not refuse its neighbours.
        """
        ...

    def finish_many(
        self, items: Sequence[tuple[int, int, AttemptResult]]
    ) -> list[Finished | JobctlError]:
        """:meth:`finish` for many ``(job_id, generation, result)`` in one atomic write.

        Returns one entry per item, in order: what the finish did (:class:`Finished`), or
        the error :meth:`finish` would have raised (``LeaseLost``, ``NotFound``, ...) for
        an item that changed nothing. One stale item never sinks the others. Why: one
        transaction and one round trip for every attempt that ended meanwhile, instead of
        one each; the answer (like every write's) comes only after the commit.
        """
        ...

    def reclaim_expired(self, limit: int, spare_owner: str | None = None) -> list[Job]:
        """End attempts whose lease ran out as ``lease_expired``; retry or kill the job.

        Leases of ``spare_owner`` are left alone: a daemon never reclaims its own live
        work (its executor fences and stops it through the heartbeat instead).
        """
        ...

    def degraded(self) -> str | None:
        """Why the store refuses writes (its file was found corrupt while running), else
        None. Nothing clears it but a restart on a repaired file."""
        ...

    def running(self) -> list[Orphan]:
        """Every running job with the process recorded for its current attempt."""
        ...

    def mark_crash_evidence(self, marks: Sequence[tuple[int, int, bool]]) -> None:
        """Keep what start-up recovery found of each orphan ``(job id, generation, suspect)``:
        ``suspect`` when its command had already gone. The first mark of an attempt stays."""
        ...

    def reclaim(self, job_id: int, generation: int, error: str) -> Job:
        """End a running attempt as ``lease_expired`` now, before its lease runs out.

        The job is dead as ``poison`` when the crashes that ended its latest attempts point
        at it (:func:`jobctl.domain.retry.crash_poison`, over the marks kept by
        :meth:`mark_crash_evidence`); otherwise the attempt uses budget like any lost lease.
        """
        ...

    def cancel(self, job_id: int, reason: str) -> Cancelled: ...

    def replay(
        self,
        job_ids: Sequence[int] | None,
        limit: int,
        queue: str | None = None,
        reason: str | None = None,
        rate: float | None = None,
        owner: int | None = None,
    ) -> list[Job]:
        """Move dead jobs back to scheduled with a fresh budget (only those still dead).

        Without ``job_ids``: the oldest deaths first, filtered by queue and dead reason.
        With ``rate``: the n-th job is due n/rate seconds from now. ``owner`` (here and in
        the other lists and bulk actions): only that user's jobs; None: everyone's.
        """
        ...

    def get(self, job_id: int, attempts: bool = True) -> Job:
        """The job with its attempts (none with ``attempts=False``: a page of them is
        :meth:`list_attempts`); NotFound if unknown."""
        ...

    def get_latest(self, job_id: int, last: int) -> tuple[Job, int]:
        """The job with only its last ``last`` attempts (in order) and how many attempts
        it has, read in one snapshot: what a job's detail shows, bounded however often the
        job was retried or replayed; NotFound if unknown."""
        ...

    def list_jobs(
        self,
        status: JobStatus | None,
        queue: str | None,
        limit: int,
        before: int | None,
        owner: int | None = None,
    ) -> list[Job]:
        """Newest first: a page of at most ``limit`` jobs with ids below ``before``."""
        ...

    def list_attempts(self, job_id: int, limit: int, after: int = 0) -> list[Attempt]:
        """A page of the job's attempts in order, numbers above ``after`` (a job replayed
        again and again has no bound on its attempts)."""
        ...

    def stats(self) -> list[QueueStats]: ...

    def log_bytes(self, uid: int | None = None) -> int:
        """Bytes of attempt logs on disk, accounted when each attempt ended (the size
        recorded by ``finish_many``) and taken off when its job is deleted; ``uid``:
        only that owner's."""
        ...

    def owner_usage(self, uid: int) -> dict[str, int]:
        """One owner's ``queued`` (scheduled: waiting or due) and ``running`` jobs and live
        ``schedules``, read from counters and indexes (the quotas are checked against it)."""
        ...

    def wakeups(self, spare_owner: str | None = None) -> Wakeups:
        """What the timer waits for: due work now, the next run_at, the next lease expiry
        (leases of ``spare_owner`` left out, as in :meth:`reclaim_expired`)."""
        ...

    def daemons(self) -> list[DaemonBeat]:
        """The daemons sharing this store with their last heartbeat (PostgreSQL's
        ``daemons`` table); empty where one daemon owns the store (SQLite)."""
        ...

    def together(self, fn: Callable[[], T]) -> T:
        """``fn()``, whose reads of this store share one transaction where that saves
        trips to the database (PostgreSQL: one connection, one BEGIN and COMMIT for
        ``status``'s dozen reads); SQLite, whose reads are in-process, runs ``fn`` as is."""
        ...

    # -- queues and the dead-letter queue --------------------------------------------

    def queues(self) -> list[tuple[QueuePolicy, float | None]]:
        """Configured queues with their current tokens (None when not rate limited)."""
        ...

    def queue_policy(self, name: str) -> QueuePolicy: ...

    def set_queue(self, policy: QueuePolicy) -> QueuePolicy:
        """Create or replace a queue's settings: its limits and its jobs' defaults (a
        claim fills the queue's ``resources`` in where a job gives none)."""
        ...

    def list_dead(
        self,
        queue: str | None,
        reason: str | None,
        since: datetime | None,
        limit: int,
        owner: int | None = None,
        before: tuple[datetime, int] | None = None,
    ) -> list[Job]:
        """Most recent deaths first: a page of at most ``limit``, before the keyset
        ``(finished_at, id)`` of the last job of the previous page."""
        ...

    def purge_dead(
        self, older_than: datetime, limit: int, owner: int | None = None
    ) -> tuple[int, list[str]]:
        """Delete dead jobs that died before ``older_than``; return the count and log files."""
        ...

    # -- retention ------------------------------------------------------------------

    def prunable(self, cutoffs: Mapping[str, datetime]) -> dict[str, int]:
        """Per final status, how many jobs finished before its cutoff."""
        ...

    def prune(self, cutoffs: Mapping[str, datetime], limit: int = 1000) -> Pruned:
        """Delete a batch of finished jobs older than their status's cutoff."""
        ...

    def checkpoint(self) -> tuple[int, int]:
        """Keep the write-ahead log bounded (backends without one may do nothing)."""
        ...

    # -- the audit trail -------------------------------------------------------------

    def audit(self, records: Sequence[AuditRecord]) -> None:
        """Queue audit records without waiting: they are written with the next commit,
        or on their own a moment later (never an fsync per request on a busy daemon)."""
        ...

    def flush_audit(self) -> None:
        """Write every queued audit record now."""
        ...

    def list_audit(
        self,
        uid: int | None = None,
        action: str | None = None,
        since: datetime | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[AuditRecord]:
        """Kept records, newest first (ids before ``before``); ``action`` also matches the
        actions under it (``schedules`` matches ``schedules.pause``)."""
        ...

    def prune_audit(self, before: datetime, limit: int = 5000) -> int:
        """Delete up to ``limit`` of the oldest records from before ``before``; how many."""
        ...

    # -- schedules (definitions; the materializer turns occurrences into jobs) ---------

    def create_schedule(self, spec: ScheduleSpec) -> Schedule:
        """Store a schedule; its cursor starts at the first fire time after now."""
        ...

    def create_schedules(self, specs: Sequence[ScheduleSpec]) -> list[Schedule | JobctlError]:
        """Store many schedules in one transaction, each answering alone and in order: the
        schedule, or the error :meth:`create_schedule` would have raised for it (a name
        taken: Conflict; a template the store refuses: InvalidInput). One refused item
        never sinks the others. Why: an import of many schedules is one request and one
        commit, not one each (issue 18)."""
        ...

    def get_schedule(self, ref: str, owner: int | None = None) -> Schedule:
        """By id or name (deleted ones by id only); NotFound otherwise. Names are unique
        per owner: with ``owner``, a name means that user's schedule."""
        ...

    def list_schedules(
        self,
        include_deleted: bool = False,
        limit: int = 1000,
        after: str | None = None,
        owner: int | None = None,
    ) -> list[Schedule]:
        """A page of schedules, oldest first, after the one with id ``after``.

        Paged because a daemon with 1,000,000 schedules must not build them all at once;
        ``after`` only positions the page (keyset on creation time and id): the ``owner``
        filter applies to every page whoever's schedule ``after`` names.
        """
        ...

    def pause_schedule(self, ref: str) -> Schedule: ...

    def resume_schedule(self, ref: str) -> tuple[Schedule, Skips]:
        """Resume from the next future occurrence; those passed while paused are recorded."""
        ...

    def delete_schedule(self, ref: str) -> Schedule:
        """Stop it for good; its jobs and history stay."""
        ...

    def edit_schedule(
        self, ref: str, spec: ScheduleSpec, base: ScheduleSpec, editor_uid: int
    ) -> tuple[Schedule, ScheduleEdit]:
        """Replace the definition ``base`` (as the caller read it; a different one is a
        Conflict) with ``spec`` in one transaction: due occurrences are settled under the
        old definition first, the cursor is recomputed from now when the timing changed,
        ``broken`` is cleared and the edit recorded. A deleted schedule is NotFound."""
        ...

    def schedule_edits(self, ref: str, limit: int) -> list[ScheduleEdit]:
        """Recorded edits, newest first."""
        ...

    def trigger_schedule(self, ref: str) -> Job:
        """A manual occurrence now, with its own key."""
        ...

    def schedule_history(self, ref: str, limit: int) -> tuple[list[Job], list[SkipRecord]]: ...

    def schedule_totals(self) -> dict[str, Any]:
        """Live schedules, paused, broken and the skip counts of live schedules, with the
        next run: read from counters kept in the transaction of every change, so the cost
        does not grow with the number of schedules."""
        ...

    def schedule_wakeup(self) -> datetime | None:
        """When the materializer has work next."""
        ...

    def materialize(self, limit: int) -> Materialized:
        """Create the jobs of due occurrences and advance their schedules, atomically."""
        ...

    def close(self) -> None: ...


class SecretStore(Protocol):
    """Webhook signing secrets: :class:`jobctl.store.secrets.SecretOps`, the ``secrets``
    part of both stores (SQLite and PostgreSQL)."""

    def create_secret(self, owner_uid: int, name: str, secret: str) -> WebhookSecret: ...
    def get_secret(self, owner_uid: int, name: str) -> WebhookSecret: ...
    def list_secrets(self, owner_uid: int | None) -> list[WebhookSecret]: ...
    def rotate_secret(
        self, owner_uid: int, name: str, secret: str, grace_ms: int
    ) -> WebhookSecret: ...
    def delete_secret(self, owner_uid: int, name: str) -> None: ...
    def signing_secrets(self, owner_uid: int, name: str | None) -> list[str]: ...


def secrets_of(store: object) -> SecretStore:
    """The store's secrets part; Unavailable on a backend without one."""
    found = getattr(store, "secrets", None)
    if found is None:
        raise Unavailable("this store backend keeps no webhook secrets")
    part: SecretStore = found
    return part
