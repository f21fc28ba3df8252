"""Jobs on PostgreSQL: the lease holder's writes, cancel, replay, crash evidence, reads.

The same compare-and-sets on ``(status, generation)`` as SQLite (jobctl.store.jobs), each
checked to have hit its row. A row is read ``FOR UPDATE`` before the policy decides what
happens to it, so two daemons ending one attempt (a finish racing a reclaim) serialize,
and the second finds the generation moved on: :class:`LeaseLost`, nothing changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from jobctl.domain.dispatch import AGING_STEP
from jobctl.domain.models import (
    Attempt,
    AttemptResult,
    Finished,
    Job,
    Orphan,
    ProcessRecord,
    QueueStats,
)
from jobctl.domain.retry import POISON_CRASHES, crash_poison, next_step
from jobctl.domain.states import JobStatus, Op, Outcome, check_transition
from jobctl.errors import JobctlError, LeaseLost, NotFound
from jobctl.store.base import Cancelled, Wakeups
from jobctl.store.finishing import FinishItem, http_items, stale
from jobctl.store.jobrow import RowMemo, job_from_row
from jobctl.store.jobs import LATE_COUNT_CAP
from jobctl.store.pg.db import PgConn, PgDb
from jobctl.store.pg.queues import claimable
from jobctl.store.rows import RowLike, attempt_from_row, from_ms, ms_to_dt, to_ms

AGING_MS = int(AGING_STEP * 1000)


class PgJobs:
    def __init__(self, db: PgDb) -> None:
        self.db = db

    # -- the lease holder ------------------------------------------------------------

    def heartbeat(self, leases: Sequence[tuple[int, int]], lease_ttl: float) -> list[int]:
        def tx(conn: PgConn) -> list[int]:
            params = {
                "ids": [j for j, _ in leases],
                "generations": [g for _, g in leases],
                "lease_until": self.db.now_ms() + int(lease_ttl * 1000),
            }
            kept = {r["id"] for r in conn.execute(self.db.q("heartbeat"), params)}
            return [j for j, _ in leases if j not in kept]

        return self.db.lease_write(tx)

    def record_notification(self, job_id: int, notified: str) -> None:
        def tx(conn: PgConn) -> None:
            params = {"id": job_id, "notified": notified}
            if conn.execute(self.db.q("record_notification"), params).fetchone() is None:
                raise NotFound(f"no job {job_id}", job_id=job_id)

        self.db.write(tx)

    def record_processes_tx(self, conn: PgConn, records: Sequence[ProcessRecord]) -> list[int]:
        params = {
            "job_ids": [r.job_id for r in records],
            "generations": [r.generation for r in records],
            "pids": [r.pid for r in records],
            "starts": [r.pid_start for r in records],
            "paths": [r.log_path for r in records],
        }
        stored = {r["job_id"] for r in conn.execute(self.db.q("record_processes"), params)}
        return [r.job_id for r in records if r.job_id not in stored]

    def finish_tx(
        self,
        conn: PgConn,
        job_id: int,
        generation: int,
        result: AttemptResult,
        op: Op = Op.FINISH,
    ) -> Job:
        row = conn.execute(self.db.q("job_by_id_for_update"), {"id": job_id}).fetchone()
        if row is None:
            raise NotFound(f"no job {job_id}", job_id=job_id)
        if row["status"] != "running" or row["generation"] != generation:
            raise stale(job_id, generation, row)
        job = job_from_row(row)
        now = self.db.clock.now()
        poison = result.outcome is Outcome.LEASE_EXPIRED and crash_poison(
            job_id, self._crash_streak(conn, job_id)
        )
        step = next_step(
            job, result.outcome, result.exit_code, now, self.db.rng, poison,
            result.dead_reason, result.transient, result.retry_after,
        )  # fmt: skip
        check_transition(job_id, job.status, step.status, op, step.dead_reason)
        now_ms = to_ms(now)
        self._end_attempt(conn, job_id, generation, now_ms, result)
        run_at = None if step.run_at is None else to_ms(step.run_at)
        params = {
            "id": job_id,
            "generation": generation,
            "status": step.status.value,
            "due": int(run_at is not None and run_at <= now_ms),
            "run_at": run_at,
            "failures": step.failures,
            "finished_at": now_ms if step.status is not JobStatus.SCHEDULED else None,
            "last_error": None if result.outcome is Outcome.SUCCEEDED else result.error,
            "dead_reason": step.dead_reason,
            "aging_ms": AGING_MS,
        }
        return job_from_row(
            _hit(conn.execute(self.db.q("finish_job"), params).fetchone(), job_id, generation)
        )

    def _end_attempt(
        self, conn: PgConn, job_id: int, generation: int, now_ms: int, result: AttemptResult
    ) -> None:
        params = {
            "job_id": job_id,
            "generation": generation,
            "now": now_ms,
            "outcome": result.outcome.value,
            "exit_code": result.exit_code,
            "error": result.error,
            "output_tail": result.output_tail,
        }
        if conn.execute(self.db.q("finish_attempt"), params).rowcount != 1:
            raise LeaseLost(
                f"job {job_id}: attempt of generation {generation} is no longer open",
                job_id=job_id,
                generation=generation,
            )

    def _crash_streak(self, conn: PgConn, job_id: int) -> list[set[int]]:
        """As :func:`jobctl.store.crashes.crash_streak`."""
        params = {"job_id": job_id, "limit": POISON_CRASHES}
        owners: list[str] = []
        for row in conn.execute(self.db.q("recent_crash_marks"), params).fetchall():
            if row["crash_suspect"] != 1 or row["lease_owner"] in owners:
                break
            owners.append(row["lease_owner"])
        if len(owners) < POISON_CRASHES:
            return []
        q = self.db.q("crash_suspects")
        return [{r["job_id"] for r in conn.execute(q, {"owner": o})} for o in owners]

    def finish_many_tx(
        self, conn: PgConn, items: Sequence[FinishItem]
    ) -> list[Finished | JobctlError]:
        """Successes in bulk (one locking read, two set-wise updates); the rest one by one."""
        out: list[Finished | JobctlError | None] = [None] * len(items)
        bulk, seen = [], set()
        for i, (job_id, _, result) in enumerate(items):
            if result.outcome is Outcome.SUCCEEDED and job_id not in seen:
                bulk.append(i)
            seen.add(job_id)
        if bulk:
            self._succeed_many(conn, items, bulk, out)
        for i, (job_id, generation, result) in enumerate(items):
            if out[i] is None:
                out[i] = self._finish_one(conn, job_id, generation, result)
        sized = [(j, g, r.log_bytes) for j, g, r in items if r.log_bytes > 0]
        if sized:
            params = {
                "job_ids": [s[0] for s in sized],
                "generations": [s[1] for s in sized],
                "sizes": [s[2] for s in sized],
            }
            conn.execute(self.db.q("set_log_bytes"), params)
        calls = http_items(items, out)
        if calls:
            cols = ("job_ids", "generations", "statuses", "latencies", "shas")
            params = {name: [c[i] for c in calls] for i, name in enumerate(cols)}
            conn.execute(self.db.q("set_http_attempts"), params)
        return [r for r in out if r is not None]

    def _finish_one(
        self, conn: PgConn, job_id: int, generation: int, result: AttemptResult
    ) -> Finished | JobctlError:
        try:
            with conn.transaction():
                job = self.finish_tx(conn, job_id, generation, result)
        except JobctlError as exc:
            return exc
        return Finished(job.id, job.status, job.run_at, job.failures, job.dead_reason)

    def _succeed_many(
        self,
        conn: PgConn,
        items: Sequence[FinishItem],
        bulk: list[int],
        out: list[Finished | JobctlError | None],
    ) -> None:
        ids = sorted({items[i][0] for i in bulk})
        states = {r["id"]: r for r in conn.execute(self.db.q("finish_states"), {"ids": ids})}
        ok: list[tuple[int, int, int | None, str]] = []
        for i in bulk:
            job_id, generation, result = items[i]
            row = states.get(job_id)
            if row is None:
                out[i] = NotFound(f"no job {job_id}", job_id=job_id)
            elif row["status"] != "running" or row["generation"] != generation:
                out[i] = stale(job_id, generation, row)
            else:
                ok.append((job_id, generation, result.exit_code, result.output_tail))
                failures = row["failures"]
                out[i] = Finished(job_id, JobStatus.SUCCEEDED, ms_to_dt(row["run_at"]), failures)
        if not ok:
            return
        check_transition(ok[0][0], JobStatus.RUNNING, JobStatus.SUCCEEDED, Op.FINISH)
        now_ms = self.db.now_ms()
        attempts = {
            "now": now_ms,
            "job_ids": [o[0] for o in ok],
            "generations": [o[1] for o in ok],
            "exit_codes": [o[2] for o in ok],
            "tails": [o[3] for o in ok],
        }
        conn.execute(self.db.q("succeed_attempts"), attempts)
        jobs = {
            "now": now_ms,
            "job_ids": attempts["job_ids"],
            "generations": attempts["generations"],
        }
        changed = conn.execute(self.db.q("succeed_jobs"), jobs).rowcount
        if changed != len(ok):  # locked above: cannot happen; never half-apply
            raise RuntimeError(f"finish_many: {changed} of {len(ok)} fenced updates applied")

    def reclaim_expired(self, limit: int, spare_owner: str | None = None) -> list[Job]:
        def tx(conn: PgConn) -> list[Job]:
            params = {"now": self.db.now_ms(), "limit": limit, "spare": spare_owner}
            out = []
            for row in conn.execute(self.db.q("expired_leases"), params).fetchall():
                until = ms_to_dt(row["lease_until"]).isoformat()
                error = f"lease of {row['lease_owner']} expired at {until} without a heartbeat"
                result = AttemptResult(Outcome.LEASE_EXPIRED, error=error)
                out.append(self.finish_tx(conn, row["id"], row["generation"], result, Op.RECLAIM))
            return out

        return self.db.write(tx)

    def cancel_tx(self, conn: PgConn, job_id: int, reason: str) -> Cancelled:
        row = conn.execute(self.db.q("job_by_id_for_update"), {"id": job_id}).fetchone()
        if row is None:
            raise NotFound(f"no job {job_id}", job_id=job_id)
        status, gen, now_ms = JobStatus(row["status"]), row["generation"], self.db.now_ms()
        if status is JobStatus.CANCELLED:
            return Cancelled(job_from_row(row), False, gen)
        check_transition(job_id, status, JobStatus.CANCELLED, Op.CANCEL)
        params = {"id": job_id, "generation": gen, "now": now_ms, "reason": reason}
        if status is JobStatus.SCHEDULED:
            new = conn.execute(self.db.q("cancel_scheduled"), params).fetchone()
            return Cancelled(job_from_row(_hit(new, job_id, gen)), False, gen)
        result = AttemptResult(Outcome.CANCELLED, error=reason)
        self._end_attempt(conn, job_id, gen, now_ms, result)
        new = conn.execute(self.db.q("cancel_running"), params).fetchone()
        return Cancelled(job_from_row(_hit(new, job_id, gen)), True, gen)

    def replay_tx(
        self,
        conn: PgConn,
        job_ids: Sequence[int] | None,
        limit: int,
        filters: dict[str, object],
        rate: float | None,
    ) -> list[Job]:
        now_ms = self.db.now_ms()
        if job_ids:
            ids = list(job_ids)
        else:
            params = filters | {"since": 0, "limit": limit}
            ids = [r["id"] for r in conn.execute(self.db.q("dead_ids"), params)]
        out: list[Job] = []
        for job_id in ids[:limit]:
            run_at = now_ms + (int(len(out) * 1000 / rate) if rate else 0)
            params = {
                "id": job_id,
                "now": now_ms,
                "run_at": run_at,
                "aging_ms": AGING_MS,
                "owner": filters["owner"],
            }
            row = conn.execute(self.db.q("replay_dead"), params).fetchone()
            if row is not None:  # only jobs still dead are replayed
                out.append(job_from_row(row))
        return out

    def mark_crash_evidence(self, marks: Sequence[tuple[int, int, bool]]) -> None:
        def tx(conn: PgConn) -> None:
            q = self.db.q("mark_crash_evidence")
            for job_id, generation, suspect in marks:
                params = {"job_id": job_id, "generation": generation, "suspect": int(suspect)}
                conn.execute(q, params)  # no row: marked already, or ended (as on SQLite)

        self.db.write(tx)

    # -- reads -------------------------------------------------------------------------

    def get(self, job_id: int, attempts: bool = True) -> Job:
        def read(conn: PgConn) -> Job:
            row = conn.execute(self.db.q("job_by_id"), {"id": job_id}).fetchone()
            if row is None:
                raise NotFound(f"no job {job_id}", job_id=job_id)
            if not attempts:
                return job_from_row(row)
            found = conn.execute(self.db.q("attempts_of"), {"job_id": job_id}).fetchall()
            return job_from_row(row, [attempt_from_row(a) for a in found])

        return self.db.read(read)

    def get_latest(self, job_id: int, last: int) -> tuple[Job, int]:
        """The job with its last ``last`` attempts and how many it has (as on SQLite)."""

        def read(conn: PgConn) -> tuple[Job, int]:
            row = conn.execute(self.db.q("job_by_id"), {"id": job_id}).fetchone()
            if row is None:
                raise NotFound(f"no job {job_id}", job_id=job_id)
            params = {"job_id": job_id, "limit": last}
            found = conn.execute(self.db.q("attempts_last"), params).fetchall()
            total = conn.execute(self.db.q("attempts_total"), params).fetchone()
            assert total is not None  # an aggregate answers one row
            return job_from_row(row, [attempt_from_row(a) for a in found]), int(total["n"])

        return self.db.read(read)

    def list_attempts(self, job_id: int, limit: int, after: int = 0) -> list[Attempt]:
        params = {"job_id": job_id, "limit": limit, "after": after}
        sql = self.db.q("attempts_page")
        return self.db.read(lambda conn: [attempt_from_row(r) for r in conn.execute(sql, params)])

    def list_jobs(self, params: dict[str, object]) -> list[Job]:
        def read(conn: PgConn) -> list[Job]:
            memo = RowMemo()
            return [
                job_from_row(r, memo=memo) for r in conn.execute(self.db.q("list_jobs"), params)
            ]

        return self.db.read(read)

    def stats(self) -> list[QueueStats]:
        return self.db.read(self._stats)

    def _stats(self, conn: PgConn) -> list[QueueStats]:
        now_ms = self.db.now_ms()
        counts: dict[str, dict[str, int]] = {}
        for r in conn.execute(self.db.q("counts")):
            counts.setdefault(r["queue"], {})[r["bucket"]] = r["n"]
        late_params = {"now": now_ms, "cap": LATE_COUNT_CAP}
        late = {
            r["queue"]: r["n"] for r in conn.execute(self.db.q("count_future_due"), late_params)
        }
        out = []
        for queue in sorted(counts):
            c = counts[queue]
            params = {"queue": queue, "now": now_ms}
            oldest = [
                _one(conn.execute(self.db.q(name), params).fetchone())["t"]
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
                    oldest_due=from_ms(min(known)) if known else None,
                )
            )
        return out

    def owner_usage(self, uid: int) -> dict[str, int]:
        def read(conn: PgConn) -> dict[str, int]:
            q = self.db.q("owner_counts")
            b = {r["bucket"]: r["n"] for r in conn.execute(q, {"uid": uid})}
            queued = b.get("scheduled", 0) + b.get("due", 0)
            row = conn.execute(self.db.q("owner_schedules"), {"uid": uid}).fetchone()
            scheds = 0 if row is None else int(row["n"])
            return {"queued": queued, "running": b.get("running", 0), "schedules": scheds}

        return self.db.read(read)

    def running(self) -> list[Orphan]:
        return self.db.read(
            lambda conn: [
                Orphan(r["job_id"], r["generation"], r["lease_owner"], r["pid"], r["pid_start"])
                for r in conn.execute(self.db.q("running_jobs"))
            ]
        )

    def wakeups(self, spare_owner: str | None = None) -> Wakeups:
        def read(conn: PgConn) -> Wakeups:
            now = self.db.clock.now()
            now_ms = to_ms(now)
            nxt = _one(conn.execute(self.db.q("next_future")).fetchone())["t"]
            due, token_at = claimable(self.db, conn, now)
            unpromoted = nxt is not None and nxt <= now_ms
            q = self.db.q("next_lease_expiry")
            lease = _one(conn.execute(q, {"spare": spare_owner}).fetchone())["t"]
            candidates = [t for t in (from_ms(nxt), token_at) if t is not None]
            return Wakeups(
                due or unpromoted,
                min(candidates) if candidates else None,
                None if lease is None else ms_to_dt(lease) + timedelta(milliseconds=1),
                unpromoted=unpromoted,
            )

        return self.db.read(read)

    def log_bytes(self, uid: int | None) -> int:
        if uid is None:
            return int(
                self.db.read(
                    lambda c: _one(c.execute(self.db.q("log_bytes_total")).fetchone())["n"]
                )
            )
        q = self.db.q("log_bytes_of")
        return int(self.db.read(lambda c: _one(c.execute(q, {"uid": uid}).fetchone())["n"]))


def _hit(row: RowLike | None, job_id: int, generation: int) -> RowLike:
    if row is None:
        raise LeaseLost(
            f"job {job_id}: changed concurrently (generation {generation} is stale)",
            job_id=job_id,
            generation=generation,
        )
    return row


def _one(row: RowLike | None) -> RowLike:
    if row is None:  # an aggregate always answers one row
        raise AssertionError("an aggregate query returned no row")
    return row


__all__ = ["AGING_MS", "PgJobs"]
