"""The store contract: every backend must pass every test here."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import AttemptResult, Backoff, JobSpec
from jobctl.domain.states import JobStatus, Outcome
from jobctl.errors import IllegalTransition, KeyConflict, LeaseLost, NotFound
from jobctl.store.base import Store

OWNER = "host:1:test"


def spec(clock: FakeClock, **kw: object) -> JobSpec:
    fields: dict[str, object] = {"command": ("true",), "run_at": clock.now(), "owner_uid": 1000}
    fields.update(kw)
    return JobSpec(**fields)  # type: ignore[arg-type]


def test_insert_then_get_round_trips_every_field(store: Store, clock: FakeClock) -> None:
    s = spec(
        clock,
        key="k1",
        queue="q",
        priority=5,
        max_attempts=4,
        timeout=2.5,
        backoff=Backoff(1.0, 8.0),
        env=(("A", "1"),),
        cwd="/tmp",
        run_at=clock.now() + timedelta(minutes=5),
    )
    [ins] = store.insert([s])
    assert ins.created
    job = store.get(ins.job.id)
    assert job.spec == s
    assert job.status is JobStatus.SCHEDULED
    assert (job.attempt, job.generation, job.failures) == (0, 0, 0)
    assert job.attempts == ()


def test_same_key_same_body_returns_the_same_job(store: Store, clock: FakeClock) -> None:
    [a] = store.insert([spec(clock, key="once")])
    clock.advance(10)
    [b] = store.insert([spec(clock, key="once")])
    assert (a.created, b.created) == (True, False)
    assert a.job.id == b.job.id


def test_same_key_other_body_conflicts_and_batch_is_atomic(store: Store, clock: FakeClock) -> None:
    store.insert([spec(clock, key="k")])
    with pytest.raises(KeyConflict):
        store.insert([spec(clock, key="new"), spec(clock, key="k", command=("false",))])
    assert [j.key for j in store.list_jobs(None, None, 10, None)] == ["k"]


def test_claim_orders_by_priority_then_run_at(store: Store, clock: FakeClock) -> None:
    """Priority first, then age; a priority level is worth AGING_STEP (5 min) of age."""
    now = clock.now()
    store.insert(
        [
            spec(clock, key="low-old", priority=0, run_at=now - timedelta(minutes=30)),
            spec(clock, key="high-new", priority=9, run_at=now),
            spec(clock, key="low-new", priority=0, run_at=now),
            spec(clock, key="future", priority=99, run_at=now + timedelta(seconds=1)),
        ]
    )
    claims = store.claim_due(OWNER, 10, 30)
    assert [c.job.key for c in claims] == ["high-new", "low-old", "low-new"]
    assert all(c.generation == 1 and c.attempt == 1 for c in claims)
    assert all(c.job.status is JobStatus.RUNNING for c in claims)


def test_claim_respects_limit_and_never_hands_a_job_twice(store: Store, clock: FakeClock) -> None:
    store.insert([spec(clock, key=str(i)) for i in range(5)])
    first = store.claim_due(OWNER, 3, 30)
    second = store.claim_due(OWNER, 10, 30)
    assert len(first) == 3 and len(second) == 2
    assert not {c.job.id for c in first} & {c.job.id for c in second}
    assert store.claim_due(OWNER, 10, 30) == []


def test_future_job_becomes_claimable_exactly_at_run_at(store: Store, clock: FakeClock) -> None:
    store.insert([spec(clock, run_at=clock.now() + timedelta(seconds=5))])
    clock.advance(4.999)
    assert store.claim_due(OWNER, 1, 30) == []
    clock.advance(0.001)
    assert len(store.claim_due(OWNER, 1, 30)) == 1


def test_success_finishes_the_job(store: Store, clock: FakeClock) -> None:
    store.insert([spec(clock)])
    [c] = store.claim_due(OWNER, 1, 30)
    job = store.finish(c.job.id, c.generation, AttemptResult(Outcome.SUCCEEDED, 0, None, "hi"))
    assert job.status is JobStatus.SUCCEEDED and job.finished_at == clock.now()
    [att] = store.get(job.id).attempts
    assert (att.number, att.generation, att.outcome, att.exit_code, att.output_tail) == (
        1,
        1,
        Outcome.SUCCEEDED,
        0,
        "hi",
    )


def test_failure_retries_with_backoff_until_budget_then_dead(
    store: Store, clock: FakeClock
) -> None:
    store.insert([spec(clock, max_attempts=3, backoff=Backoff(10, 15))])
    ceilings = [10, 15]
    for n in range(1, 4):
        [c] = store.claim_due(OWNER, 1, 30)
        assert c.attempt == n
        job = store.finish(c.job.id, c.generation, AttemptResult(Outcome.FAILED, 3, "exit 3"))
        if n < 3:
            assert job.status is JobStatus.SCHEDULED
            delay = (job.run_at - clock.now()).total_seconds()
            assert 0 <= delay <= ceilings[n - 1]
            clock.set(job.run_at)
    assert job.status is JobStatus.DEAD and job.dead_reason == "max_attempts"
    assert job.last_error == "exit 3" and job.failures == 3


def test_not_found_exit_code_is_not_retried(store: Store, clock: FakeClock) -> None:
    store.insert([spec(clock, max_attempts=5)])
    [c] = store.claim_due(OWNER, 1, 30)
    job = store.finish(c.job.id, c.generation, AttemptResult(Outcome.FAILED, 127, "not found"))
    assert (job.status, job.dead_reason) == (JobStatus.DEAD, "non_retryable")


def test_interrupted_attempt_does_not_use_budget(store: Store, clock: FakeClock) -> None:
    store.insert([spec(clock, max_attempts=1)])
    [c] = store.claim_due(OWNER, 1, 30)
    job = store.finish(c.job.id, c.generation, AttemptResult(Outcome.INTERRUPTED))
    assert job.status is JobStatus.SCHEDULED and job.failures == 0
    [c2] = store.claim_due(OWNER, 1, 30)
    assert (c2.attempt, c2.generation) == (2, 2)


def test_stale_generation_is_fenced_and_changes_nothing(store: Store, clock: FakeClock) -> None:
    store.insert([spec(clock, max_attempts=3, backoff=Backoff(0, 0))])
    [old] = store.claim_due(OWNER, 1, 30)
    clock.advance(31)
    [reclaimed] = store.reclaim_expired(10)
    assert reclaimed.status is JobStatus.SCHEDULED
    [new] = store.claim_due("other", 1, 30)
    assert new.generation == old.generation + 1
    before = store.get(old.job.id)
    with pytest.raises(LeaseLost):
        store.finish(old.job.id, old.generation, AttemptResult(Outcome.SUCCEEDED, 0))
    assert store.heartbeat([(old.job.id, old.generation)], 30) == [old.job.id]
    with pytest.raises(LeaseLost):
        store.record_process(old.job.id, old.generation, 123, None, "/x")
    assert store.get(old.job.id) == before
    done = store.finish(new.job.id, new.generation, AttemptResult(Outcome.SUCCEEDED, 0))
    assert done.status is JobStatus.SUCCEEDED


def test_lease_boundary_exact(store: Store, clock: FakeClock) -> None:
    store.insert([spec(clock)])
    [c] = store.claim_due(OWNER, 1, 30)
    clock.set(c.lease_until)
    assert store.reclaim_expired(10) == []
    clock.advance(0.001)
    [job] = store.reclaim_expired(10)
    att = store.get(job.id).attempts[-1]
    assert att.outcome is Outcome.LEASE_EXPIRED and job.failures == 1


def test_a_daemon_never_reclaims_its_own_expired_leases(store: Store, clock: FakeClock) -> None:
    """A lease of ``spare_owner`` that ran out is left alone: its work is live in that
    daemon, which fences and stops it through its heartbeat; reclaiming it would start
    a second attempt beside the first. Another daemon's reclaim takes it."""
    store.insert([spec(clock), spec(clock)])
    mine, theirs = store.claim_due(OWNER, 1, 30), store.claim_due("host:2:other", 1, 30)
    clock.advance(31)
    reclaimed = store.reclaim_expired(10, OWNER)
    assert [j.id for j in reclaimed] == [theirs[0].job.id]
    assert store.get(mine[0].job.id).status is JobStatus.RUNNING
    assert store.wakeups(OWNER).next_lease_expiry is None  # nothing of its own to wake for
    [job] = store.reclaim_expired(10, "host:3:third")
    assert job.id == mine[0].job.id and job.status is JobStatus.SCHEDULED


def test_heartbeat_extends_lease(store: Store, clock: FakeClock) -> None:
    store.insert([spec(clock)])
    [c] = store.claim_due(OWNER, 1, 30)
    clock.advance(20)
    assert store.heartbeat([(c.job.id, c.generation)], 30) == []
    clock.advance(20)
    assert store.reclaim_expired(10) == []
    assert store.get(c.job.id).lease_until == clock.now() + timedelta(seconds=10)


def test_expired_lease_on_last_attempt_is_dead_lease_expired(
    store: Store, clock: FakeClock
) -> None:
    store.insert([spec(clock, max_attempts=1)])
    store.claim_due(OWNER, 1, 1)
    clock.advance(2)
    [job] = store.reclaim_expired(10)
    assert (job.status, job.dead_reason) == (JobStatus.DEAD, "lease_expired")


def test_cancel_scheduled_and_running(store: Store, clock: FakeClock) -> None:
    a, b = store.insert(
        [spec(clock, key="a"), spec(clock, key="b", run_at=clock.now() + timedelta(hours=1))]
    )
    [c] = store.claim_due(OWNER, 5, 30)
    assert c.job.id == a.job.id
    running = store.cancel(a.job.id, "by user")
    waiting = store.cancel(b.job.id, "by user")
    assert running.was_running and running.generation == c.generation
    assert not waiting.was_running
    assert {running.job.status, waiting.job.status} == {JobStatus.CANCELLED}
    assert store.get(a.job.id).attempts[-1].outcome is Outcome.CANCELLED
    with pytest.raises(LeaseLost):
        store.finish(c.job.id, c.generation, AttemptResult(Outcome.SUCCEEDED, 0))
    assert store.cancel(a.job.id, "again").job.status is JobStatus.CANCELLED


def test_cancel_finished_job_is_illegal(store: Store, clock: FakeClock) -> None:
    store.insert([spec(clock)])
    [c] = store.claim_due(OWNER, 1, 30)
    store.finish(c.job.id, c.generation, AttemptResult(Outcome.SUCCEEDED, 0))
    with pytest.raises(IllegalTransition):
        store.cancel(c.job.id, "late")
    with pytest.raises(NotFound):
        store.cancel(999, "nope")


def test_replay_dead_is_idempotent_and_keeps_history(store: Store, clock: FakeClock) -> None:
    store.insert([spec(clock, max_attempts=1)])
    [c] = store.claim_due(OWNER, 1, 30)
    store.finish(c.job.id, c.generation, AttemptResult(Outcome.FAILED, 1, "boom"))
    [job] = store.replay(None, 10)
    assert job.status is JobStatus.SCHEDULED and job.failures == 0
    assert store.replay([c.job.id], 10) == []
    [c2] = store.claim_due(OWNER, 1, 30)
    assert c2.attempt == 2 and len(store.get(job.id).attempts) == 2


def test_concurrent_replays_replay_once(store: Store, clock: FakeClock) -> None:
    store.insert([spec(clock, key=str(i), max_attempts=1) for i in range(20)])
    for c in store.claim_due(OWNER, 20, 30):
        store.finish(c.job.id, c.generation, AttemptResult(Outcome.FAILED, 1))
    results: list[int] = []
    threads = [
        threading.Thread(target=lambda: results.extend(j.id for j in store.replay(None, 20)))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == sorted(set(results)) and len(results) == 20


def test_list_filters_and_paginates(store: Store, clock: FakeClock) -> None:
    store.insert([spec(clock, key=f"a{i}", queue="a") for i in range(3)])
    store.insert([spec(clock, key=f"b{i}", queue="b") for i in range(2)])
    store.claim_due(OWNER, 1, 30)
    assert len(store.list_jobs(None, None, 100, None)) == 5
    assert [j.key for j in store.list_jobs(None, "b", 100, None)] == ["b1", "b0"]
    assert len(store.list_jobs(JobStatus.RUNNING, None, 100, None)) == 1
    assert len(store.list_jobs(JobStatus.SCHEDULED, "a", 100, None)) == 2
    page1 = store.list_jobs(None, None, 2, None)
    page2 = store.list_jobs(None, None, 2, page1[-1].id)
    assert [j.id for j in page1 + page2] == sorted((j.id for j in page1 + page2), reverse=True)
    assert len({j.id for j in page1 + page2}) == 4


def test_stats_count_by_queue_and_due(store: Store, clock: FakeClock) -> None:
    now = clock.now()
    store.insert(
        [
            spec(clock, key="1", run_at=now - timedelta(seconds=30)),
            spec(clock, key="2", run_at=now + timedelta(hours=1)),
            spec(clock, key="3", queue="x"),
        ]
    )
    clock.advance(3600)
    [c] = store.claim_due(OWNER, 1, 7200)
    stats = {s.queue: s for s in store.stats()}
    d = stats["default"]
    assert (d.scheduled, d.due, d.running) == (1, 1, 1)
    assert d.oldest_due == now + timedelta(hours=1)
    assert (stats["x"].scheduled, stats["x"].due) == (1, 1) and c.job.key == "1"


def test_wakeups(store: Store, clock: FakeClock) -> None:
    w = store.wakeups()
    assert (w.due_now, w.next_run_at, w.next_lease_expiry) == (False, None, None)
    later = clock.now() + timedelta(minutes=1)
    store.insert([spec(clock, run_at=later)])
    assert store.wakeups().next_run_at == later and not store.wakeups().due_now
    clock.set(later)
    assert store.wakeups().due_now
    [c] = store.claim_due(OWNER, 1, 30)
    w = store.wakeups()
    assert not w.due_now and w.next_lease_expiry == c.lease_until + timedelta(milliseconds=1)


def test_running_reports_recorded_processes(store: Store, clock: FakeClock) -> None:
    store.insert([spec(clock)])
    [c] = store.claim_due(OWNER, 1, 30)
    store.record_process(c.job.id, c.generation, 4242, 99, "/logs/1.log")
    [o] = store.running()
    assert (o.job_id, o.generation, o.pid, o.pid_start, o.lease_owner) == (
        c.job.id,
        c.generation,
        4242,
        99,
        OWNER,
    )
    job = store.reclaim(c.job.id, c.generation, "daemon died")
    assert job.status is JobStatus.SCHEDULED and store.running() == []


def test_group_commit_many_threads(store: Store, clock: FakeClock) -> None:
    def work(n: int) -> None:
        for i in range(25):
            store.insert([spec(clock, key=f"{n}-{i}")])

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(s.scheduled for s in store.stats()) == 200


def test_promote_due_moves_only_jobs_whose_time_has_come(store: Store, clock: FakeClock) -> None:
    soon = [spec(clock, run_at=clock.now() + timedelta(seconds=s)) for s in (3, 1, 2)]
    late = spec(clock, run_at=clock.now() + timedelta(hours=1))
    store.insert([*soon, late])
    assert store.promote_due(10) == 0
    clock.advance(5)
    assert store.wakeups().unpromoted
    assert store.promote_due(2) == 2
    assert store.promote_due(10) == 1
    assert store.promote_due(10) == 0 and not store.wakeups().unpromoted
    [stats] = store.stats()
    assert (stats.due, stats.scheduled) == (3, 4)
    claimed = store.claim_due("w", 10, 30)
    assert [c.job.run_at for c in claimed] == sorted(s.run_at for s in soon)


def test_get_latest_reads_the_last_attempts_and_their_count(store: Store, clock: FakeClock) -> None:
    """A job's detail is bounded: the last N attempts in order and how many there are."""
    store.insert([spec(clock, max_attempts=5, backoff=Backoff(1, 1))])
    for n in range(1, 6):
        [c] = store.claim_due(OWNER, 1, 30)
        job = store.finish(c.job.id, c.generation, AttemptResult(Outcome.FAILED, n, f"exit {n}"))
        clock.set(max(job.run_at, clock.now()))
    latest, total = store.get_latest(job.id, 2)
    assert total == 5 and [a.number for a in latest.attempts] == [4, 5]
    assert [a.exit_code for a in latest.attempts] == [4, 5]
    assert latest.status is JobStatus.DEAD
    assert store.get_latest(job.id, 10)[0].attempts == store.get(job.id).attempts
    with pytest.raises(NotFound):
        store.get_latest(10**9, 2)
