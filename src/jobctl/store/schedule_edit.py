"""Editing a schedule in one transaction (``jobctl schedules edit``, PATCH).

The order inside the writer's transaction:

1. The schedule is read again; a deleted one is not found, and one whose definition
   differs from the ``base`` the caller computed the edit from is a :class:`Conflict`
   (another edit came first: the caller reads again and retries).
2. Occurrences already due under the old definition (nominal time <= now) that the
   materializer has not reached yet are materialized first, under the old definition,
   exactly as the materializer would have (unless the schedule is paused or broken).
   So an edit applies to the occurrences after ``now``, nothing due is lost, and an
   occurrence due in the same millisecond as the edit belongs to the old definition.
3. The definition is updated (compare-and-set on every column as read), and the cursor:
   when the timing changed (cron, every, anchor, zone, jitter) it is the new timing's
   first occurrence after now; otherwise it stays. A paused schedule whose timing changed
   records the old timing's occurrences passed while paused as skipped (as ``resume``
   would have), then moves on to the new timing. The cursor's compare-and-set also
   clears ``broken``: an edit is a fix, and the next occurrence is tried again.
4. The edit is recorded in ``schedule_edits``: who, when, what changed, the cursor before
   and after.

Occurrences already materialized as jobs stay as they are; their keys
``<id>@<nominal UTC>`` are unique, so a recomputed cursor can never create one again.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime
from typing import Any

import orjson

from jobctl.domain.clock import iso
from jobctl.domain.limits import MAX_SCHEDULE_BATCH
from jobctl.domain.models import JobTemplate
from jobctl.domain.schedule import (
    TIMING_FIELDS,
    Schedule,
    ScheduleEdit,
    ScheduleSpec,
    Timing,
)
from jobctl.errors import Conflict, InvalidInput, NotFound
from jobctl.store import rows
from jobctl.store.materialize import materialize_one_tx
from jobctl.store.rows import RowLike
from jobctl.store.schedconn import SchedConn
from jobctl.store.schedule_rows import find, passed, record_skip, schedule_from_row

#: The definition columns compared by ``edit_schedule_def`` (``old_<column>``).
_DEF_COLUMNS = (
    "name", "cron", "every_ms", "anchor", "tz", "template", "misfire", "catch_up_limit",
    "overlap", "jitter_ms",
)  # fmt: skip


def edit_tx(
    conn: SchedConn,
    now: datetime,
    row: RowLike,
    spec: ScheduleSpec,
    base: ScheduleSpec,
    editor_uid: int,
) -> ScheduleEdit:
    """Apply the edit of the schedule read as ``row`` (see the module docstring)."""
    sid = row["id"]
    old = _check(schedule_from_row(row), spec, base)
    if not old.paused and old.broken_at is None and old.next_run_at <= now:
        materialize_one_tx(conn, now, sid)  # settle what was due under the old definition
        row = find(conn, sid)
        old = schedule_from_row(row)
    changes = diff(old.spec, spec)
    _rename_check(conn, old, spec)
    nxt = old.next_run_at
    if TIMING_FIELDS & changes.keys():
        nxt = spec.timing.seeded(sid).next_after(now)  # H is hashed from the id
        if old.paused:
            _record_paused(conn, sid, old.spec.timing, old.next_run_at, now)
    params = _def_params(spec) | {f"old_{c}": row[c] for c in _DEF_COLUMNS} | {"id": sid}
    if not conn.run("edit_schedule_def", params):
        raise Conflict(f"schedule {sid} was changed concurrently; try again", schedule_id=sid)
    cursor = {
        "id": sid,
        "next_run_at": rows.to_ms(nxt),
        "old_next": row["next_run_at"],
        "old_waiting": row["waiting"],
    }
    if not conn.run("edit_schedule_cursor", cursor):
        raise Conflict(f"schedule {sid} was advanced concurrently; try again", schedule_id=sid)
    edit = ScheduleEdit(sid, now, editor_uid, changes, old.next_run_at, nxt, _broken(old))
    if changes or edit.cleared_broken:
        conn.run("insert_schedule_edit", _edit_params(edit))
    return edit


def _check(old: Schedule, spec: ScheduleSpec, base: ScheduleSpec) -> Schedule:
    if old.deleted_at is not None:
        raise NotFound(f"schedule {old.id} is deleted: it cannot be edited", schedule=old.id)
    if old.spec != base:
        raise Conflict(f"schedule {old.id} was changed concurrently; try again")
    if spec.owner_uid != old.spec.owner_uid:
        raise InvalidInput("an edit cannot change a schedule's owner")
    return old


def _broken(old: Schedule) -> bool:
    return old.broken_at is not None


def _rename_check(conn: SchedConn, old: Schedule, spec: ScheduleSpec) -> None:
    """Names are unique per owner: a rename onto another live schedule's name is refused."""
    if spec.name is None or spec.name == old.spec.name:
        return
    named = {"ref": spec.name, "owner": spec.owner_uid}
    if conn.one("schedule_by_name", named) is not None:
        raise Conflict(f"a schedule named {spec.name!r} exists", name=spec.name)


def _record_paused(
    conn: SchedConn, sid: str, timing: Timing, first: datetime, now: datetime
) -> None:
    """The old timing's occurrences passed while paused: skipped, as ``resume`` records."""
    skipped, _ = passed(timing, first, now)
    if not skipped.count:
        return
    record_skip(conn, sid, "paused", skipped, now)
    params = {
        "id": sid,
        "count": skipped.count,
        "now": rows.to_ms(now),
        "last_nominal": rows.opt_ms(skipped.last),
    }
    conn.run("resume_schedule_skips", params)


def fields(spec: ScheduleSpec) -> dict[str, Any]:
    """The editable fields of a definition, as the API shows them."""
    t, p = spec.timing, spec.policy
    return {
        "name": spec.name,
        "cron": t.cron,
        "every": t.every,
        "at": iso(t.anchor),
        "tz": t.tz,
        "misfire": p.misfire.value,
        "catch_up_limit": p.catch_up_limit,
        "overlap": p.overlap.value,
        "jitter": p.jitter,
        "job": spec.template.to_json(),
    }


def diff(old: ScheduleSpec, new: ScheduleSpec) -> dict[str, tuple[object, object]]:
    """Field -> (before, after) for every field that differs."""
    before, after = fields(old), fields(new)
    return {k: (before[k], after[k]) for k in before if before[k] != after[k]}


@functools.lru_cache(maxsize=2 * MAX_SCHEDULE_BATCH)
def template_text(template: JobTemplate) -> str:
    """The stored JSON text of a job template. orjson: ``json.dumps`` took about 12 µs of
    the 50 a schedule may cost in a batch (readers parse either rendering alike).

    Memoized (templates are immutable): a batch's answer embeds the text the store has
    just rendered for each created schedule (``orjson.Fragment``) instead of rendering
    every template a second time (issue 18). Templates that compare equal share one text;
    they can differ only in how a number is spelled (``60`` or ``60.0``), which reads back
    alike."""
    return orjson.dumps(template.to_json()).decode()


def _def_params(spec: ScheduleSpec) -> dict[str, Any]:
    t, p = spec.timing, spec.policy
    return {
        "name": spec.name,
        "cron": t.cron,
        "every_ms": None if t.every is None else int(round(t.every * 1000)),
        "anchor": rows.opt_ms(t.anchor),
        "tz": t.tz,
        "template": template_text(spec.template),
        "misfire": p.misfire.value,
        "catch_up_limit": p.catch_up_limit,
        "overlap": p.overlap.value,
        "jitter_ms": int(round(p.jitter * 1000)),
    }


def _edit_params(e: ScheduleEdit) -> dict[str, Any]:
    return {
        "id": e.schedule_id,
        "now": rows.to_ms(e.edited_at),
        "editor_uid": e.editor_uid,
        "changes": json.dumps({k: list(v) for k, v in e.changes.items()}),
        "next_before": rows.to_ms(e.next_before),
        "next_after": rows.to_ms(e.next_after),
        "cleared_broken": int(e.cleared_broken),
    }


def edit_from_row(row: RowLike) -> ScheduleEdit:
    changes = {k: (v[0], v[1]) for k, v in json.loads(row["changes"]).items()}
    return ScheduleEdit(
        schedule_id=row["schedule_id"],
        edited_at=rows.ms_to_dt(row["edited_at"]),
        editor_uid=row["editor_uid"],
        changes=changes,
        next_before=rows.ms_to_dt(row["next_before"]),
        next_after=rows.ms_to_dt(row["next_after"]),
        cleared_broken=bool(row["cleared_broken"]),
    )


__all__ = ["diff", "edit_from_row", "edit_tx", "fields"]
