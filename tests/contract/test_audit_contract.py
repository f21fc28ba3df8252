"""The audit trail in the store: queued, written with a commit, read with filters, pruned."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobctl.domain.audit import AuditRecord
from jobctl.domain.clock import FakeClock
from jobctl.store.base import Store


def rec(clock: FakeClock, action: str, uid: int = 1000, status: int = 200) -> AuditRecord:
    return AuditRecord(clock.now(), f"r-{action}", uid, 100, 4242, action, "queue:a", status)


def test_records_round_trip_newest_first(store: Store, clock: FakeClock) -> None:
    denied = AuditRecord(clock.now(), "abc", 7, 8, 9, "jobs.read", "job:3", 404, "not_found", True)
    store.audit([rec(clock, "queues.pause"), denied])
    store.flush_audit()
    got = store.list_audit()
    assert [r.action for r in got] == ["jobs.read", "queues.pause"]
    first = got[0]
    assert first.id is not None and first.id > got[1].id  # type: ignore[operator]
    assert first == AuditRecord(
        clock.now(), "abc", 7, 8, 9, "jobs.read", "job:3", 404, "not_found", True, first.id
    )


def test_filters_and_paging(store: Store, clock: FakeClock) -> None:
    store.audit([rec(clock, "schedules.pause", uid=1), rec(clock, "schedules", uid=2)])
    clock.advance(60)
    store.audit([rec(clock, "schedulesx.pause", uid=1), rec(clock, "jobs.cancel", uid=2)])
    store.flush_audit()
    assert [r.action for r in store.list_audit(action="schedules")] == [
        "schedules",
        "schedules.pause",
    ]  # the action and those under it, not a mere prefix
    assert [r.action for r in store.list_audit(uid=1)] == ["schedulesx.pause", "schedules.pause"]
    assert len(store.list_audit(since=clock.now())) == 2
    assert [r.action for r in store.list_audit(uid=2, action="jobs")] == ["jobs.cancel"]
    page = store.list_audit(limit=3)
    rest = store.list_audit(before=page[-1].id)
    assert [r.id for r in page + rest] == [r.id for r in store.list_audit()]
    assert len(rest) == 1


def test_prune_deletes_only_old_records_in_batches(store: Store, clock: FakeClock) -> None:
    store.audit([rec(clock, f"old.{n}") for n in range(5)])
    clock.advance(days=10)
    store.audit([rec(clock, "new")])
    store.flush_audit()
    cutoff = clock.now() - timedelta(days=1)
    assert store.prune_audit(cutoff, limit=3) == 3
    assert store.prune_audit(cutoff, limit=3) == 2
    assert store.prune_audit(cutoff, limit=3) == 0
    assert [r.action for r in store.list_audit()] == ["new"]


def test_queued_records_ride_along_with_the_next_write(store: Store, clock: FakeClock) -> None:
    from jobctl.domain.dispatch import QueuePolicy

    store.audit([rec(clock, "queues.pause")])
    store.set_queue(QueuePolicy("a"))  # any write's commit carries them
    assert [r.action for r in store.list_audit()] == ["queues.pause"]


def test_waiting_records_are_bounded(monkeypatch: pytest.MonkeyPatch, clock: FakeClock) -> None:
    from jobctl.store import audit

    buffer = audit.AuditBuffer()
    monkeypatch.setattr(audit, "MAX_PENDING", 3)
    buffer.add([rec(clock, f"a.{n}") for n in range(5)])
    assert buffer.dropped == 2 and len(buffer._rows) == 3
    assert [r["action"] for r in buffer._rows] == ["a.2", "a.3", "a.4"]  # the newest kept
