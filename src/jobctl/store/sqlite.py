"""The SQLite backend: one file in WAL mode, one writer thread, readers on their own.

All SQL comes from ``sql/queries.sql``; every change runs inside the group-commit
writer (:mod:`jobctl.store.writer`), so an answer means the change is on disk.
"""

from __future__ import annotations

import logging
import random
import sqlite3
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

from jobctl.domain.clock import Clock
from jobctl.domain.dispatch import AGING_STEP, Fairness
from jobctl.domain.models import (
    Attempt,
    AttemptResult,
    Job,
    JobSpec,
    Orphan,
    ProcessRecord,
    QueueStats,
)
from jobctl.domain.quota import Limits
from jobctl.domain.retry import crash_poison, next_step
from jobctl.domain.states import JobStatus, Outcome, check_transition
from jobctl.errors import IllegalTransition, JobctlError, LeaseLost, NotFound
from jobctl.lograte import RateLimitedLog
from jobctl.store import rows
from jobctl.store.audit import AuditBuffer, AuditOps
from jobctl.store.base import Cancelled, Inserted, Wakeups
from jobctl.store.crashes import CrashOps, crash_streak
from jobctl.store.dblock import DbLock
from jobctl.store.finishing import FinishOps, stale
from jobctl.store.health import Health, check_at_start, is_corruption, refused_at_start
from jobctl.store.inserts import ITEM_ERRORS, created_job, insert_jobs, refused_by_store
from jobctl.store.migrate import migrate
from jobctl.store.queries import q
from jobctl.store.queues import QueueOps, claimable, over_queued_quota
from jobctl.store.retention import RetentionOps
from jobctl.store.schedules import ScheduleOps
from jobctl.store.writer import Writer

T = TypeVar("T")
BUSY_TIMEOUT_MS = 10_000
AGING_MS = int(AGING_STEP * 1000)
#: ``stats`` counts at most this many due jobs the timer has not promoted yet, so a
#: status call stays bounded whatever the backlog (the timer promotes them within ticks).
LATE_COUNT_CAP = 10_000


def connect(path: str, *, readonly: bool = False) -> sqlite3.Connection:
    conn = sqlite3.connect(
        path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
    )
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys=ON")
    if readonly:
        conn.execute("PRAGMA query_only=ON")
    else:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
    return conn


class SqliteStore(FinishOps, CrashOps, ScheduleOps, QueueOps, RetentionOps, AuditOps):
    """See :class:`jobctl.store.base.Store` for the contract of each method."""

    def __init__(
        self,
        path: str | Path,
        clock: Clock,
        rng: random.Random | None = None,
        *,
        lock: bool = True,
    ) -> None:
        self.path = str(path)
        self.clock = clock
        self._rng = rng or random.Random()
        self._lock = DbLock(self.path) if lock else None
        self._fairness = Fairness()  # touched only by the writer thread
        #: Per-owner quotas (the daemon sets it); None: nobody has a quota.
        self.quota: Callable[[int], Limits] | None = None
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._audit = AuditBuffer()  # rides along with the writer's next commit
        errors = RateLimitedLog(logging.getLogger("jobctl.store"), clock)
        self.health = Health(self.path)
        try:
            self._writer = Writer(
                self._open_writer,
                rider=self._audit,
                errors=errors,
                translate=self.health.translate,
                refusal=self.health.refusal,
            )
        except BaseException as exc:
            if self._lock is not None:
                self._lock.release()
                self._lock = None
            if is_corruption(exc):
                raise refused_at_start(self.path, exc) from None
            raise
        self._audit.nudge = self._writer.nudge

    def _open_writer(self) -> sqlite3.Connection:
        conn = connect(self.path)
        try:
            check_at_start(conn, self.path)
            migrate(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def degraded(self) -> str | None:
        return self.health.degraded

    def _now_ms(self) -> int:
        return rows.to_ms(self.clock.now())

    def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path, readonly=True)
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        try:
            conn.execute("BEGIN")
            try:
                return fn(conn)
            finally:
                conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            error = self.health.translate(exc)
            if error is exc:
                raise
            raise error from None

    # -- writes -----------------------------------------------------------------------

    def insert(self, specs: Sequence[JobSpec]) -> list[Inserted]:
        (outcome,) = self.submit_insert_groups([specs]).result()
        if isinstance(outcome, JobctlError):
            raise outcome
        return outcome

    def submit_insert_groups(
        self, groups: Sequence[Sequence[JobSpec]]
    ) -> Future[list[list[Inserted] | JobctlError]]:
        """Several callers' inserts as one write: each group answers what inserting it
        alone, in this order, would have answered (its jobs, or the error that refused it).

        The daemon hands every enqueue request of one event-loop turn over together: one
        id lookup, one ``executemany`` and one count upsert for all of them, instead of a
        savepoint, statements and a thread wake-up per request.
        """
        return self._writer.submit(lambda conn: self._insert_groups_tx(conn, groups))

    def _insert_groups_tx(
        self, conn: sqlite3.Connection, groups: Sequence[Sequence[JobSpec]]
    ) -> list[list[Inserted] | JobctlError]:
        refused = over_queued_quota(conn, self.quota, groups)
        if refused:
            return [
                refused.get(i) or self._insert_in_savepoint(conn, group)
                for i, group in enumerate(groups)
            ]
        if len(groups) > 1:
            flat = self._insert_in_savepoint(conn, [spec for group in groups for spec in group])
            if not isinstance(flat, JobctlError):
                out: list[list[Inserted] | JobctlError] = []
                start = 0
                for group in groups:
                    out.append(flat[start : start + len(group)])
                    start += len(group)
                return out
            # one group is refused (a key conflict, a row the store refuses): take them one
            # by one, so that it fails alone and its neighbours commit
        return [self._insert_in_savepoint(conn, group) for group in groups]

    def _insert_in_savepoint(
        self, conn: sqlite3.Connection, specs: Sequence[JobSpec]
    ) -> list[Inserted] | JobctlError:
        """:meth:`_insert_tx`, or the error that refused it, with nothing of it written."""
        conn.execute("SAVEPOINT insert_group")
        try:
            done = self._insert_tx(conn, specs)
        except JobctlError as exc:
            conn.execute("ROLLBACK TO insert_group")
            conn.execute("RELEASE insert_group")
            return exc
        except ITEM_ERRORS as exc:  # a row the store refuses (CHECK): this group alone
            conn.execute("ROLLBACK TO insert_group")
            conn.execute("RELEASE insert_group")
            return refused_by_store(exc)
        conn.execute("RELEASE insert_group")
        return done

    def _insert_tx(self, conn: sqlite3.Connection, specs: Sequence[JobSpec]) -> list[Inserted]:
        now_ms = self._now_ms()
        created_at = rows.ms_to_dt(now_ms)
        out = []
        for spec, new in zip(specs, insert_jobs(conn, specs, now_ms), strict=True):
            if new.created:  # everything is known: no need to read the row back
                out.append(Inserted(created_job(spec, new, created_at), True))
            else:
                row = conn.execute(q("job_by_id"), {"id": new.id}).fetchone()
                out.append(Inserted(rows.job_from_row(row), False))
        return out

    def record_process(
        self, job_id: int, generation: int, pid: int, pid_start: int | None, log_path: str
    ) -> None:
        if self.record_processes([ProcessRecord(job_id, generation, pid, pid_start, log_path)]):
            raise LeaseLost(
                f"job {job_id}: lease lost (generation {generation} is stale)",
                job_id=job_id,
                generation=generation,
            )

    def heartbeat(self, leases: Sequence[tuple[int, int]], lease_ttl: float) -> list[int]:
        def tx(conn: sqlite3.Connection) -> list[int]:
            until = self._now_ms() + int(lease_ttl * 1000)
            lost = []
            for job_id, gen in leases:
                params = {"id": job_id, "generation": gen, "lease_until": until}
                if conn.execute(q("heartbeat"), params).fetchone() is None:
                    lost.append(job_id)
            return lost

        return self._writer.call(tx)

    def finish(self, job_id: int, generation: int, result: AttemptResult) -> Job:
        return self._writer.call(lambda conn: self._finish_tx(conn, job_id, generation, result))

    def _finish_tx(
        self,
        conn: sqlite3.Connection,
        job_id: int,
        generation: int,
        result: AttemptResult,
        op: str = "finish",
    ) -> Job:
        job = self._running_job(conn, job_id, generation)
        now = self.clock.now()
        poison = result.outcome is Outcome.LEASE_EXPIRED and crash_poison(
            job_id, crash_streak(conn, job_id)
        )
        step = next_step(
            job,
            result.outcome,
            result.exit_code,
            now,
            self._rng,
            poison,
            result.dead_reason,
            result.transient,
        )
        check_transition(job_id, job.status, step.status, op)
        now_ms = rows.to_ms(now)
        conn.execute(
            q("finish_attempt"),
            {
                "job_id": job_id,
                "generation": generation,
                "now": now_ms,
                "outcome": result.outcome.value,
                "exit_code": result.exit_code,
                "error": result.error,
                "output_tail": result.output_tail,
            },
        )
        final = step.status is not JobStatus.SCHEDULED
        run_at = None if step.run_at is None else rows.to_ms(step.run_at)
        row = conn.execute(
            q("finish_job"),
            {
                "id": job_id,
                "generation": generation,
                "status": step.status.value,
                "due": int(run_at is not None and run_at <= now_ms),
                "run_at": run_at,
                "failures": step.failures,
                "finished_at": now_ms if final else None,
                "last_error": None if result.outcome is Outcome.SUCCEEDED else result.error,
                "dead_reason": step.dead_reason,
                "aging_ms": AGING_MS,
            },
        ).fetchone()
        return rows.job_from_row(row)

    def _running_job(self, conn: sqlite3.Connection, job_id: int, generation: int) -> Job:
        row = conn.execute(q("job_by_id"), {"id": job_id}).fetchone()
        if row is None:
            raise NotFound(f"no job {job_id}", job_id=job_id)
        if row["status"] != "running" or row["generation"] != generation:
            raise stale(job_id, generation, row)
        return rows.job_from_row(row)

    def reclaim_expired(self, limit: int, spare_owner: str | None = None) -> list[Job]:
        def tx(conn: sqlite3.Connection) -> list[Job]:
            now_ms = self._now_ms()
            expired = conn.execute(
                q("expired_leases"), {"now": now_ms, "limit": limit, "spare": spare_owner}
            )
            out = []
            for row in expired.fetchall():
                error = (
                    f"lease of {row['lease_owner']} expired at "
                    f"{rows.ms_to_dt(row['lease_until']).isoformat()} without a heartbeat"
                )
                result = AttemptResult(Outcome.LEASE_EXPIRED, error=error)
                out.append(self._finish_tx(conn, row["id"], row["generation"], result, "reclaim"))
            return out

        return self._writer.call(tx)

    def reclaim(self, job_id: int, generation: int, error: str) -> Job:
        result = AttemptResult(Outcome.LEASE_EXPIRED, error=error)
        return self._writer.call(
            lambda conn: self._finish_tx(conn, job_id, generation, result, "reclaim")
        )

    def cancel(self, job_id: int, reason: str) -> Cancelled:
        return self._writer.call(lambda conn: self._cancel_tx(conn, job_id, reason))

    def _cancel_tx(self, conn: sqlite3.Connection, job_id: int, reason: str) -> Cancelled:
        row = conn.execute(q("job_by_id"), {"id": job_id}).fetchone()
        if row is None:
            raise NotFound(f"no job {job_id}", job_id=job_id)
        status, gen, now_ms = JobStatus(row["status"]), row["generation"], self._now_ms()
        if status is JobStatus.CANCELLED:
            return Cancelled(rows.job_from_row(row), False, gen)
        check_transition(job_id, status, JobStatus.CANCELLED, "cancel")
        params = {"id": job_id, "generation": gen, "now": now_ms, "reason": reason}
        if status is JobStatus.SCHEDULED:
            new = conn.execute(q("cancel_scheduled"), params).fetchone()
            return Cancelled(rows.job_from_row(new), False, gen)
        conn.execute(
            q("finish_attempt"),
            {
                "job_id": job_id,
                "generation": gen,
                "now": now_ms,
                "outcome": "cancelled",
                "exit_code": None,
                "error": reason,
                "output_tail": "",
            },
        )
        new = conn.execute(q("cancel_running"), params).fetchone()
        return Cancelled(rows.job_from_row(new), True, gen)

    def replay(
        self,
        job_ids: Sequence[int] | None,
        limit: int,
        queue: str | None = None,
        reason: str | None = None,
        rate: float | None = None,
        owner: int | None = None,
    ) -> list[Job]:
        def tx(conn: sqlite3.Connection) -> list[Job]:
            now_ms = self._now_ms()
            if job_ids:
                ids = list(job_ids)
            else:
                params = {
                    "queue": queue,
                    "reason": reason,
                    "since": 0,
                    "limit": limit,
                    "owner": owner,
                }
                ids = [r["id"] for r in conn.execute(q("dead_ids"), params)]
            out: list[Job] = []
            for job_id in ids[:limit]:
                # Released at most ``rate`` per second: the n-th replayed job is due n/rate
                # seconds from now, durably, whatever happens to the caller afterwards.
                run_at = now_ms + (int(len(out) * 1000 / rate) if rate else 0)
                params = {
                    "id": job_id,
                    "now": now_ms,
                    "run_at": run_at,
                    "aging_ms": AGING_MS,
                    "owner": owner,
                }
                row = conn.execute(q("replay_dead"), params).fetchone()
                if row is not None:
                    out.append(rows.job_from_row(row))
            return out

        return self._writer.call(tx)

    # -- reads ------------------------------------------------------------------------

    def get(self, job_id: int, attempts: bool = True) -> Job:
        def read(conn: sqlite3.Connection) -> Job:
            row = conn.execute(q("job_by_id"), {"id": job_id}).fetchone()
            if row is None:
                raise NotFound(f"no job {job_id}", job_id=job_id)
            if not attempts:
                return rows.job_from_row(row)
            found = conn.execute(q("attempts_of"), {"job_id": job_id}).fetchall()
            return rows.job_from_row(row, [rows.attempt_from_row(a) for a in found])

        return self._read(read)

    def list_attempts(self, job_id: int, limit: int, after: int = 0) -> list[Attempt]:
        params = {"job_id": job_id, "limit": limit, "after": after}
        sql = q("attempts_page")
        return self._read(
            lambda conn: [rows.attempt_from_row(r) for r in conn.execute(sql, params)]
        )

    def list_jobs(
        self,
        status: JobStatus | None,
        queue: str | None,
        limit: int,
        before: int | None,
        owner: int | None = None,
    ) -> list[Job]:
        name = (
            "list_jobs"
            + ("_by_status" if status else "")
            + (("_queue" if status else "_by_queue") if queue else "")
        )
        params = {
            "status": status.value if status else None,
            "queue": queue,
            "limit": limit,
            "before": before if before is not None else 2**62,
            "owner": owner,
        }
        return self._read(
            lambda conn: [rows.job_from_row(r) for r in conn.execute(q(name), params)]
        )

    def stats(self) -> list[QueueStats]:
        return self._read(self._stats)

    def _stats(self, conn: sqlite3.Connection) -> list[QueueStats]:
        now_ms = self._now_ms()
        counts: dict[str, dict[str, int]] = {}
        for r in conn.execute(q("counts")):
            counts.setdefault(r["queue"], {})[r["bucket"]] = r["n"]
        late_params = {"now": now_ms, "cap": LATE_COUNT_CAP}
        late = {r["queue"]: r["n"] for r in conn.execute(q("count_future_due"), late_params)}
        out = []
        for queue in sorted(counts):
            c = counts[queue]
            oldest = [
                conn.execute(q(name), {"queue": queue, "now": now_ms}).fetchone()["t"]
                for name in ("oldest_due", "oldest_future_due")
            ]
            known = [t for t in oldest if t is not None]
            out.append(
                QueueStats(
                    queue=queue,
                    scheduled=c.get("scheduled", 0) + c.get("due", 0),
                    due=c.get("due", 0) + late.get(queue, 0),
                    running=c.get("running", 0),
                    succeeded=c.get("succeeded", 0),
                    dead=c.get("dead", 0),
                    cancelled=c.get("cancelled", 0),
                    oldest_due=rows.from_ms(min(known)) if known else None,
                )
            )
        return out

    def owner_usage(self, uid: int) -> dict[str, int]:
        """One owner's queued (scheduled, waiting or due) and running jobs, and live
        schedules: from the per-lane counters and the owner index, never a scan of jobs."""

        def read(conn: sqlite3.Connection) -> dict[str, int]:
            b = {r["bucket"]: r["n"] for r in conn.execute(q("owner_counts"), {"uid": uid})}
            scheds = conn.execute(q("owner_schedules"), {"uid": uid}).fetchone()["n"]
            queued = b.get("scheduled", 0) + b.get("due", 0)
            return {"queued": queued, "running": b.get("running", 0), "schedules": scheds}

        return self._read(read)

    def running(self) -> list[Orphan]:
        return self._read(
            lambda conn: [
                Orphan(r["job_id"], r["generation"], r["lease_owner"], r["pid"], r["pid_start"])
                for r in conn.execute(q("running_jobs"))
            ]
        )

    def wakeups(self, spare_owner: str | None = None) -> Wakeups:
        def read(conn: sqlite3.Connection) -> Wakeups:
            now = self.clock.now()
            now_ms = rows.to_ms(now)
            nxt = conn.execute(q("next_future")).fetchone()["t"]
            due, token_at = claimable(conn, now, self.quota)
            unpromoted = nxt is not None and nxt <= now_ms
            due = due or unpromoted
            lease = conn.execute(q("next_lease_expiry"), {"spare": spare_owner}).fetchone()["t"]
            candidates = [t for t in (rows.from_ms(nxt), token_at) if t is not None]
            return Wakeups(
                due,
                min(candidates) if candidates else None,
                None if lease is None else rows.ms_to_dt(lease) + timedelta(milliseconds=1),
                unpromoted=unpromoted,
            )

        return self._read(read)

    def close(self) -> None:
        self._writer.close()
        with self._readers_lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()
        if self._lock is not None:  # after the connections: see jobctl.store.dblock
            self._lock.release()
            self._lock = None


__all__ = ["IllegalTransition", "SqliteStore", "connect"]
