"""Editing a schedule in the store contract: one transaction, the cursor recomputed from
the new timing, nothing fired twice or lost, history kept (issue 12)."""

from __future__ import annotations

import dataclasses
import random
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import JobTemplate
from jobctl.domain.schedule import Misfire, Overlap, Policy, ScheduleSpec, Timing
from jobctl.errors import Conflict, NotFound
from jobctl.store.base import Store
from jobctl.store.sqlite import SqliteStore
from tests.contract.raw import raw_write

pytestmark = pytest.mark.store_parts("schedules")

TEMPLATE = JobTemplate(command=("true",), max_attempts=1)
T0 = datetime(2027, 3, 1, 12, 0, tzinfo=UTC)


def every_minute(name: str | None = None) -> ScheduleSpec:
    policy = Policy(misfire=Misfire.ALL, overlap=Overlap.ALLOW)  # every occurrence counts
    return ScheduleSpec(Timing("UTC", cron="* * * * *"), policy, TEMPLATE, 1000, name)


def with_cron(spec: ScheduleSpec, cron: str) -> ScheduleSpec:
    return dataclasses.replace(spec, timing=Timing(spec.timing.tz, cron=cron))


def keys(store: Store, sid: str) -> list[str]:
    jobs, _ = store.schedule_history(sid, 1000)
    return sorted(j.key or "" for j in jobs)


def test_edit_timing_recomputes_the_cursor_and_records_it(store: Store, clock: FakeClock) -> None:
    s = store.create_schedule(every_minute())
    assert s.next_run_at == T0 + timedelta(minutes=1)
    clock.set(T0 + timedelta(seconds=30))
    new, edit = store.edit_schedule(s.id, with_cron(s.spec, "*/5 * * * *"), s.spec, 42)
    assert new.next_run_at == T0 + timedelta(minutes=5) and new.spec.timing.cron == "*/5 * * * *"
    assert edit.changes == {"cron": ("* * * * *", "*/5 * * * *")} and edit.timing_changed
    assert (edit.next_before, edit.next_after) == (s.next_run_at, new.next_run_at)
    [recorded] = store.schedule_edits(s.id, 10)
    assert recorded == edit and recorded.editor_uid == 42 and recorded.edited_at == clock.now()


def test_edit_template_only_keeps_the_cursor(store: Store, clock: FakeClock) -> None:
    s = store.create_schedule(every_minute())
    clock.set(T0 + timedelta(seconds=30))
    other = dataclasses.replace(TEMPLATE, command=("echo", "hi"), queue="q2")
    new, edit = store.edit_schedule(s.id, dataclasses.replace(s.spec, template=other), s.spec, 0)
    assert new.next_run_at == s.next_run_at and not edit.timing_changed
    assert set(edit.changes) == {"job"} and new.spec.template == other
    clock.set(T0 + timedelta(minutes=1))
    [(_, job_id, _)] = store.materialize(100).created
    assert store.get(job_id).spec.command == ("echo", "hi")


def test_due_occurrence_is_settled_under_the_old_definition(store: Store, clock: FakeClock) -> None:
    """An occurrence due in the same second as the edit (not materialized yet) runs with
    the old definition, once; the new timing starts after it."""
    s = store.create_schedule(every_minute())
    clock.set(T0 + timedelta(minutes=5))  # 12:01..12:05 are due, none materialized yet
    new, edit = store.edit_schedule(s.id, with_cron(s.spec, "*/5 * * * *"), s.spec, 0)
    assert new.next_run_at == T0 + timedelta(minutes=10)
    assert edit.next_before == T0 + timedelta(minutes=6)  # after settling
    assert keys(store, s.id) == [f"{s.id}@2027-03-01T12:0{m}:00Z" for m in range(1, 6)]
    assert store.materialize(100).created == ()


def test_rename_and_rename_clash(store: Store, clock: FakeClock) -> None:
    a = store.create_schedule(every_minute("a"))
    store.create_schedule(every_minute("b"))
    with pytest.raises(Conflict):
        store.edit_schedule("a", dataclasses.replace(a.spec, name="b"), a.spec, 0)
    renamed, edit = store.edit_schedule("a", dataclasses.replace(a.spec, name="c"), a.spec, 0)
    assert renamed.id == a.id and store.get_schedule("c").id == a.id
    assert edit.changes == {"name": ("a", "c")}
    with pytest.raises(NotFound):
        store.get_schedule("a")
    other_owner = store.create_schedule(dataclasses.replace(every_minute("b"), owner_uid=7))
    assert other_owner.spec.name == "b"  # names are unique per owner only


def test_stale_base_is_a_conflict(store: Store, clock: FakeClock) -> None:
    s = store.create_schedule(every_minute())
    first = with_cron(s.spec, "*/5 * * * *")
    store.edit_schedule(s.id, first, s.spec, 0)
    with pytest.raises(Conflict):
        store.edit_schedule(s.id, with_cron(s.spec, "*/7 * * * *"), s.spec, 0)
    assert store.get_schedule(s.id).spec == first and len(store.schedule_edits(s.id, 9)) == 1


def test_deleted_schedule_cannot_be_edited(store: Store, clock: FakeClock) -> None:
    s = store.create_schedule(every_minute())
    store.delete_schedule(s.id)
    with pytest.raises(NotFound):
        store.edit_schedule(s.id, with_cron(s.spec, "*/5 * * * *"), s.spec, 0)


def test_paused_schedule_stays_paused_and_records_what_passed(
    store: Store, clock: FakeClock
) -> None:
    s = store.create_schedule(every_minute())
    store.pause_schedule(s.id)
    clock.set(T0 + timedelta(minutes=3, seconds=10))
    new, _ = store.edit_schedule(s.id, with_cron(s.spec, "*/5 * * * *"), s.spec, 0)
    assert new.paused and new.pause_skips == 3 and new.next_run_at == T0 + timedelta(minutes=5)
    assert store.materialize(100).created == ()
    clock.set(T0 + timedelta(minutes=4))
    resumed, passed = store.resume_schedule(s.id)
    assert passed.count == 0 and resumed.next_run_at == T0 + timedelta(minutes=5)


def test_edit_clears_broken(store: Store, clock: FakeClock) -> None:
    s = store.create_schedule(every_minute())
    raw_write(  # as the materializer marks it (see test_broken_schedules)
        store,
        "UPDATE schedule_cursors SET broken_at = 1, broken_reason = 'x' WHERE id = ?",
        (s.id,),
    )
    clock.set(T0 + timedelta(minutes=2, seconds=30))
    other = dataclasses.replace(TEMPLATE, command=("echo", "fixed"))
    new, edit = store.edit_schedule(s.id, dataclasses.replace(s.spec, template=other), s.spec, 0)
    assert new.broken_at is None and edit.cleared_broken
    assert new.next_run_at == s.next_run_at  # the occurrence that failed is tried again
    created = store.materialize(100).created
    assert [n for _, _, n in created] == [T0 + timedelta(minutes=m) for m in (1, 2)]


def test_concurrent_materializer_no_double_fire_nothing_lost(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Two stores on one file (two materializers' connections) with one injected clock: a
    materializer runs over and over while the schedule is edited from every minute to
    every 5 minutes. Every minute up to the edit fires once, then only the new times."""
    path = tmp_path / "race.db"
    editor = SqliteStore(path, clock, random.Random(1))
    other = SqliteStore(path, clock, random.Random(2), lock=False)
    try:
        s = editor.create_schedule(every_minute())
        clock.set(T0 + timedelta(minutes=7, seconds=30))
        stop = threading.Event()

        def churn() -> None:
            while not stop.is_set():
                other.materialize(100)

        t = threading.Thread(target=churn)
        t.start()
        try:
            new, _ = editor.edit_schedule(s.id, with_cron(s.spec, "*/5 * * * *"), s.spec, 0)
        finally:
            stop.set()
            t.join(10)
        assert new.next_run_at == T0 + timedelta(minutes=10)
        for minute in range(8, 21):
            clock.set(T0 + timedelta(minutes=minute))
            other.materialize(100)
        want = [f"{s.id}@2027-03-01T12:{m:02d}:00Z" for m in (*range(1, 8), 10, 15, 20)]
        assert keys(editor, s.id) == sorted(want)
    finally:
        other.close()
        editor.close()
