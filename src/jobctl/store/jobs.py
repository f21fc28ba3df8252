"""Jobs in the SQLite store: inserts, the lease-holder's writes, cancel, replay, reads.

Every change here is a compare-and-set on ``(status, generation)`` and checks that it
hit its row: a holder whose generation is stale gets :class:`LeaseLost` and changes
nothing (see :mod:`jobctl.store.base` for the contract of each method).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from concurrent.futures import Future
from datetime import timedelta

from jobctl.domain.dispatch import AGING_STEP
from jobctl.domain.models import (
    Attempt,
    AttemptResult,
    Job,
    JobSpec,
    Orphan,
    ProcessRecord,
    QueueStats,
)
from jobctl.domain.retry import crash_poison, next_step
from jobctl.domain.states import JobStatus, Op, Outcome, check_transition
from jobctl.errors import JobctlError, LeaseLost, NotFound
from jobctl.store import rows
from jobctl.store.base import Cancelled, Inserted, Wakeups
from jobctl.store.crashes import crash_streak
from jobctl.store.finishing import record_processes_tx, stale
from jobctl.store.inserts import ITEM_ERRORS, created, insert_jobs, refused_by_store
from jobctl.store.jobrow import job_from_row
from jobctl.store.queries import q
from jobctl.store.queues import claimable, over_queued_quota
from jobctl.store.schedconn import SqliteSchedConn
from jobctl.store.sqlitedb import SqliteDb
from jobctl.store.sqltx import savepoint
from jobctl.store.workerq import check_kinds

AGING_MS = int(AGING_STEP * 1000)
#: ``stats`` counts at most this many due jobs the timer has not promoted yet, so a
#: status call stays bounded whatever the backlog (the timer promotes them within ticks).
LATE_COUNT_CAP = 10_000


class JobOps:
    """The job methods of the store contract, on one :class:`SqliteDb`."""

    def __init__(self, db: SqliteDb) -> None:
        self.db = db

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
        return self.db.submit(lambda conn: self._insert_groups_tx(conn, groups))

    def _insert_groups_tx(
        self, conn: sqlite3.Connection, groups: Sequence[Sequence[JobSpec]]
    ) -> list[list[Inserted] | JobctlError]:
        kinds = check_kinds(SqliteSchedConn(conn, self.insert_tx), groups)
        refused = kinds | over_queued_quota(conn, self.db.quota, groups)
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
        """:meth:`insert_tx`, or the error that refused it, with nothing of it written."""
        try:
            with savepoint(conn, "insert_group"):
                return self.insert_tx(conn, specs)
        except JobctlError as exc:
            return exc
        except ITEM_ERRORS as exc:  # a row the store refuses (CHECK): this group alone
            return refused_by_store(exc)

    def insert_tx(self, conn: sqlite3.Connection, specs: Sequence[JobSpec]) -> list[Inserted]:
        now_ms = self.db.now_ms()
        created_at = rows.ms_to_dt(now_ms)
        out = []
        for spec, new in zip(specs, insert_jobs(conn, specs, now_ms), strict=True):
            if new.created:  # everything is known: no need to read the row back
                out.append(created(spec, new, created_at))
            else:
                row = conn.execute(q("job_by_id"), {"id": new.id}).fetchone()
                out.append(Inserted(job_from_row(row), False))
        return out

    def record_process(
        self, job_id: int, generation: int, pid: int, pid_start: int | None, log_path: str
    ) -> None:
        record = ProcessRecord(job_id, generation, pid, pid_start, log_path)
        if self.db.write(lambda conn: record_processes_tx(conn, [record])):
            raise LeaseLost(
                f"job {job_id}: lease lost (generation {generation} is stale)",
                job_id=job_id,
                generation=generation,
            )

    def record_notification(self, job_id: int, notified: str) -> None:
        def tx(conn: sqlite3.Connection) -> None:
            params = {"id": job_id, "notified": notified}
            if conn.execute(q("record_notification"), params).fetchone() is None:
                raise NotFound(f"no job {job_id}", job_id=job_id)

        self.db.write(tx)

    def heartbeat(self, leases: Sequence[tuple[int, int]], lease_ttl: float) -> list[int]:
        def tx(conn: sqlite3.Connection) -> list[int]:
            until = self.db.now_ms() + int(lease_ttl * 1000)
            lost = []
            for job_id, gen in leases:
                params = {"id": job_id, "generation": gen, "lease_until": until}
                if conn.execute(q("heartbeat"), params).fetchone() is None:
                    lost.append(job_id)
            return lost

        return self.db.write(tx)

    def finish(self, job_id: int, generation: int, result: AttemptResult) -> Job:
        return self.db.write(lambda conn: self.finish_tx(conn, job_id, generation, result))

    def finish_tx(
        self,
        conn: sqlite3.Connection,
        job_id: int,
        generation: int,
        result: AttemptResult,
        op: Op = Op.FINISH,
    ) -> Job:
        job = self._running_job(conn, job_id, generation)
        now = self.db.clock.now()
        poison = result.outcome is Outcome.LEASE_EXPIRED and crash_poison(
            job_id, crash_streak(conn, job_id)
        )
        step = next_step(
            job,
            result.outcome,
            result.exit_code,
            now,
            self.db.rng,
            poison,
            result.dead_reason,
            result.transient,
            result.retry_after,
        )
        check_transition(job_id, job.status, step.status, op, step.dead_reason)
        now_ms = rows.to_ms(now)
        end_attempt(conn, job_id, generation, now_ms, result)
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
        return job_from_row(hit(row, job_id, generation))

    def _running_job(self, conn: sqlite3.Connection, job_id: int, generation: int) -> Job:
        row = conn.execute(q("job_by_id"), {"id": job_id}).fetchone()
        if row is None:
            raise NotFound(f"no job {job_id}", job_id=job_id)
        if row["status"] != "running" or row["generation"] != generation:
            raise stale(job_id, generation, row)
        return job_from_row(row)

    def reclaim_expired(self, limit: int, spare_owner: str | None = None) -> list[Job]:
        def tx(conn: sqlite3.Connection) -> list[Job]:
            now_ms = self.db.now_ms()
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
                out.append(self.finish_tx(conn, row["id"], row["generation"], result, Op.RECLAIM))
            return out

        return self.db.write(tx)

    def reclaim(self, job_id: int, generation: int, error: str) -> Job:
        result = AttemptResult(Outcome.LEASE_EXPIRED, error=error)
        return self.db.write(
            lambda conn: self.finish_tx(conn, job_id, generation, result, Op.RECLAIM)
        )

    def cancel(self, job_id: int, reason: str) -> Cancelled:
        return self.db.write(lambda conn: self._cancel_tx(conn, job_id, reason))

    def _cancel_tx(self, conn: sqlite3.Connection, job_id: int, reason: str) -> Cancelled:
        row = conn.execute(q("job_by_id"), {"id": job_id}).fetchone()
        if row is None:
            raise NotFound(f"no job {job_id}", job_id=job_id)
        status, gen, now_ms = JobStatus(row["status"]), row["generation"], self.db.now_ms()
        if status is JobStatus.CANCELLED:
            return Cancelled(job_from_row(row), False, gen)
        check_transition(job_id, status, JobStatus.CANCELLED, Op.CANCEL)
        params = {"id": job_id, "generation": gen, "now": now_ms, "reason": reason}
        if status is JobStatus.SCHEDULED:
            new = conn.execute(q("cancel_scheduled"), params).fetchone()
            return Cancelled(job_from_row(hit(new, job_id, gen)), False, gen)
        end_attempt(conn, job_id, gen, now_ms, AttemptResult(Outcome.CANCELLED, error=reason))
        new = conn.execute(q("cancel_running"), params).fetchone()
        return Cancelled(job_from_row(hit(new, job_id, gen)), True, gen)

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
            now_ms = self.db.now_ms()
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
            if ids:  # the statement moves dead -> scheduled: the table must allow it
                check_transition(ids[0], JobStatus.DEAD, JobStatus.SCHEDULED, Op.REPLAY)
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
                    out.append(job_from_row(row))
            return out

        return self.db.write(tx)

    # -- reads ------------------------------------------------------------------------

    def get(self, job_id: int, attempts: bool = True) -> Job:
        def read(conn: sqlite3.Connection) -> Job:
            row = conn.execute(q("job_by_id"), {"id": job_id}).fetchone()
            if row is None:
                raise NotFound(f"no job {job_id}", job_id=job_id)
            if not attempts:
                return job_from_row(row)
            found = conn.execute(q("attempts_of"), {"job_id": job_id}).fetchall()
            return job_from_row(row, [rows.attempt_from_row(a) for a in found])

        return self.db.read(read)

    def get_latest(self, job_id: int, last: int) -> tuple[Job, int]:
        """The job with its last ``last`` attempts (in order), and how many it has, read
        together."""

        def read(conn: sqlite3.Connection) -> tuple[Job, int]:
            row = conn.execute(q("job_by_id"), {"id": job_id}).fetchone()
            if row is None:
                raise NotFound(f"no job {job_id}", job_id=job_id)
            params = {"job_id": job_id, "limit": last}
            found = conn.execute(q("attempts_last"), params).fetchall()
            total: int = conn.execute(q("attempts_total"), params).fetchone()["n"]
            return job_from_row(row, [rows.attempt_from_row(a) for a in found]), total

        return self.db.read(read)

    def list_attempts(self, job_id: int, limit: int, after: int = 0) -> list[Attempt]:
        params = {"job_id": job_id, "limit": limit, "after": after}
        sql = q("attempts_page")
        return self.db.read(
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
        return self.db.read(lambda conn: [job_from_row(r) for r in conn.execute(q(name), params)])

    def stats(self) -> list[QueueStats]:
        return self.db.read(self._stats)

    def _stats(self, conn: sqlite3.Connection) -> list[QueueStats]:
        now_ms = self.db.now_ms()
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

        return self.db.read(read)

    def running(self) -> list[Orphan]:
        return self.db.read(
            lambda conn: [
                Orphan(r["job_id"], r["generation"], r["lease_owner"], r["pid"], r["pid_start"])
                for r in conn.execute(q("running_jobs"))
            ]
        )

    def wakeups(self, spare_owner: str | None = None) -> Wakeups:
        def read(conn: sqlite3.Connection) -> Wakeups:
            now = self.db.clock.now()
            now_ms = rows.to_ms(now)
            nxt = conn.execute(q("next_future")).fetchone()["t"]
            due, token_at = claimable(conn, now, self.db.quota)
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

        return self.db.read(read)


def end_attempt(
    conn: sqlite3.Connection, job_id: int, generation: int, now_ms: int, result: AttemptResult
) -> None:
    """Record the end of the job's open attempt ``generation``; LeaseLost if there is none
    (the compare-and-set missed: another writer ended it first)."""
    params = {
        "job_id": job_id,
        "generation": generation,
        "now": now_ms,
        "outcome": result.outcome.value,
        "exit_code": result.exit_code,
        "error": result.error,
        "output_tail": result.output_tail,
    }
    if conn.execute(q("finish_attempt"), params).rowcount != 1:
        raise LeaseLost(
            f"job {job_id}: attempt of generation {generation} is no longer open",
            job_id=job_id,
            generation=generation,
        )


def hit(row: sqlite3.Row | None, job_id: int, generation: int) -> sqlite3.Row:
    """The row a compare-and-set on ``(status, generation)`` returned; LeaseLost if it
    matched none (the job moved on since it was read)."""
    if row is None:
        raise LeaseLost(
            f"job {job_id}: changed concurrently (generation {generation} is stale)",
            job_id=job_id,
            generation=generation,
        )
    return row


__all__ = ["AGING_MS", "JobOps", "end_attempt", "hit"]
