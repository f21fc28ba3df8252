"""The PostgreSQL backend (extra ``postgres``): several daemons may share one database.

:class:`PostgresStore` is composed like :class:`jobctl.store.sqlite.SqliteStore`: one
:class:`~jobctl.store.pg.db.PgDb` (pool, group commit, named queries, clock) and the parts
that use it. It implements the job, queue, dead-letter, retention, audit and crash-evidence
part of the store contract, and the schedule part through the logic SQLite runs too
(:class:`jobctl.store.schedules.ScheduleOps` over :class:`PgSchedConn`); see
docs/architecture.md, "The PostgreSQL backend", for what is not on it yet.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from datetime import datetime
from typing import Any

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
from jobctl.domain.schedule import (
    Materialized,
)
from jobctl.domain.states import JobStatus, Op
from jobctl.domain.workers import DEFAULT_LEASE_TTL, Lessee
from jobctl.errors import JobctlError, LeaseLost
from jobctl.store import workerq
from jobctl.store.audit import PRUNE_AUDIT_BATCH
from jobctl.store.base import Cancelled, Inserted, T, Wakeups
from jobctl.store.finishing import FinishItem
from jobctl.store.pg.audit import PgAuditWriter
from jobctl.store.pg.cluster import PgCluster
from jobctl.store.pg.counts import fold
from jobctl.store.pg.db import PgDb
from jobctl.store.pg.insertbatch import InsertBatcher, LoopInserts
from jobctl.store.pg.jobs import PgJobs
from jobctl.store.pg.notify import Listener, Notifier
from jobctl.store.pg.queues import PgQueues
from jobctl.store.pg.schedconn import PgSchedConn
from jobctl.store.retention import PRUNE_BATCH, Pruned
from jobctl.store.schedule_methods import ScheduleMethods
from jobctl.store.schedules import ScheduleOps
from jobctl.store.secrets import SecretOps

#: The wake-up a materialization sends (its jobs' queues are not read back).
SCHEDULES_CHANNEL_KEY = "schedules"


class PostgresStore(ScheduleMethods):
    """See :class:`jobctl.store.base.Store` for the contract of each method."""

    def __init__(
        self,
        dsn: str,
        clock: Clock,
        rng: random.Random | None = None,
        *,
        schema: str | None = None,
        pool_size: int = 8,
        lease_ttl: float = DEFAULT_LEASE_TTL,
    ) -> None:
        """``lease_ttl``: the daemon's, which sizes the connections' keepalives."""
        self.db = PgDb(dsn, clock, rng, schema=schema, pool_size=pool_size, lease_ttl=lease_ttl)
        self.clock = clock
        self._jobs = PgJobs(self.db)
        self._queues = PgQueues(self.db)
        self.notifier = Notifier(self.db)
        self._inserts = InsertBatcher(self.db, self.notifier)
        #: The event loop's way to the same writes (see :meth:`insert_groups_on_loop`).
        self.loop_inserts = LoopInserts(self.db, self.notifier, self._inserts)
        self.cluster = PgCluster(self.db)
        wrap = lambda conn: PgSchedConn(self.db, conn)  # noqa: E731
        self.schedule_ops = ScheduleOps(self.db, clock, wrap)
        #: Webhook signing secrets (store/secrets.py, shared with SQLite).
        self.secrets = SecretOps(self.db, self.db.now_ms, wrap)
        self._audit = PgAuditWriter(self.db)
        self.db.commits.rider = self._audit  # every commit carries the queued records

    @property
    def quota(self) -> Callable[[int], Limits] | None:
        return self.db.quota

    @quota.setter
    def quota(self, value: Callable[[int], Limits] | None) -> None:
        self.db.quota = value

    def degraded(self) -> str | None:
        return None  # the server keeps its own files; an outage is a 503 per request

    def close(self) -> None:
        self.flush_audit()
        self.notifier.close()
        self.db.close()

    # -- jobs ----------------------------------------------------------------------------

    def insert(self, specs: Sequence[JobSpec]) -> list[Inserted]:
        (outcome,) = self.submit_insert_groups([specs]).result()
        if isinstance(outcome, JobctlError):
            raise outcome
        return outcome

    def submit_insert_groups(
        self, groups: Sequence[Sequence[JobSpec]]
    ) -> Future[list[list[Inserted] | JobctlError]]:
        """Concurrent callers' groups join one write (see :class:`InsertBatcher`)."""
        return self._inserts.submit(groups)

    async def insert_groups_on_loop(
        self, groups: Sequence[Sequence[JobSpec]]
    ) -> list[list[Inserted] | JobctlError]:
        """As :meth:`submit_insert_groups`, awaited on the running event loop, which drives
        the pipelined commit itself: no committer thread between the request and its
        answer (:mod:`jobctl.store.pg.loopcommit`)."""
        return await self.loop_inserts.insert(groups)

    def record_process(
        self, job_id: int, generation: int, pid: int, pid_start: int | None, log_path: str
    ) -> None:
        if self.record_processes([ProcessRecord(job_id, generation, pid, pid_start, log_path)]):
            raise LeaseLost(
                f"job {job_id}: lease lost (generation {generation} is stale)",
                job_id=job_id,
                generation=generation,
            )

    def record_processes(self, records: Sequence[ProcessRecord]) -> list[int]:
        return self.submit_record_processes(records).result()

    def submit_record_processes(self, records: Sequence[ProcessRecord]) -> Future[list[int]]:
        return self.db.submit(lambda conn: self._jobs.record_processes_tx(conn, records))

    def record_notification(self, job_id: int, notified: str) -> None:
        self._jobs.record_notification(job_id, notified)

    def heartbeat(self, leases: Sequence[tuple[int, int]], lease_ttl: float) -> list[int]:
        return self._jobs.heartbeat(leases, lease_ttl)

    def finish(self, job_id: int, generation: int, result: AttemptResult) -> Job:
        return self.db.write(lambda conn: self._jobs.finish_tx(conn, job_id, generation, result))

    def finish_many(self, items: Sequence[FinishItem]) -> list[Finished | JobctlError]:
        return self.submit_finish_many(items).result()

    def submit_finish_many(
        self, items: Sequence[FinishItem]
    ) -> Future[list[Finished | JobctlError]]:
        return self.db.submit(lambda conn: self._jobs.finish_many_tx(conn, items))

    def reclaim_expired(self, limit: int, spare_owner: str | None = None) -> list[Job]:
        return self._jobs.reclaim_expired(limit, spare_owner)

    def reclaim(self, job_id: int, generation: int, error: str) -> Job:
        from jobctl.domain.states import Outcome

        result = AttemptResult(Outcome.LEASE_EXPIRED, error=error)
        return self.db.write(
            lambda conn: self._jobs.finish_tx(conn, job_id, generation, result, Op.RECLAIM)
        )

    def cancel(self, job_id: int, reason: str) -> Cancelled:
        done = self.db.write(lambda conn: self._jobs.cancel_tx(conn, job_id, reason))
        self.notifier.wake([done.job.spec.queue])  # its daemon stops it; a slot frees
        return done

    def listen(self, on_wake: Callable[[], None], *, poll_only: bool = False) -> Listener:
        """Call ``on_wake`` whenever another daemon enqueued, cancelled or replayed (see
        :mod:`jobctl.store.pg.notify`; this store's own wake-ups are skipped); close the
        listener to stop."""
        return Listener(self.db, on_wake, poll_only=poll_only, skip=self.notifier.senders)

    def replay(
        self,
        job_ids: Sequence[int] | None,
        limit: int,
        queue: str | None = None,
        reason: str | None = None,
        rate: float | None = None,
        owner: int | None = None,
    ) -> list[Job]:
        filters: dict[str, object] = {"queue": queue, "reason": reason, "owner": owner}
        jobs = self.db.write(lambda conn: self._jobs.replay_tx(conn, job_ids, limit, filters, rate))
        if jobs:
            self.notifier.wake({j.spec.queue for j in jobs})
        return jobs

    def mark_crash_evidence(self, marks: Sequence[tuple[int, int, bool]]) -> None:
        self._jobs.mark_crash_evidence(marks)

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
        params: dict[str, object] = {
            "status": status.value if status else None,
            "queue": queue,
            "limit": limit,
            "before": before if before is not None else 2**62,
            "owner": owner,
        }
        return self._jobs.list_jobs(params)

    def stats(self) -> list[QueueStats]:
        return self._jobs.stats()

    def log_bytes(self, uid: int | None = None) -> int:
        return self._jobs.log_bytes(uid)

    def owner_usage(self, uid: int) -> dict[str, int]:
        return self._jobs.owner_usage(uid)

    def running(self) -> list[Orphan]:
        return self._jobs.running()

    def wakeups(self, spare_owner: str | None = None) -> Wakeups:
        return self._jobs.wakeups(spare_owner)

    def together(self, fn: Callable[[], T]) -> T:
        return self.db.together(fn)

    def daemons(self) -> list[DaemonBeat]:
        return self.cluster.daemons()

    def daemon_beat(self, beat: DaemonBeat) -> None:
        """Write this daemon's row in ``daemons`` (at start and with every heartbeat)."""
        self.cluster.beat(beat)

    def daemon_stopped(self, owner: str) -> None:
        self.cluster.stopped(owner)

    # -- queues, the dead-letter queue, retention ----------------------------------------

    def claim_due(self, owner: str, limit: int, lease_ttl: float) -> list[Claim]:
        return self._queues.claim_due(owner, limit, lease_ttl)

    def lease(
        self, queues: Sequence[str], lessee: Lessee, limit: int, lease_ttl: float
    ) -> list[Claim]:
        return self._queues.lease(queues, lessee, limit, lease_ttl)

    def worker_queues(self) -> dict[str, tuple[str, ...]]:
        return self.db.read(lambda conn: workerq.worker_queues(PgSchedConn(self.db, conn)))

    def set_worker_queue(self, name: str, allow: Sequence[str] | None) -> tuple[str, ...]:
        return self.db.write(lambda conn: workerq.mark(PgSchedConn(self.db, conn), name, allow))

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
        from jobctl.store.rows import to_ms

        at, job_id = (2**62, 2**62) if before is None else (to_ms(before[0]), before[1])
        params: dict[str, object] = {
            "queue": queue,
            "reason": reason,
            "limit": limit,
            "since": to_ms(since) if since else 0,
            "owner": owner,
            "before_at": at,
            "before_id": job_id,
        }
        return self._queues.list_dead(params)

    def purge_dead(
        self, older_than: datetime, limit: int, owner: int | None = None
    ) -> tuple[int, list[str]]:
        return self._queues.purge_dead(older_than, limit, owner)

    def prunable(self, cutoffs: Mapping[str, datetime]) -> dict[str, int]:
        return self._queues.prunable(cutoffs)

    def prune(self, cutoffs: Mapping[str, datetime], limit: int = PRUNE_BATCH) -> Pruned:
        return self._queues.prune(cutoffs, limit)

    def checkpoint(self) -> tuple[int, int]:
        return 0, 0  # no write-ahead log of ours to bound: the server checkpoints itself

    def fold_counts(self) -> int | None:
        """Fold the striped job counters into stripe 0 (store/pg/counts.py); rows moved,
        or None if another daemon was folding."""
        return fold(self.db)

    # -- the audit trail -----------------------------------------------------------------

    def audit(self, records: Sequence[AuditRecord]) -> None:
        """Written by the next group commit, one statement for all queued (store/pg/audit.py);
        :meth:`flush_audit` waits for them."""
        self._audit.add(records)

    def flush_audit(self) -> None:
        self._audit.flush()

    def list_audit(
        self,
        uid: int | None = None,
        action: str | None = None,
        since: datetime | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[AuditRecord]:
        from jobctl.store.rows import to_ms

        params: dict[str, Any] = {
            "uid": uid,
            "action": action,
            "since": 0 if since is None else to_ms(since),
            "before": 2**62 if before is None else before,
            "limit": limit,
        }
        return self._queues.list_audit(params)

    def prune_audit(self, before: datetime, limit: int = PRUNE_AUDIT_BATCH) -> int:
        return self._queues.prune_audit(before, limit)

    # -- schedules (ScheduleMethods over jobctl.store.schedules, SQLite's logic too) ---

    def trigger_schedule(self, ref: str) -> Job:
        job = super().trigger_schedule(ref)
        self.notifier.wake([job.spec.queue])
        return job

    def materialize(self, limit: int) -> Materialized:
        done = super().materialize(limit)
        if done.created:  # jobs due now, which any daemon may run
            self.notifier.wake([SCHEDULES_CHANNEL_KEY])
        return done


__all__ = ["InsertBatcher", "PostgresStore"]
