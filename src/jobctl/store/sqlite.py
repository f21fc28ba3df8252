"""The SQLite backend: one file in WAL mode, one writer thread, readers on their own.

All SQL comes from ``sql/queries.sql``; every change runs inside the group-commit
writer (:mod:`jobctl.store.writer`), so an answer means the change is on disk.

:class:`SqliteStore` is assembled by composition: one :class:`SqliteDb` (the file, the
writer, the readers, the clock) shared by a handful of parts, each a small class in its
own module. This class is the table of contents: every method of the store contract
(:class:`jobctl.store.base.Store`) and the part that implements it.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from datetime import datetime
from pathlib import Path

from jobctl.domain.audit import AuditRecord
from jobctl.domain.clock import Clock
from jobctl.domain.cluster import DaemonBeat
from jobctl.domain.dispatch import QueuePolicy
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
from jobctl.domain.quota import Limits
from jobctl.domain.states import JobStatus
from jobctl.domain.workers import Lessee
from jobctl.errors import IllegalTransition, JobctlError
from jobctl.store import workerq
from jobctl.store.audit import PRUNE_AUDIT_BATCH, AuditOps
from jobctl.store.base import Cancelled, Inserted, T, Wakeups
from jobctl.store.claims import ClaimRows
from jobctl.store.crashes import CrashMark, CrashOps
from jobctl.store.finishing import FinishItem, FinishOps
from jobctl.store.health import Health
from jobctl.store.jobs import JobOps
from jobctl.store.queues import QueueOps
from jobctl.store.retention import PRUNE_BATCH, Pruned, RetentionOps
from jobctl.store.schedconn import SqliteSchedConn
from jobctl.store.schedule_methods import ScheduleMethods
from jobctl.store.schedules import ScheduleOps
from jobctl.store.secrets import SecretOps
from jobctl.store.sqlitedb import SqliteDb, connect


class SqliteStore(ScheduleMethods):
    """See :class:`jobctl.store.base.Store` for the contract of each method. The schedule
    methods are :class:`ScheduleMethods`' (``schedule_ops``: jobctl.store.schedules)."""

    def __init__(
        self,
        path: str | Path,
        clock: Clock,
        rng: random.Random | None = None,
        *,
        lock: bool = True,
    ) -> None:
        self.db = SqliteDb(path, clock, rng, lock=lock)
        self.path = self.db.path
        self.clock = clock
        self.health: Health = self.db.health
        self._jobs = JobOps(self.db)
        self._finishing = FinishOps(self.db, self._jobs)
        self._crashes = CrashOps(self.db)
        self._queues = QueueOps(self.db)
        wrap = lambda conn: SqliteSchedConn(conn, self._jobs.insert_tx)  # noqa: E731
        self.schedule_ops = ScheduleOps(self.db, clock, wrap)
        self._retention = RetentionOps(self.db)
        self._audit = AuditOps(self.db)
        #: Webhook signing secrets (store/secrets.py): ``store.secrets.get_secret(…)``.
        self.secrets = SecretOps(self.db, self.db.now_ms, wrap)

    @property
    def quota(self) -> Callable[[int], Limits] | None:
        """Per-owner quotas (the daemon sets it); None: nobody has a quota."""
        return self.db.quota

    @quota.setter
    def quota(self, value: Callable[[int], Limits] | None) -> None:
        self.db.quota = value

    def degraded(self) -> str | None:
        return self.health.degraded

    def close(self) -> None:
        self.db.close()

    # -- jobs (jobctl.store.jobs) --------------------------------------------------------

    def insert(self, specs: Sequence[JobSpec]) -> list[Inserted]:
        return self._jobs.insert(specs)

    def submit_insert_groups(
        self, groups: Sequence[Sequence[JobSpec]]
    ) -> Future[list[list[Inserted] | JobctlError]]:
        return self._jobs.submit_insert_groups(groups)

    def record_process(
        self, job_id: int, generation: int, pid: int, pid_start: int | None, log_path: str
    ) -> None:
        self._jobs.record_process(job_id, generation, pid, pid_start, log_path)

    def record_notification(self, job_id: int, notified: str) -> None:
        self._jobs.record_notification(job_id, notified)

    def heartbeat(self, leases: Sequence[tuple[int, int]], lease_ttl: float) -> list[int]:
        return self._jobs.heartbeat(leases, lease_ttl)

    def finish(self, job_id: int, generation: int, result: AttemptResult) -> Job:
        return self._jobs.finish(job_id, generation, result)

    def reclaim_expired(self, limit: int, spare_owner: str | None = None) -> list[Job]:
        return self._jobs.reclaim_expired(limit, spare_owner)

    def reclaim(self, job_id: int, generation: int, error: str) -> Job:
        return self._jobs.reclaim(job_id, generation, error)

    def cancel(self, job_id: int, reason: str) -> Cancelled:
        return self._jobs.cancel(job_id, reason)

    def replay(
        self,
        job_ids: Sequence[int] | None,
        limit: int,
        queue: str | None = None,
        reason: str | None = None,
        rate: float | None = None,
        owner: int | None = None,
    ) -> list[Job]:
        return self._jobs.replay(job_ids, limit, queue, reason, rate, owner)

    def get(self, job_id: int, attempts: bool = True) -> Job:
        return self._jobs.get(job_id, attempts)

    def get_latest(self, job_id: int, last: int) -> tuple[Job, int]:
        return self._jobs.get_latest(job_id, last)

    def list_attempts(self, job_id: int, limit: int, after: int = 0) -> list[Attempt]:
        return self._jobs.list_attempts(job_id, limit, after)

    def list_jobs(
        self,
        status: JobStatus | None,
        queue: str | None,
        limit: int,
        before: int | None,
        owner: int | None = None,
    ) -> list[Job]:
        return self._jobs.list_jobs(status, queue, limit, before, owner)

    def stats(self) -> list[QueueStats]:
        return self._jobs.stats()

    def owner_usage(self, uid: int) -> dict[str, int]:
        return self._jobs.owner_usage(uid)

    def running(self) -> list[Orphan]:
        return self._jobs.running()

    def wakeups(self, spare_owner: str | None = None) -> Wakeups:
        return self._jobs.wakeups(spare_owner)

    def daemons(self) -> list[DaemonBeat]:
        return []  # one daemon owns the file (its flock): no cluster to list

    def together(self, fn: Callable[[], T]) -> T:
        return fn()  # in-process reads: nothing to share

    # -- executor batches (jobctl.store.finishing) and crash evidence --------------------

    def finish_many(self, items: Sequence[FinishItem]) -> list[Finished | JobctlError]:
        return self._finishing.finish_many(items)

    def submit_finish_many(
        self, items: Sequence[FinishItem]
    ) -> Future[list[Finished | JobctlError]]:
        return self._finishing.submit_finish_many(items)

    def submit_finish_riding(
        self, items: Sequence[FinishItem], records: Sequence[ProcessRecord]
    ) -> Future[list[Finished | JobctlError]]:
        return self._finishing.submit_finish_riding(items, records)

    def record_processes(self, records: Sequence[ProcessRecord]) -> list[int]:
        return self._finishing.record_processes(records)

    def submit_record_processes(self, records: Sequence[ProcessRecord]) -> Future[list[int]]:
        return self._finishing.submit_record_processes(records)

    def log_bytes(self, uid: int | None = None) -> int:
        return self._finishing.log_bytes(uid)

    def mark_crash_evidence(self, marks: Sequence[CrashMark]) -> None:
        self._crashes.mark_crash_evidence(marks)

    # -- queues and the dead-letter queue (jobctl.store.queues) --------------------------

    def claim_due(self, owner: str, limit: int, lease_ttl: float) -> list[Claim]:
        return self._queues.claim_due(owner, limit, lease_ttl)

    def submit_claim_rows(self, owner: str, limit: int, lease_ttl: float) -> Future[ClaimRows]:
        return self._queues.submit_claim_rows(owner, limit, lease_ttl)

    # -- worker queues (jobctl.store.workerq, docs/workers.md) ---------------------------

    def lease(
        self, queues: Sequence[str], lessee: Lessee, limit: int, lease_ttl: float
    ) -> list[Claim]:
        return self._queues.lease(queues, lessee, limit, lease_ttl)

    def worker_queues(self) -> dict[str, tuple[str, ...]]:
        return self.db.read(lambda conn: workerq.worker_queues(self._wrap(conn)))

    def set_worker_queue(self, name: str, allow: Sequence[str] | None) -> tuple[str, ...]:
        return self.db.write(lambda conn: workerq.mark(self._wrap(conn), name, allow))

    def _wrap(self, conn: sqlite3.Connection) -> SqliteSchedConn:
        return SqliteSchedConn(conn, self._jobs.insert_tx)

    def promote_due(self, limit: int) -> int:
        return self._queues.promote_due(limit)

    def queues(self) -> list[tuple[QueuePolicy, float | None]]:
        return self._queues.queues()

    def queue_policy(self, name: str) -> QueuePolicy:
        return self._queues.queue_policy(name)

    def set_queue(self, policy: QueuePolicy) -> QueuePolicy:
        return self._queues.set_queue(policy)

    def list_dead(
        self,
        queue: str | None,
        reason: str | None,
        since: datetime | None,
        limit: int,
        owner: int | None = None,
        before: tuple[datetime, int] | None = None,
    ) -> list[Job]:
        return self._queues.list_dead(queue, reason, since, limit, owner, before)

    def purge_dead(
        self, older_than: datetime, limit: int, owner: int | None = None
    ) -> tuple[int, list[str]]:
        return self._queues.purge_dead(older_than, limit, owner)

    # -- retention (jobctl.store.retention) and the audit trail (jobctl.store.audit) -----

    def prunable(self, cutoffs: Mapping[str, datetime]) -> dict[str, int]:
        return self._retention.prunable(cutoffs)

    def prune(self, cutoffs: Mapping[str, datetime], limit: int = PRUNE_BATCH) -> Pruned:
        return self._retention.prune(cutoffs, limit)

    def checkpoint(self) -> tuple[int, int]:
        return self._retention.checkpoint()

    def audit(self, records: Sequence[AuditRecord]) -> None:
        self._audit.audit(records)

    def flush_audit(self) -> None:
        self._audit.flush_audit()

    def list_audit(
        self,
        uid: int | None = None,
        action: str | None = None,
        since: datetime | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[AuditRecord]:
        return self._audit.list_audit(uid, action, since, before, limit)

    def prune_audit(self, before: datetime, limit: int = PRUNE_AUDIT_BATCH) -> int:
        return self._audit.prune_audit(before, limit)


__all__ = ["IllegalTransition", "SqliteStore", "connect"]
