"""Batched executor writes in the SQLite store (a part of SqliteStore).

The executor ends many attempts at once during a drain; each used to be its own writer
round trip. :meth:`FinishOps.finish_many` and :meth:`FinishOps.record_processes` take a
batch, run it as one writer op (one savepoint inside one group commit) and answer per
item: every item is still its own compare-and-set on ``(status, generation)``, checked
before anything of that item is written, so a stale item changes nothing and does not
sink its neighbours. A failure of the op itself (the disk) rolls back the whole op and
every caller sees it, so nobody is told "done" for a write that is not on disk.

``submit_*`` return the writer's :class:`concurrent.futures.Future` so the event loop
can await a batch without a thread (``asyncio.wrap_future``), see :mod:`jobctl.store.aio`.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from concurrent.futures import Future
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jobctl.domain.models import AttemptResult, Finished, ProcessRecord
from jobctl.domain.states import JobStatus, Op, Outcome, check_transition
from jobctl.errors import JobctlError, LeaseLost, NotFound
from jobctl.store import rows
from jobctl.store.queries import q
from jobctl.store.rows import RowLike
from jobctl.store.sqltx import savepoint

if TYPE_CHECKING:  # the parts meet only in SqliteStore's constructor
    from jobctl.store.jobs import JobOps
    from jobctl.store.sqlitedb import SqliteDb

FinishItem = tuple[int, int, AttemptResult]


class FinishOps:
    """``finish_many`` and ``record_processes`` of the store contract; the rare items
    (anything but a first success) go through :meth:`JobOps.finish_tx`."""

    def __init__(self, db: SqliteDb, jobs: JobOps) -> None:
        self.db = db
        self.jobs = jobs

    def finish_many(self, items: Sequence[FinishItem]) -> list[Finished | JobctlError]:
        return self.db.write(lambda conn: self.finish_many_tx(conn, items))

    def submit_finish_many(
        self, items: Sequence[FinishItem]
    ) -> Future[list[Finished | JobctlError]]:
        """:meth:`finish_many` without waiting: the future resolves after the commit."""
        return self.db.submit(lambda conn: self.finish_many_tx(conn, items))

    def submit_finish_riding(
        self, items: Sequence[FinishItem], records: Sequence[ProcessRecord]
    ) -> Future[list[Finished | JobctlError]]:
        """:meth:`submit_finish_many` with the process records of attempts whose command
        ended before its record was written (they ride with their finish, in the same
        op): as ``record_processes(records)`` then ``finish_many(items)`` in one
        transaction, but a success's record is written by the statement that ends its
        attempt (one write of the row, issue 17)."""
        return self.db.submit(lambda conn: self.finish_many_tx(conn, items, records))

    def log_bytes(self, uid: int | None = None) -> int:
        """Bytes of attempt logs on disk as accounted when attempts ended (``uid``: that
        owner's), from the running totals in ``log_usage``: no scan, no stat."""
        if uid is None:
            return int(self.db.read(lambda c: c.execute(q("log_bytes_total")).fetchone()["n"]))
        return int(
            self.db.read(lambda c: c.execute(q("log_bytes_of"), {"uid": uid}).fetchone()["n"])
        )

    def record_processes(self, records: Sequence[ProcessRecord]) -> list[int]:
        return self.db.write(lambda conn: record_processes_tx(conn, records))

    def submit_record_processes(self, records: Sequence[ProcessRecord]) -> Future[list[int]]:
        """:meth:`record_processes` without waiting: resolves after the commit."""
        return self.db.submit(lambda conn: record_processes_tx(conn, records))

    def finish_many_tx(
        self,
        conn: sqlite3.Connection,
        items: Sequence[FinishItem],
        records: Sequence[ProcessRecord] = (),
    ) -> list[Finished | JobctlError]:
        """Successes in bulk (one read, two ``executemany``); anything else one by one.
        ``records`` (see :meth:`submit_finish_riding`) land before their attempts end."""
        out: list[Finished | JobctlError | None] = [None] * len(items)
        bulk: list[int] = []  # successes that are their job's first item in the batch
        seen: set[int] = set()
        for i, (job_id, _, result) in enumerate(items):
            if result.outcome is Outcome.SUCCEEDED and job_id not in seen:
                bulk.append(i)
            seen.add(job_id)  # a later item of the same job goes after the bulk, in order
        riding = _riding(items, bulk, records)
        if records and len(riding) < len(records):  # the others first, as they were
            ridden = set(riding)
            record_processes_tx(
                conn, [r for r in records if (r.job_id, r.generation) not in ridden]
            )
        if bulk:
            _succeed_many(self.db.now_ms(), conn, items, bulk, out, riding)
        for i, (job_id, generation, result) in enumerate(items):
            if out[i] is None:  # the rare path (and a job repeated): the policy needs the job
                out[i] = self._finish_one(conn, job_id, generation, result)
        sizes = [[job_id, gen, r.log_bytes] for job_id, gen, r in items if r.log_bytes > 0]
        if sizes:  # fenced items too: a cancelled attempt's log is on disk all the same
            conn.execute(q("set_log_bytes"), {"items": json.dumps(sizes)})
        calls = http_items(items, out)
        if calls:
            conn.execute(q("set_http_attempts"), {"items": json.dumps(calls)})
        return [r for r in out if r is not None]

    def _finish_one(
        self, conn: sqlite3.Connection, job_id: int, generation: int, result: AttemptResult
    ) -> Finished | JobctlError:
        try:  # in a savepoint: an item refused half-way leaves nothing behind
            with savepoint(conn, "finish_item"):
                job = self.jobs.finish_tx(conn, job_id, generation, result)
        except JobctlError as exc:
            return exc
        return Finished(job.id, job.status, job.run_at, job.failures, job.dead_reason)


def http_items(
    items: Sequence[FinishItem], out: Sequence[Finished | JobctlError | None]
) -> list[list[Any]]:
    """``[job_id, generation, status, latency_ms, body_sha256]`` of each http attempt whose
    finish was accepted: a fenced result changes nothing, not even its attempt's row."""
    return [
        [job_id, gen, r.http_status, r.latency_ms, r.body_sha256]
        for (job_id, gen, r), done in zip(items, out, strict=True)
        if r.body_sha256 is not None and isinstance(done, Finished)
    ]


def record_processes_tx(conn: sqlite3.Connection, records: Sequence[ProcessRecord]) -> list[int]:
    """Store each record whose attempt is still current (one statement for them all);
    return the job ids of the others."""
    if not records:
        return []
    items = json.dumps([[r.job_id, r.generation, r.pid, r.pid_start, r.log_path] for r in records])
    stored = {row[0] for row in conn.execute(q("record_processes"), {"items": items})}
    return [r.job_id for r in records if r.job_id not in stored]


def _riding(
    items: Sequence[FinishItem], bulk: list[int], records: Sequence[ProcessRecord]
) -> dict[tuple[int, int], ProcessRecord]:
    """The records that ``succeed_attempts`` writes with their attempt's end: those of a
    bulk success at the same generation. Such a record stands exactly when its finish
    does: ``record_processes`` and the finish check the same fence (the job running at
    that generation, its attempt open), in the same transaction."""
    if not records:
        return {}
    mine = {(items[i][0], items[i][1]) for i in bulk}
    return {k: r for r in records if (k := (r.job_id, r.generation)) in mine}


def _succeed_many(
    now_ms: int,
    conn: sqlite3.Connection,
    items: Sequence[FinishItem],
    bulk: list[int],
    out: list[Finished | JobctlError | None],
    riding: dict[tuple[int, int], ProcessRecord],
) -> None:
    """Check every success's fence from one read, then end the attempts and the jobs."""
    ids = json.dumps([items[i][0] for i in bulk])
    states = {r["id"]: r for r in conn.execute(q("finish_states"), {"ids": ids})}
    attempts: list[list[Any]] = []
    jobs: list[list[int]] = []
    when: dict[int, datetime] = {}  # run_at by ms: a herd's jobs share one
    for i in bulk:
        job_id, generation, result = items[i]
        row = states.get(job_id)
        if row is None:
            out[i] = NotFound(f"no job {job_id}", job_id=job_id)
        elif row["status"] != "running" or row["generation"] != generation:
            out[i] = stale(job_id, generation, row)
        else:
            rec = riding.get((job_id, generation))
            process = (None, None, None) if rec is None else (rec.pid, rec.pid_start, rec.log_path)
            attempts.append([job_id, generation, result.exit_code, result.output_tail, *process])
            jobs.append([job_id, generation])
            ms = row["run_at"]
            run_at = when.get(ms) or when.setdefault(ms, rows.ms_to_dt(ms))
            out[i] = Finished(job_id, JobStatus.SUCCEEDED, run_at, row["failures"])
    if not jobs:
        return
    check_transition(jobs[0][0], JobStatus.RUNNING, JobStatus.SUCCEEDED, Op.FINISH)
    conn.execute(q("succeed_attempts"), {"now": now_ms, "items": json.dumps(attempts)})
    changed = conn.execute(q("succeed_jobs"), {"now": now_ms, "items": json.dumps(jobs)}).rowcount
    if changed != len(jobs):  # cannot happen (checked above, one writer): never half-apply
        raise RuntimeError(f"finish_many: {changed} of {len(jobs)} fenced updates applied")


def stale(job_id: int, generation: int, row: RowLike) -> LeaseLost:
    """The fence's refusal, naming what the job is now."""
    return LeaseLost(
        f"job {job_id}: lease lost (generation {generation} is stale; the job is "
        f"{row['status']} at generation {row['generation']})",
        job_id=job_id,
        generation=generation,
    )


__all__ = ["FinishItem", "FinishOps", "http_items", "record_processes_tx", "stale"]
