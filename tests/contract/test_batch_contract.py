"""The batched executor writes of the store contract: finish_many and record_processes.

Each item of a batch is its own compare-and-set: a stale item changes nothing and is
reported as such, and never sinks its neighbours.
"""

from __future__ import annotations

from dataclasses import replace

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import AttemptResult, Backoff, Claim, Finished, JobSpec, ProcessRecord
from jobctl.domain.states import JobStatus, Outcome
from jobctl.errors import LeaseLost, NotFound
from jobctl.store.base import Store

OWNER = "host:1:test"
OK = AttemptResult(Outcome.SUCCEEDED, 0, None, "done ✓")


def spec(clock: FakeClock, **kw: object) -> JobSpec:
    fields: dict[str, object] = {"command": ("true",), "run_at": clock.now(), "owner_uid": 1000}
    fields.update(kw)
    return JobSpec(**fields)  # type: ignore[arg-type]


def _claim(store: Store, clock: FakeClock, n: int, **kw: object) -> list[Claim]:
    store.insert([spec(clock, **kw) for _ in range(n)])
    claims = store.claim_due(OWNER, n, 30)
    assert len(claims) == n
    return claims


def _stale(store: Store, clock: FakeClock) -> Claim:
    """A claim whose lease was lost: reclaimed and claimed again by another owner."""
    [old] = _claim(store, clock, 1, max_attempts=3, backoff=Backoff(0, 0))
    clock.advance(31)
    [reclaimed] = store.reclaim_expired(10)
    assert reclaimed.status is JobStatus.SCHEDULED
    [new] = store.claim_due("other", 1, 30)
    assert new.job.id == old.job.id and new.generation == old.generation + 1
    return old


def test_finish_many_finishes_each_item_like_finish(store: Store, clock: FakeClock) -> None:
    a, b, c = _claim(store, clock, 3, max_attempts=2, backoff=Backoff(5, 5))
    clock.advance(2)
    out = store.finish_many(
        [
            (a.job.id, a.generation, OK),
            (b.job.id, b.generation, AttemptResult(Outcome.FAILED, 3, "exit code 3", "oops")),
            (c.job.id, c.generation, AttemptResult(Outcome.FAILED, 127, "not found")),
        ]
    )
    assert all(isinstance(r, Finished) for r in out)
    fa, fb, fc = out
    assert isinstance(fa, Finished) and isinstance(fb, Finished) and isinstance(fc, Finished)
    assert (fa.job_id, fa.status, fa.failures, fa.run_at) == (
        a.job.id,
        JobStatus.SUCCEEDED,
        0,
        a.job.run_at,
    )
    assert (fb.status, fb.failures) == (JobStatus.SCHEDULED, 1)
    assert (fc.status, fc.dead_reason) == (JobStatus.DEAD, "non_retryable")
    ja, jb = store.get(a.job.id), store.get(b.job.id)
    assert (ja.status, ja.finished_at, ja.lease_owner, ja.last_error) == (
        JobStatus.SUCCEEDED,
        clock.now(),
        None,
        None,
    )
    [att] = ja.attempts
    assert (att.outcome, att.exit_code, att.output_tail, att.finished_at) == (
        Outcome.SUCCEEDED,
        0,
        "done ✓",
        clock.now(),
    )
    assert jb.status is JobStatus.SCHEDULED and jb.run_at == fb.run_at
    assert jb.attempts[0].output_tail == "oops"
    counts = {s.queue: s for s in store.stats()}["default"]
    assert (counts.succeeded, counts.scheduled, counts.dead, counts.running) == (1, 1, 1, 0)


def test_stale_item_in_a_batch_is_fenced_alone(store: Store, clock: FakeClock) -> None:
    old = _stale(store, clock)
    before = store.get(old.job.id)
    good, failing = _claim(store, clock, 2)
    out = store.finish_many(
        [
            (good.job.id, good.generation, OK),
            (old.job.id, old.generation, OK),
            (failing.job.id, failing.generation, AttemptResult(Outcome.FAILED, 1, "exit 1")),
            (old.job.id, old.generation, AttemptResult(Outcome.FAILED, 1, "exit 1")),
            (999_999, 1, OK),
        ]
    )
    assert isinstance(out[0], Finished) and out[0].status is JobStatus.SUCCEEDED
    assert isinstance(out[1], LeaseLost) and isinstance(out[3], LeaseLost)
    assert isinstance(out[2], Finished) and out[2].status is JobStatus.SCHEDULED
    assert isinstance(out[4], NotFound)
    assert store.get(old.job.id) == before  # the stale items changed nothing
    assert store.get(good.job.id).status is JobStatus.SUCCEEDED


def test_a_job_twice_in_one_batch_finishes_once(store: Store, clock: FakeClock) -> None:
    [c] = _claim(store, clock, 1)
    out = store.finish_many([(c.job.id, c.generation, OK), (c.job.id, c.generation, OK)])
    assert isinstance(out[0], Finished) and isinstance(out[1], LeaseLost)
    assert len(store.get(c.job.id).attempts) == 1


def test_items_of_one_job_apply_in_batch_order(store: Store, clock: FakeClock) -> None:
    [c] = _claim(store, clock, 1, max_attempts=3)
    failed = AttemptResult(Outcome.FAILED, 1, "exit code 1")
    out = store.finish_many([(c.job.id, c.generation, failed), (c.job.id, c.generation, OK)])
    assert isinstance(out[0], Finished) and out[0].status is JobStatus.SCHEDULED
    assert isinstance(out[1], LeaseLost)
    assert store.get(c.job.id).attempts[0].outcome is Outcome.FAILED


def test_finish_many_of_nothing(store: Store, clock: FakeClock) -> None:
    assert store.finish_many([]) == []
    assert store.record_processes([]) == []


def test_record_processes_reports_lost_leases_per_item(store: Store, clock: FakeClock) -> None:
    old = _stale(store, clock)
    a, b = _claim(store, clock, 2)
    rec = ProcessRecord(a.job.id, a.generation, 4242, 99, "/logs/a.log")
    lost = store.record_processes(
        [
            rec,
            ProcessRecord(old.job.id, old.generation, 1, 2, "/logs/old.log"),
            replace(rec, job_id=b.job.id, generation=b.generation, pid=4343),
        ]
    )
    assert lost == [old.job.id]
    mine = {o.job_id: o for o in store.running() if o.lease_owner == OWNER}
    assert (mine[a.job.id].pid, mine[a.job.id].pid_start) == (4242, 99)
    assert mine[b.job.id].pid == 4343
    other = next(o for o in store.running() if o.job_id == old.job.id)
    assert other.pid is None  # the stale record did not touch the new attempt
    assert store.get(a.job.id).attempts[0].log_path == "/logs/a.log"


def test_record_after_finish_is_lost(store: Store, clock: FakeClock) -> None:
    [c] = _claim(store, clock, 1)
    store.finish_many([(c.job.id, c.generation, OK)])
    assert store.record_processes([ProcessRecord(c.job.id, c.generation, 1, 1, "/x")]) == [c.job.id]


def test_claims_carry_the_stored_job(store: Store, clock: FakeClock) -> None:
    s = spec(
        clock,
        key="full",
        queue="q",
        priority=3,
        max_attempts=4,
        timeout=2.5,
        backoff=Backoff(1.5, 8.0),
        env=(("A", "1"), ("B", "2")),
        cwd="/tmp",
        retry_on=(3, 4),
        no_retry_on=(5,),
        schedule_id="sched",
        scheduled_for=clock.now(),
    )
    store.insert([s, spec(clock)])
    claims = store.claim_due(OWNER, 2, 30)
    for c in claims:
        stored = store.get(c.job.id)
        assert c.job == replace(stored, attempts=())
        assert (c.attempt, c.generation, c.lease_until) == (1, 1, stored.lease_until)
    assert claims[0].job.spec == s
