"""Schedule operations of the store, for either backend (a part of :class:`SqliteStore`
and of :class:`jobctl.store.pg.store.PostgresStore`): written once against
:class:`jobctl.store.schedconn.SchedConn`, the backend's open transaction.

Materializing an occurrence, recording its skips and advancing the schedule's cursor
happen in one transaction, and the cursor moves by compare-and-set, so a crash, a
restart or a second materializer can never create a second job for one occurrence
(the occurrence key is UNIQUE as well).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from jobctl.domain.models import Job
from jobctl.domain.schedule import (
    Materialized,
    Schedule,
    ScheduleEdit,
    ScheduleSpec,
    SkipRecord,
    Skips,
    Timing,
    manual_key,
)
from jobctl.errors import Conflict, JobctlError, NotFound
from jobctl.store import rows, workerq
from jobctl.store.inserts import refused_by_store
from jobctl.store.jobrow import job_from_row
from jobctl.store.materialize import materialize_tx, timing_of
from jobctl.store.schedconn import SchedConn
from jobctl.store.schedule_edit import edit_from_row, edit_tx, template_text
from jobctl.store.schedule_ids import MINT
from jobctl.store.schedule_rows import (
    _TOTALS,
    _find,
    _one,
    _passed,
    _record_skip,
    _skip_from_row,
    schedule_from_row,
)

T = TypeVar("T")

if TYPE_CHECKING:
    from jobctl.domain.clock import Clock
    from jobctl.store.schedconn import ScheduleDb


class ScheduleOps:
    """Schedule methods of the store contract. ``db`` runs reads and writes (each in a
    transaction of the backend), ``wrap`` makes a :class:`SchedConn` of the connection it
    hands them; a manual occurrence is inserted like any job (``SchedConn.insert_specs``)."""

    def __init__(self, db: ScheduleDb, clock: Clock, wrap: Callable[[Any], SchedConn]) -> None:
        self._db = db
        self.clock = clock
        self._wrap = wrap

    def _write(self, fn: Callable[[SchedConn], T]) -> T:
        return self._db.write(lambda conn: fn(self._wrap(conn)))

    def _read(self, fn: Callable[[SchedConn], T]) -> T:
        return self._db.read(lambda conn: fn(self._wrap(conn)))

    # -- definitions --------------------------------------------------------------------

    def create_schedule(self, spec: ScheduleSpec) -> Schedule:
        spec.template.check(spec.owner_uid)  # a template the store could not run is refused

        def tx(conn: SchedConn) -> Schedule:
            now = self.clock.now()
            _admit(conn, spec)
            params = _new_params(spec, now)
            _insert_one(conn, spec, params, now)
            return schedule_from_row(_find(conn, params["id"]))

        return self._write(tx)

    def create_schedules(self, specs: Sequence[ScheduleSpec]) -> list[Schedule | JobctlError]:
        """Many schedules in one transaction; each item answers alone (see the contract)."""
        return self._write(lambda conn: create_many_tx(conn, specs, self.clock.now()))

    def get_schedule(self, ref: str, owner: int | None = None) -> Schedule:
        return self._read(lambda conn: schedule_from_row(_find(conn, ref, owner)))

    def list_schedules(
        self,
        include_deleted: bool = False,
        limit: int = 1000,
        after: str | None = None,
        owner: int | None = None,
    ) -> list[Schedule]:
        params = {"deleted": include_deleted, "limit": limit, "after": after, "owner": owner}
        name = ("list_schedules" if owner is None else "list_schedules_of") + (
            "" if after is None else "_after"
        )
        return self._read(lambda conn: [schedule_from_row(r) for r in conn.rows(name, params)])

    def pause_schedule(self, ref: str) -> Schedule:
        def tx(conn: SchedConn) -> Schedule:
            row = _find(conn, ref)
            conn.run("pause_schedule", {"id": row["id"]})
            return schedule_from_row(_find(conn, row["id"]))

        return self._write(tx)

    def resume_schedule(self, ref: str) -> tuple[Schedule, Skips]:
        """Resume; occurrences that passed while paused are recorded as skipped."""

        def tx(conn: SchedConn) -> tuple[Schedule, Skips]:
            row = _find(conn, ref)
            sched = schedule_from_row(row)
            now = self.clock.now()
            passed, nxt = _passed(sched.spec.timing, sched.next_run_at, now)
            if sched.broken_at is not None:  # resume retries the occurrence that failed
                conn.run("clear_broken", {"id": sched.id})
            if sched.paused:
                params = {
                    "id": sched.id,
                    "next_run_at": rows.to_ms(nxt),
                    "count": passed.count,
                    "now": rows.to_ms(now),
                    "last_nominal": rows.opt_ms(passed.last),
                }
                if conn.run("resume_schedule", params):
                    conn.run("resume_schedule_skips", params)
                _record_skip(conn, sched.id, "paused", passed, now)
            else:
                passed = Skips()
            return schedule_from_row(_find(conn, sched.id)), passed

        return self._write(tx)

    def delete_schedule(self, ref: str) -> Schedule:
        def tx(conn: SchedConn) -> Schedule:
            row = _find(conn, ref)
            params = {"id": row["id"], "now": rows.to_ms(self.clock.now())}
            if conn.run("delete_schedule", params):
                conn.run("release_schedule_name", params)
            return schedule_from_row(_find(conn, row["id"]))

        return self._write(tx)

    def edit_schedule(
        self, ref: str, spec: ScheduleSpec, base: ScheduleSpec, editor_uid: int
    ) -> tuple[Schedule, ScheduleEdit]:
        """Replace the definition ``base`` (as the caller read it) with ``spec``, in one
        transaction; see :mod:`jobctl.store.schedule_edit` for what happens to the cursor."""
        spec.template.check(spec.owner_uid)  # as create_schedule: a template it could run

        def tx(conn: SchedConn) -> tuple[Schedule, ScheduleEdit]:
            row = _find(conn, ref)
            _admit(conn, spec)  # a template moved to a queue of the other kind: Conflict
            edit = edit_tx(conn, self.clock.now(), row, spec, base, editor_uid)
            return schedule_from_row(_find(conn, row["id"])), edit

        return self._write(tx)

    def schedule_edits(self, ref: str, limit: int) -> list[ScheduleEdit]:
        """The schedule's recorded edits, newest first."""

        def read(conn: SchedConn) -> list[ScheduleEdit]:
            params = {"id": _find(conn, ref)["id"], "limit": limit}
            return [edit_from_row(r) for r in conn.rows("schedule_edits", params)]

        return self._read(read)

    def trigger_schedule(self, ref: str) -> Job:
        """Run the schedule now as a manual occurrence with its own key."""

        def tx(conn: SchedConn) -> Job:
            sched = schedule_from_row(_find(conn, ref))
            if sched.deleted_at is not None:
                raise Conflict(f"schedule {sched.id} is deleted", schedule_id=sched.id)
            now = self.clock.now()
            spec = sched.spec.template.to_spec(
                now, manual_key(sched.id, now), sched.spec.owner_uid, sched.id, None
            )
            [ins] = conn.insert_specs([spec])
            params = {"id": sched.id, "job_id": ins.job.id}
            if conn.one("set_last_job", params) is None:
                raise NotFound(f"schedule {sched.id}: its cursor is gone", schedule_id=sched.id)
            return ins.job

        return self._write(tx)

    def schedule_history(self, ref: str, limit: int) -> tuple[list[Job], list[SkipRecord]]:
        """The schedule's most recent occurrences (jobs) and skip records, newest first."""

        def read(conn: SchedConn) -> tuple[list[Job], list[SkipRecord]]:
            found = _find(conn, ref)
            sid, owner = found["id"], found["owner_uid"]
            params = {"id": sid, "owner": owner, "limit": limit}
            jobs = [job_from_row(r) for r in conn.rows("schedule_jobs", params)]
            skips = [
                _skip_from_row(r) for r in conn.rows("schedule_skips", {"id": sid, "limit": limit})
            ]
            return jobs, skips

        return self._read(read)

    def schedule_totals(self) -> dict[str, Any]:
        def read(conn: SchedConn) -> dict[str, Any]:
            row = _one(conn, "schedule_totals")
            totals: dict[str, Any] = {k: row[k] for k in _TOTALS}
            nxt = _one(conn, "next_schedule_run")["t"]
            totals["next_run_at"] = rows.from_ms(nxt)
            return totals

        return self._read(read)

    # -- materialization ----------------------------------------------------------------

    def schedule_wakeup(self) -> datetime | None:
        """When the materializer has work next (now if a waiting occurrence was released)."""

        def read(conn: SchedConn) -> datetime | None:
            if conn.one("any_released") is not None:
                return self.clock.now()
            return rows.from_ms(_one(conn, "next_schedule_run")["t"])

        return self._read(read)

    def materialize(self, limit: int) -> Materialized:
        """Handle up to ``limit`` schedules with due or released occurrences."""
        return self._write(lambda conn: materialize_tx(conn, self.clock.now(), limit))


def _admit(conn: SchedConn, spec: ScheduleSpec, known: set[str] | None = None) -> None:
    """A schedule's occurrences bypass the insert's check of a queue's kind, so it holds
    here, when the template is created or edited: a command or http template is refused
    on a worker queue, a payload template on a queue with command jobs (Conflict); a
    payload template's queue becomes a worker queue (docs/workers.md)."""
    if known is None:  # alone (a batch locks its queues once, before reading them)
        workerq.lock(conn, [(spec.template.queue, spec.template.payload is not None)])
    workerq.admit(conn, spec.template.queue, spec.template.payload is not None, known)


def create_many_tx(
    conn: SchedConn, specs: Sequence[ScheduleSpec], now: datetime
) -> list[Schedule | JobctlError]:
    """Insert every schedule it can: all at once (two statements), and only if one is
    refused (a name taken, an id drawn twice) one by one, each in its own savepoint, so
    that the refused one fails alone. A schedule is answered from its spec, not read back.
    """
    out: dict[int, Schedule | JobctlError] = {}
    todo: list[tuple[int, ScheduleSpec, dict[str, Any]]] = []
    workerq.lock(conn, ((s.template.queue, s.template.payload is not None) for s in specs))
    known = workerq.names(conn)  # once per batch, not once per schedule
    workerq.lock_rows(
        conn, (s.template.queue for s in specs if s.template.payload is not None), known
    )
    shared = _Shared(now)
    for i, spec in enumerate(specs):
        try:
            spec.template.check(spec.owner_uid)
            _admit(conn, spec, known)
            todo.append((i, spec, shared.params(spec)))
        except JobctlError as exc:
            out[i] = exc
    try:
        with conn.savepoint("create_schedules"):
            _insert_all(conn, [p for _, _, p in todo])
    except conn.integrity_error:
        for i, spec, params in todo:
            out[i] = _insert_in_savepoint(conn, spec, params, now)
    else:
        for i, spec, params in todo:
            out[i] = _created(spec, params, shared.time)
    return [out[i] for i in range(len(specs))]


class _Shared:
    """What the new schedules of one batch share (one transaction, one ``now``), worked
    out once: ``now`` in ms, each distinct timing's first fire (a big list repeats a few
    expressions and zones; a timing with ``H`` is its own) and the times as read back."""

    def __init__(self, now: datetime) -> None:
        self.now, self.now_ms = now, rows.to_ms(now)
        self._first: dict[Timing, int] = {}
        self._times: dict[int, datetime] = {}

    def params(self, spec: ScheduleSpec) -> dict[str, Any]:
        """:func:`_new_params` of ``spec``."""
        sid = new_schedule_id(self.now)
        timing = spec.timing.seeded(sid)
        first = self._first.get(timing)
        if first is None:
            first = self._first[timing] = rows.to_ms(timing.next_after(self.now))
        return _schedule_params(spec, self.now_ms, first, sid)

    def time(self, ms: int) -> datetime:
        """``rows.ms_to_dt(ms)``, one object per instant of the batch."""
        found = self._times.get(ms)
        if found is None:
            found = self._times[ms] = rows.ms_to_dt(ms)
        return found


#: The columns of a row of ``insert_schedule_defs``, in its order.
DEF_ROW = (
    "id", "name", "cron", "every_ms", "anchor", "tz", "template", "owner_uid", "misfire",
    "catch_up_limit", "overlap", "jitter_ms", "now",
)  # fmt: skip


def _insert_all(conn: SchedConn, params: list[dict[str, Any]]) -> None:
    """The rows of ``params`` (as :func:`_insert_one` would insert each) in two statements
    (a JSON array each: one step for the whole batch, see the queries)."""
    if not params:
        return
    defs = orjson.dumps([[p[c] for c in DEF_ROW] for p in params]).decode()
    conn.run("insert_schedule_defs", {"rows": defs})
    cursors = orjson.dumps([[p["id"], p["next_run_at"]] for p in params]).decode()
    conn.run("insert_schedule_cursors", {"rows": cursors})


def _insert_in_savepoint(
    conn: SchedConn, spec: ScheduleSpec, params: dict[str, Any], now: datetime
) -> Schedule | JobctlError:
    refused: tuple[type[Exception], ...] = (JobctlError, *conn.item_errors)
    try:
        with conn.savepoint("create_schedule"):
            _insert_one(conn, spec, params, now)
    except refused as exc:  # a name taken, a row the store refuses
        return exc if isinstance(exc, JobctlError) else refused_by_store(exc)
    return _created(spec, params)


def _new_params(spec: ScheduleSpec, now: datetime) -> dict[str, Any]:
    """A new schedule's row: a fresh id, then its first fire (``H`` is hashed from the id)."""
    sid = new_schedule_id(now)
    first = spec.timing.seeded(sid).next_after(now)
    return _schedule_params(spec, rows.to_ms(now), rows.to_ms(first), sid)


def _insert_one(conn: SchedConn, spec: ScheduleSpec, params: dict[str, Any], now: datetime) -> None:
    """One schedule, its name checked first (Conflict) and a fresh id drawn if taken.

    On PostgreSQL another daemon (its own id mint) may have drawn the same id, or taken
    the name, in a transaction not yet committed: invisible to the checks, it makes the
    insert wait for it and then meet the unique index. The checks then see it: the name
    is a Conflict, the id is drawn again."""
    named = {"ref": spec.name, "owner": spec.owner_uid}
    while True:
        if spec.name and conn.one("schedule_by_name", named):
            raise Conflict(f"a schedule named {spec.name!r} exists", name=spec.name)
        while conn.one("schedule_by_id", {"ref": params["id"]}):
            params.update(_new_params(spec, now))  # a restart in the same second: rare
        try:
            with conn.savepoint("insert_schedule"):
                conn.run("insert_schedule_def", params)
                conn.run("insert_schedule_cursor", params)
            return
        except conn.integrity_error:
            taken = conn.one("schedule_by_id", {"ref": params["id"]})
            if taken is None and not (spec.name and conn.one("schedule_by_name", named)):
                raise  # not a race with another daemon: the row itself is refused


def _created(
    spec: ScheduleSpec,
    params: dict[str, Any],
    to_dt: Callable[[int], datetime] = rows.ms_to_dt,
) -> Schedule:
    """The schedule just inserted, as reading it back would give it (times in ms)."""
    t = spec.timing.seeded(params["id"])  # as read back: H hashed from the id
    if t.anchor is not None and t.anchor != rows.from_ms(params["anchor"]):
        t = timing_of(params["tz"], params["cron"], params["every_ms"], params["anchor"], t.seed)
    if t is not spec.timing:
        spec = dataclasses.replace(spec, timing=t)
    return Schedule(
        id=params["id"],
        spec=spec,
        paused=False,
        deleted_at=None,
        created_at=to_dt(params["now"]),
        next_run_at=to_dt(params["next_run_at"]),
        waiting=None,
        last_job_id=None,
        misfire_skips=0,
        overlap_skips=0,
        pause_skips=0,
        last_skip_at=None,
        last_skip_reason=None,
        last_skip_nominal=None,
        broken_at=None,
        broken_reason=None,
    )


def new_schedule_id(now: datetime) -> str:
    """``sch-`` and 12 hex digits, increasing (:mod:`jobctl.store.schedule_ids` says why):
    short enough to type, with a collision check on insert."""
    return MINT.next(now)


def _schedule_params(spec: ScheduleSpec, now_ms: int, first_ms: int, sid: str) -> dict[str, Any]:
    t, p = spec.timing, spec.policy
    return {
        "id": sid,
        "name": spec.name,
        "cron": t.cron,
        "every_ms": None if t.every is None else int(round(t.every * 1000)),
        "anchor": rows.opt_ms(t.anchor),
        "tz": t.tz,
        "template": template_text(spec.template),
        "owner_uid": spec.owner_uid,
        "misfire": p.misfire.value,
        "catch_up_limit": p.catch_up_limit,
        "overlap": p.overlap.value,
        "jitter_ms": int(round(p.jitter * 1000)),
        "now": now_ms,
        "next_run_at": first_ms,
    }


#: For :mod:`jobctl.store.schedule_edit`, which runs inside this module's transactions.
find, passed, record_skip = _find, _passed, _record_skip
__all__ = [
    "ScheduleOps",
    "create_many_tx",
    "find",
    "new_schedule_id",
    "passed",
    "record_skip",
    "schedule_from_row",
]
