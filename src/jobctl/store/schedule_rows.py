"""Schedules as rows: reading one (by id or name), decoding it and its skip records, and
recording skipped occurrences. Shared by :mod:`jobctl.store.schedules` and
:mod:`jobctl.store.schedule_edit`, inside their transactions."""

from __future__ import annotations

from datetime import datetime

from jobctl.domain.schedule import (
    Misfire,
    Overlap,
    Policy,
    Schedule,
    ScheduleSpec,
    SkipRecord,
    Skips,
    Timing,
    hash_seed,
)
from jobctl.errors import InvalidSchedule, NotFound
from jobctl.store import rows
from jobctl.store.materialize import template_of, timing_of
from jobctl.store.rows import RowLike
from jobctl.store.schedconn import SchedConn


def _record_skip(
    conn: SchedConn, schedule_id: str, reason: str, skips: Skips, now: datetime
) -> None:
    if not skips.count:
        return
    conn.run(
        "insert_skip",
        {
            "schedule_id": schedule_id,
            "reason": reason,
            "first_nominal": rows.opt_ms(skips.first),
            "last_nominal": rows.opt_ms(skips.last),
            "count": skips.count,
            "now": rows.to_ms(now),
        },
    )


def _passed(timing: Timing, first: datetime, now: datetime) -> tuple[Skips, datetime]:
    """Occurrences from ``first`` up to ``now`` (skipped while paused), and the next one."""
    times: list[datetime] = []
    t = first
    while t <= now and len(times) < 1_000_000:
        times.append(t)
        t = timing.next_after(t)
    return Skips().add(times), t


#: The columns of ``schedule_totals``.
_TOTALS = ("total", "paused", "broken", "misfire_skips", "overlap_skips", "pause_skips")


def _one(conn: SchedConn, name: str) -> RowLike:
    """The one row an aggregate always has."""
    row = conn.one(name)
    if row is None:
        raise AssertionError(f"{name} returned no row")
    return row


def _find(conn: SchedConn, ref: str, owner: int | None = None) -> RowLike:
    """By id, else by a live schedule's name (``owner``'s, when given)."""
    row = conn.one("schedule_by_id", {"ref": ref})
    if row is None and owner is None:
        row = conn.one("schedule_by_name_any", {"ref": ref})
    elif row is None:
        row = conn.one("schedule_by_name", {"ref": ref, "owner": owner})
    if row is None:
        raise NotFound(f"no schedule {ref!r}", schedule=ref)
    found: RowLike = row
    return found


def schedule_from_row(row: RowLike) -> Schedule:
    seed = hash_seed(row["cron"], row["id"])
    try:
        timing = timing_of(row["tz"], row["cron"], row["every_ms"], row["anchor"], seed)
    except InvalidSchedule:  # e.g. a zone removed from tzdata since creation: still listed
        every = None if row["every_ms"] is None else row["every_ms"] / 1000
        anchor = rows.from_ms(row["anchor"])
        timing = Timing.unchecked(row["tz"], row["cron"], every, anchor, seed)
    policy = Policy(
        Misfire(row["misfire"]),
        row["catch_up_limit"],
        Overlap(row["overlap"]),
        row["jitter_ms"] / 1000,
    )
    spec = ScheduleSpec(
        timing,
        policy,
        template_of(row["template"]),
        row["owner_uid"],
        row["name"],
    )
    return Schedule(
        id=row["id"],
        spec=spec,
        paused=bool(row["paused"]),
        deleted_at=rows.from_ms(row["deleted_at"]),
        created_at=rows.ms_to_dt(row["created_at"]),
        next_run_at=rows.ms_to_dt(row["next_run_at"]),
        waiting=rows.from_ms(row["waiting"]),
        last_job_id=row["last_job_id"],
        misfire_skips=row["misfire_skips"],
        overlap_skips=row["overlap_skips"],
        pause_skips=row["pause_skips"],
        last_skip_at=rows.from_ms(row["last_skip_at"]),
        last_skip_reason=row["last_skip_reason"],
        last_skip_nominal=rows.from_ms(row["last_skip_nominal"]),
        broken_at=rows.from_ms(row["broken_at"]),
        broken_reason=row["broken_reason"],
    )


def _skip_from_row(row: RowLike) -> SkipRecord:
    skips = Skips(
        row["count"], rows.from_ms(row["first_nominal"]), rows.from_ms(row["last_nominal"])
    )
    return SkipRecord(row["schedule_id"], row["reason"], skips, rows.ms_to_dt(row["recorded_at"]))


#: For :mod:`jobctl.store.schedule_edit`, which runs inside the schedules' transactions.
find, passed, record_skip = _find, _passed, _record_skip
