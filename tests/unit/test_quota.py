"""Quotas and the disk floor: resolution, token buckets, the guard, the planner's owner room,
and the store's translation of a full disk (a real SQLite file that cannot grow)."""

from __future__ import annotations

import os
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobctl.api.admission import Admission
from jobctl.domain.clock import FakeClock
from jobctl.domain.dispatch import Fairness, plan_claims
from jobctl.domain.models import JobSpec
from jobctl.domain.quota import DiskFloor, Limits, QuotaPolicy, RateBuckets, parse_size
from jobctl.engine.diskguard import DiskGuard
from jobctl.engine.quotas import Quotas
from jobctl.errors import DiskLow, QuotaExceeded, StorageFull
from jobctl.store.sqlite import SqliteStore
from jobctl.store.writer import disk_error

T0 = datetime(2027, 3, 14, 6, 0, tzinfo=UTC)


# --------------------------------------------------------------------------- resolution


def test_a_users_own_override_wins_then_the_most_generous_group_then_the_default() -> None:
    policy = QuotaPolicy(
        Limits(queued=100, running=4, schedules=10),
        users={"alice": {"running": 1}},
        groups={"devs": {"running": 8, "queued": 50}, "ops": {"running": 0, "queued": 70}},
    )
    alice = policy.limits_for("alice", ["devs"])
    assert (alice.running, alice.queued, alice.schedules) == (1, 50, 10)
    bob = policy.limits_for("bob", ["devs", "ops"])
    assert (bob.running, bob.queued) == (None, 70)  # 0 is "no limit": the most generous
    assert policy.limits_for("carol", ["users"]) == policy.default


def test_the_daemon_looks_accounts_up_once_a_minute() -> None:
    clock = FakeClock(T0)
    looked: list[int] = []

    def lookup(uid: int) -> tuple[str, list[str]]:
        looked.append(uid)
        return ("alice", ["devs"])

    quotas = Quotas(QuotaPolicy(Limits(running=4), groups={"devs": {"running": 2}}), clock, lookup)
    assert quotas.limits_for(1000).running == 2
    assert quotas.limits_for(1000).running == 2 and looked == [1000]
    clock.advance(61)
    quotas.limits_for(1000)
    assert looked == [1000, 1000]


class _CountingClock(FakeClock):
    def __init__(self) -> None:
        super().__init__(T0)
        self.reads = 0

    def now(self) -> datetime:
        self.reads += 1
        return super().now()


def test_without_user_or_group_quotas_the_default_needs_no_clock_and_no_lookup() -> None:
    """The executor asks at every start (the log_bytes cap): with nothing to look up, no
    clock is read (issue 17); with groups, the clock times the lookup's cache as before."""
    clock, looked = _CountingClock(), []

    def lookup(uid: int) -> tuple[str, list[str]]:
        looked.append(uid)
        return ("alice", ["devs"])

    plain = Quotas(QuotaPolicy(Limits(log_bytes=4096)), clock, lookup)
    assert plain.limits_for(1000).log_bytes == 4096 and plain.limits_for(0).log_bytes == 4096
    assert clock.reads == 0 and looked == []
    grouped = Quotas(QuotaPolicy(Limits(), groups={"devs": {"log_bytes": 8}}), clock, lookup)
    assert grouped.limits_for(1000).log_bytes == 8 and clock.reads == 1 and looked == [1000]


def test_the_enqueue_rate_is_a_token_bucket_on_the_injected_clock() -> None:
    buckets, limits = RateBuckets(), Limits(enqueue_rate=10, enqueue_burst=20)
    assert buckets.take(7, 20, limits, T0) == 0
    assert buckets.take(7, 1, limits, T0) == pytest.approx(0.1)
    assert buckets.take(8, 5, limits, T0) == 0  # another uid has its own bucket
    later = T0 + timedelta(seconds=0.5)
    assert buckets.take(7, 5, limits, later) == 0
    assert buckets.take(7, 1, limits, later) == pytest.approx(0.1)
    # A batch larger than the bucket waits for a full bucket, then goes through.
    assert buckets.take(7, 100, limits, later) == pytest.approx(2.0)
    assert buckets.take(7, 100, limits, later + timedelta(seconds=2)) == 0


def test_the_gate_answers_429_with_the_wait() -> None:
    clock = FakeClock(T0)
    gate = Admission(None, Quotas(QuotaPolicy(Limits(enqueue_rate=1, enqueue_burst=2)), clock))
    gate.admit_jobs(5, 2)
    with pytest.raises(QuotaExceeded) as refused:
        gate.admit_jobs(5, 1)
    assert refused.value.details["quota"] == "enqueue_rate"
    assert refused.value.details["retry_after"] == pytest.approx(1.0)
    clock.advance(1)
    gate.admit_jobs(5, 1)
    gate.admit_schedule(5, 0)
    with pytest.raises(QuotaExceeded):
        Admission(None, Quotas(QuotaPolicy(Limits(schedules=3)), clock)).admit_schedule(5, 3)


# --------------------------------------------------------------------------- disk floor


def test_disk_floor_syntax_and_the_smaller_of_size_and_share() -> None:
    floor = DiskFloor.parse("256MiB,5%")
    assert floor == DiskFloor(256 << 20, 5.0) and str(floor) == "256MiB,5%"
    assert floor.bytes_for(1 << 40) == 256 << 20  # a big disk: the size
    assert floor.bytes_for(64 << 20) == int((64 << 20) * 0.05)  # a small one: the share
    assert DiskFloor.parse("0") == DiskFloor() and DiskFloor().bytes_for(1 << 30) == 0
    assert parse_size("1G") == 1 << 30 and parse_size("4096") == 4096
    for bad in ("lots", "5%,6%", "1G,2G", "200%"):
        with pytest.raises(ValueError):
            DiskFloor.parse(bad)


def test_the_guard_measures_once_a_second_and_refuses_below_the_floor() -> None:
    clock = FakeClock(T0)
    free = {"/db": 100 << 20}
    calls: list[str] = []

    def measure(path: str) -> tuple[int, int, int]:
        calls.append(path)
        return (1 if path == "/db" else 2), free.get(path, 1 << 30), 1 << 30

    guard = DiskGuard([Path("/db"), Path("/logs")], DiskFloor(200 << 20), clock, measure)
    with pytest.raises(DiskLow) as refused:
        guard.check()
    assert refused.value.details["retry_after"] > 0 and "below the floor" in str(refused.value)
    assert guard.info()["refusing"] is True and len(guard.info()["filesystems"]) == 2
    free["/db"] = 300 << 20
    with pytest.raises(DiskLow):
        guard.check()  # still the cached measurement...
    assert calls == ["/db", "/logs"]
    clock.advance(1)
    guard.check()  # ...until a second has passed: then space is back, nothing latched
    assert guard.low() is None


def test_the_guard_measures_a_shared_filesystem_once(tmp_path: Path) -> None:
    guard = DiskGuard([tmp_path, tmp_path / "logs", tmp_path], DiskFloor(1), FakeClock(T0))
    (tmp_path / "logs").mkdir()
    assert len(guard.states()) == 1 and guard.states()[0].free > 0


# --------------------------------------------------------------------------- dispatch


def test_an_owner_at_its_running_quota_waits_and_others_go_on() -> None:
    lanes = {("default", 1): 50, ("batch", 1): 50, ("default", 2): 50}
    allow = {"default": 100, "batch": 100}
    plan = plan_claims(16, lanes, allow, {}, Fairness(), {1: 3})
    assert sum(n for (_, o), n in plan.items() if o == 1) == 3
    assert plan[("default", 2)] == 13
    plan = plan_claims(16, lanes, allow, {}, Fairness(), {1: 0})
    assert set(plan) == {("default", 2)} and plan[("default", 2)] == 16
    # Without a quota the same lanes fill every slot, as before.
    assert sum(plan_claims(16, lanes, allow, {}, Fairness()).values()) == 16


# --------------------------------------------------------------------------- full disk


def test_sqlite_full_and_enospc_are_refusals_for_now() -> None:
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = 13
    assert isinstance(disk_error(full), StorageFull)
    assert isinstance(disk_error(OSError(28, "No space left on device")), StorageFull)
    assert disk_error(sqlite3.OperationalError("no such table: x")) is None
    assert disk_error(ValueError("x")) is None


def test_an_insert_that_meets_a_full_database_is_a_storage_full_refusal(tmp_path: Path) -> None:
    """A real SQLite file that may not grow (``max_page_count``): the insert is refused as
    StorageFull (503), nothing is written, and it succeeds once the file may grow again."""
    clock = FakeClock(T0)
    store = SqliteStore(tmp_path / "full.db", clock)
    try:
        spec = JobSpec(command=("true",), run_at=T0, owner_uid=os.geteuid(), cwd="/")
        store.insert([spec])
        pages = store.db.writer.call(lambda c: c.execute("PRAGMA page_count").fetchone()[0])
        store.db.writer.outside_transaction(
            lambda c: c.execute(f"PRAGMA max_page_count={pages}").fetchall()
        )
        big = [JobSpec(command=("x" * 4000,), run_at=T0, owner_uid=0, cwd="/")] * 50
        with pytest.raises(StorageFull) as refused:
            store.insert(big)
        assert refused.value.details["retry_after"] > 0
        assert sum(q.scheduled for q in store.stats()) == 1  # nothing of it was written
        store.db.writer.outside_transaction(
            lambda c: c.execute("PRAGMA max_page_count=1073741823").fetchall()
        )
        assert len(store.insert(big)) == 50
    finally:
        store.close()


def test_the_queued_quota_is_checked_in_the_inserting_write(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "q.db", FakeClock(T0))
    try:
        store.quota = lambda uid: Limits(queued=3) if uid == 7 else Limits()
        mine = JobSpec(command=("true",), run_at=T0, owner_uid=7, cwd="/")
        theirs = JobSpec(command=("true",), run_at=T0, owner_uid=8, cwd="/")
        out = store.submit_insert_groups([[mine, mine], [theirs] * 5, [mine, mine]]).result()
        assert [len(o) for o in out[:2] if isinstance(o, list)] == [2, 5]
        assert isinstance(out[2], QuotaExceeded) and out[2].details["used"] == 2
        assert store.owner_usage(7) == {"queued": 2, "running": 0, "schedules": 0}
        store.insert([mine])
        with pytest.raises(QuotaExceeded):
            store.insert([mine])
    finally:
        store.close()


def test_the_reserve_is_made_given_up_for_a_finish_and_made_again(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    reserve = tmp_path / "jobctl.db.reserve"
    free = {"now": 100 << 20}  # what statvfs would say, so the test can run out of room

    def measure(path: str) -> tuple[int, int, int]:
        return 1, free["now"], 1 << 30

    guard = DiskGuard([tmp_path], DiskFloor(2 << 20), clock, measure, reserve=reserve)
    guard.states()
    assert reserve.stat().st_size == 1 << 20  # half the floor
    assert os.stat(reserve).st_blocks * 512 >= 1 << 20  # real blocks, not a sparse file
    free["now"] = 2 << 20  # the disk filled up to the floor
    assert guard.release_reserve() and not reserve.exists()
    free["now"] += 1 << 19  # half of what it held is still free (a finish took the rest)
    state = guard.states()[0]
    assert state.owed == 1 << 20 and state.low and not reserve.exists()
    assert not guard.release_reserve()  # nothing left to give
    free["now"] = 50 << 20  # space is back: the reserve is made again, nothing owed
    clock.advance(1)
    assert guard.states()[0].owed == 0 and reserve.exists() and guard.low() is None
