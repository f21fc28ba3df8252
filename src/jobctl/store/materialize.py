"""Materializing due schedule occurrences, a batch of schedules per transaction.

One call reads the due (and released) schedules with one query each, as lean tuples;
plans every schedule with :func:`jobctl.domain.schedule.plan` (schedules that share
timing, policy, cursor and state share one plan within a batch); inserts every
occurrence's job with one :func:`jobctl.store.inserts.insert_fresh`; advances every
cursor with one ``executemany`` compare-and-set; and records the skips with one more.
All of it runs in the caller's transaction: the jobs exist exactly when the cursors
have moved past their occurrences. A cursor that another materializer moved first
fails the whole batch with :class:`Conflict` (nothing of it is kept).

A schedule whose occurrence cannot be built (any exception: a template the domain
refuses, a zone gone from tzdata) or stored (a row the store refuses) is marked broken
with the reason, its cursor left where it is, and the rest of the batch goes on: one
user's bad schedule never stops anyone else's (issue 11). ``resume`` clears the mark.
"""

from __future__ import annotations

import functools
import itertools
import json
from datetime import datetime
from operator import itemgetter
from typing import Any

from jobctl.domain.models import JobTemplate
from jobctl.domain.schedule import (
    Materialized,
    Misfire,
    Overlap,
    Plan,
    Policy,
    SkipRecord,
    Timing,
    hash_seed,
    jitter_offset,
    occurrence_key,
    plan,
)
from jobctl.errors import Conflict, InvalidSchedule, JobctlError
from jobctl.store.inserts import NewJob, Prepared
from jobctl.store.jobrow import TextMemo, per_job_values, template_values
from jobctl.store.rows import from_ms, ms_to_dt, opt_ms, to_ms
from jobctl.store.schedconn import SchedConn
from jobctl.store.workerq import names as worker_queue_names

_ACTIVE = frozenset(("scheduled", "running"))
#: One row of ``materialize_due`` / ``materialize_released``: id, cron, every_ms, anchor,
#: tz, template, owner_uid, misfire, catch_up_limit, overlap, jitter_ms, next_run_at,
#: waiting, last_status.
Row = tuple[
    str, str | None, int | None, int | None, str, str, int, str, int, str, int, int,
    int | None, str | None,
]  # fmt: skip
#: Per schedule: id, its plan, and the cursor it was read with (next_run_at, waiting).
_Cursor = tuple[str, Plan, int, int | None]
#: Per job to create: schedule id, nominal time, prepared row.
_Occurrence = tuple[str, datetime, Prepared]
#: Per job created: schedule id, job id, nominal time.
_Created = tuple[str, int, datetime]
#: How much of an exception's text a broken schedule keeps as its reason.
REASON_CHARS = 500


def materialize_tx(conn: SchedConn, now: datetime, limit: int) -> Materialized:
    """Handle up to ``limit`` schedules with due or released occurrences (in ``conn``'s
    open transaction)."""
    batch = _Batch(now, worker_queue_names(conn))
    for row in due_rows(conn, batch.now_ms, limit):
        batch.add(row)
    return batch.apply(conn)


def materialize_one_tx(conn: SchedConn, now: datetime, schedule_id: str) -> Materialized:
    """Handle schedule ``schedule_id`` if it is due (not paused, broken or deleted), in
    ``conn``'s open transaction: an edit settles what was due under the old definition."""
    batch = _Batch(now, worker_queue_names(conn))
    for row in conn.tuples("materialize_one", {"id": schedule_id, "now": batch.now_ms}):
        batch.add(row)
    return batch.apply(conn)


def due_rows(conn: SchedConn, now_ms: int, limit: int) -> list[Row]:
    """Due schedules, oldest cursor first, then released ones not already among them."""
    params = {"now": now_ms, "limit": limit}
    found: dict[str, Any] = {r[0]: r for r in conn.tuples("materialize_due", params)}
    for r in conn.tuples("materialize_released", params):
        found.setdefault(r[0], r)
    return list(found.values())


class _Batch:
    """The work of one call: planned first, then written with a few set-based statements."""

    def __init__(self, now: datetime, workers: set[str]) -> None:
        self.now = now
        #: The worker queues (read once per batch): a command template on one is broken.
        self.workers = workers
        self.now_ms = to_ms(now)
        self.plans: dict[tuple[object, ...], Plan] = {}
        self.occurrences: list[_Occurrence] = []
        self.cursors: list[_Cursor] = []
        self.skipped: list[SkipRecord] = []
        self.rows = 0
        #: Per broken schedule: id, reason, and the cursor it was read with.
        self.broken: list[tuple[str, str, int, int | None]] = []

    def add(self, row: Row) -> None:
        """Plan one schedule; one that cannot be planned or built is broken, alone."""
        self.rows += 1
        sid = row[0]
        try:
            p, occurrences = self._build(row)
        except Exception as exc:  # anything at all: the rest of the batch goes on
            self.broken.append((sid, broken_reason(exc), row[11], row[12]))
            return
        self.occurrences += occurrences
        self.cursors.append((sid, p, row[11], row[12]))
        for reason, skips in (("misfire", p.misfire_skips), ("overlap", p.overlap_skips)):
            if skips.count:
                self.skipped.append(SkipRecord(sid, reason, skips, self.now))

    def _build(self, row: Row) -> tuple[Plan, list[_Occurrence]]:
        sid, owner, template, jitter_ms = row[0], row[6], row[5], row[10]
        p = self._plan(row)
        out: list[_Occurrence] = []
        if p.create:
            if self.workers:
                _check_kind(template_of(template), self.workers)
            maker = row_maker(template, owner)
            offset = jitter_offset(sid, jitter_ms / 1000) if jitter_ms else None
            fingerprint = maker.fingerprint(sid)
            for nominal in p.create:
                run_at = nominal if offset is None else nominal + offset
                item = maker.item(sid, fingerprint, nominal, run_at, self.now_ms)
                out.append((sid, nominal, item))
        return p, out

    def _plan(self, row: Row) -> Plan:
        """The schedule's plan; a pure function of the key, so computed once per batch."""
        active = row[13] in _ACTIVE
        key = (row[1], row[2], row[3], row[4], row[7], row[8], row[9], row[11], row[12], active)
        found = self.plans.get(key)
        if found is None:
            timing = _timing(row[0], row[4], row[1], row[2], row[3])
            policy = _policy(row[7], row[8], row[9])
            waiting = from_ms(row[12])
            found = plan(timing, policy, ms_to_dt(row[11]), self.now, active, waiting)
            self.plans[key] = found
        return found

    def apply(self, conn: SchedConn) -> Materialized:
        # In schedule id order (stable: a schedule's occurrences stay oldest first), so
        # the key index entries go in ascending order: fewer page visits.
        occ = sorted(self.occurrences, key=itemgetter(0))
        created = self._insert(conn, occ)
        self._advance(conn, {sid: job_id for sid, job_id, _ in created})
        if self.skipped:
            conn.many("materialize_skips", [_skip_params(r) for r in self.skipped])
        if self.broken:
            params = [(self.now_ms, why, sid, nxt, wait) for sid, why, nxt, wait in self.broken]
            conn.many("materialize_broken", params)
        broken = tuple((sid, why) for sid, why, _, _ in self.broken)
        return Materialized(self.rows, created, tuple(self.skipped), broken)

    def _insert(self, conn: SchedConn, occ: list[_Occurrence]) -> tuple[_Created, ...]:
        """Insert every occurrence's job at once; should the store refuse a row, again
        schedule by schedule, each in its own savepoint, and break the ones refused."""
        if not occ:
            return ()
        try:
            with conn.savepoint("occurrences"):
                new = conn.insert_fresh([o[2] for o in occ], self.now_ms)
        except conn.item_errors:
            return self._insert_each(conn, occ)
        return tuple((o[0], n[0], o[1]) for o, n in zip(occ, new, strict=True))

    def _insert_each(self, conn: SchedConn, occ: list[_Occurrence]) -> tuple[_Created, ...]:
        created: list[_Created] = []
        for sid, group in itertools.groupby(occ, key=itemgetter(0)):
            mine = list(group)
            try:
                with conn.savepoint("occurrence"):
                    new: list[NewJob] = conn.insert_fresh([o[2] for o in mine], self.now_ms)
            except conn.item_errors as exc:
                self._break(sid, broken_reason(exc))
                continue
            created += [(o[0], n[0], o[1]) for o, n in zip(mine, new, strict=True)]
        return tuple(created)

    def _break(self, sid: str, reason: str) -> None:
        """Move a planned schedule to the broken ones (its cursor and skips are dropped)."""
        cursor = next(c for c in self.cursors if c[0] == sid)
        self.cursors.remove(cursor)
        self.skipped = [r for r in self.skipped if r.schedule_id != sid]
        self.broken.append((sid, reason, cursor[2], cursor[3]))

    def _advance(self, conn: SchedConn, last_job: dict[str, int]) -> None:
        """Move every cursor (compare-and-set), in id order, the cursor table's own order:
        fewer page visits. Nothing waiting before or after takes a leaner statement; the
        skip counters of schedules that skipped something follow in one more."""
        plain: list[tuple[object, ...]] = []
        full: list[tuple[object, ...]] = []
        counts: list[tuple[object, ...]] = []
        for sid, p, old_next, old_waiting in sorted(self.cursors, key=itemgetter(0)):
            job, nxt = last_job.get(sid), to_ms(p.next_run_at)
            if old_waiting is None and p.wait is None:
                plain.append((nxt, job, sid, old_next))
            else:
                full.append((nxt, opt_ms(p.wait), job, sid, old_next, old_waiting))
            if _skipped(p):
                counts.append(_skip_count_params(sid, p, self.now_ms))
        changed = 0
        for name, params in (("materialize_advance_plain", plain), ("materialize_advance", full)):
            if params:
                changed += conn.many(name, params)
        if changed != len(self.cursors):
            n = len(self.cursors)
            raise Conflict(f"{n - changed} of {n} schedules were advanced concurrently")
        if counts:
            conn.many("materialize_skip_counts", counts)


def _check_kind(template: JobTemplate, workers: set[str]) -> None:
    """A command or http template whose queue became a worker queue after the schedule was
    made (a payload job or ``queues workers --allow`` marked it): its jobs would wait
    there for a worker that cannot run them, so the schedule is broken instead, with
    the reason, until its queue is edited and it is resumed (docs/workers.md)."""
    if template.payload is None and template.queue in workers:
        raise Conflict(
            f"queue {template.queue!r} became a worker queue (payload jobs only): "
            "move the schedule with `jobctl schedules edit --queue`, then resume it"
        )


def broken_reason(exc: BaseException) -> str:
    """The reason a broken schedule shows: the error's class and message, cut short."""
    message = exc.message if isinstance(exc, JobctlError) else str(exc)
    return f"{type(exc).__name__}: {message}"[:REASON_CHARS]


def _skip_count_params(sid: str, p: Plan, now_ms: int) -> tuple[object, ...]:
    """Positional parameters of ``materialize_skip_counts``."""
    skip = p.overlap_skips if p.overlap_skips.count else p.misfire_skips
    reason = "overlap" if p.overlap_skips.count else "misfire"
    return (
        p.misfire_skips.count,
        p.overlap_skips.count,
        now_ms,
        reason,
        opt_ms(skip.last),
        sid,
    )


def _skipped(p: Plan) -> bool:
    return bool(p.misfire_skips.count or p.overlap_skips.count)


def _skip_params(rec: SkipRecord) -> tuple[object, ...]:
    """Positional parameters of ``materialize_skips``."""
    s, recorded = rec.skips, to_ms(rec.recorded_at)
    return (rec.schedule_id, rec.reason, opt_ms(s.first), opt_ms(s.last), s.count, recorded)


def _timing(
    sid: str, tz: str, cron: str | None, every_ms: int | None, anchor: int | None
) -> Timing:
    try:
        return timing_of(tz, cron, every_ms, anchor, hash_seed(cron, sid))
    except InvalidSchedule as exc:  # e.g. a zone removed from tzdata since creation
        raise InvalidSchedule(f"schedule {sid}: {exc.message}") from exc


@functools.lru_cache(maxsize=4096)
def timing_of(
    tz: str, cron: str | None, every_ms: int | None, anchor: int | None, seed: str | None = None
) -> Timing:
    """Timings are immutable values: build each distinct one once.  ``seed``: the
    schedule id when ``cron`` uses H (:func:`jobctl.domain.schedule.hash_seed`)."""
    every = None if every_ms is None else every_ms / 1000
    return Timing(tz, cron=cron, every=every, anchor=from_ms(anchor), seed=seed)


@functools.lru_cache(maxsize=256)
def _policy(misfire: str, catch_up_limit: int, overlap: str) -> Policy:
    """The plan-relevant part of a policy (jitter is applied per schedule)."""
    return Policy(Misfire(misfire), catch_up_limit, Overlap(overlap))


@functools.lru_cache(maxsize=4096)
def template_of(text: str) -> JobTemplate:
    """Templates too (the JSON text of the row is the key)."""
    return JobTemplate.from_json(json.loads(text))


class RowMaker:
    """The job rows of one template and owner: exactly what ``insert_jobs`` would store for
    ``template.to_spec(...)`` (tests hold them equal), with the parts that do not vary
    per occurrence rendered once. The template is checked as a spec once, here."""

    def __init__(self, template: JobTemplate, owner_uid: int) -> None:
        template.check(owner_uid)
        self._template = template_values(template, owner_uid, TextMemo())
        self._priority = template.priority
        self.fingerprint = template.fingerprinter(owner_uid)

    def item(
        self, sid: str, fingerprint: str, nominal: datetime, run_at: datetime, now_ms: int
    ) -> Prepared:
        per_job = per_job_values(now_ms, to_ms(run_at), self._priority, sid, to_ms(nominal))
        return occurrence_key(sid, nominal), fingerprint, self._template + per_job


@functools.lru_cache(maxsize=4096)
def row_maker(template_text: str, owner_uid: int) -> RowMaker:
    return RowMaker(template_of(template_text), owner_uid)
