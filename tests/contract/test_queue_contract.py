"""Queues, fair dispatch, aging, retry-on codes, poison and the DLQ in the store contract."""

from __future__ import annotations

from datetime import timedelta

from jobctl.domain.clock import FakeClock
from jobctl.domain.dispatch import AGING_STEP, QueuePolicy
from jobctl.domain.models import AttemptResult, Backoff, Claim, JobSpec
from jobctl.domain.states import JobStatus, Outcome
from jobctl.store.base import Store

W = "w:1:x"


def spec(clock: FakeClock, **kw: object) -> JobSpec:
    fields: dict[str, object] = {"command": ("true",), "run_at": clock.now(), "owner_uid": 1}
    fields.update(kw)
    return JobSpec(**fields)  # type: ignore[arg-type]


def finish_all(store: Store, claims: list[Claim], outcome: Outcome = Outcome.SUCCEEDED) -> None:
    for c in claims:
        store.finish(
            c.job.id, c.generation, AttemptResult(outcome, 0 if outcome is Outcome.SUCCEEDED else 1)
        )


def test_paused_queue_accepts_but_does_not_dispatch(store: Store, clock: FakeClock) -> None:
    store.set_queue(QueuePolicy("batch", paused=True))
    store.insert([spec(clock, queue="batch"), spec(clock, queue="default")])
    [c] = store.claim_due(W, 10, 30)
    assert c.job.spec.queue == "default"
    assert store.claim_due(W, 10, 30) == [] and not store.wakeups().due_now
    store.set_queue(QueuePolicy("batch"))
    assert [c.job.spec.queue for c in store.claim_due(W, 10, 30)] == ["batch"]


def test_queue_concurrency_limit(store: Store, clock: FakeClock) -> None:
    store.set_queue(QueuePolicy("io", concurrency=2))
    store.insert([spec(clock, queue="io") for _ in range(5)])
    first = store.claim_due(W, 10, 30)
    assert len(first) == 2 and store.claim_due(W, 10, 30) == []
    finish_all(store, first[:1])
    assert len(store.claim_due(W, 10, 30)) == 1


def test_rate_limit_token_bucket(store: Store, clock: FakeClock) -> None:
    store.set_queue(QueuePolicy("api", rate=2.0, burst=3))
    store.insert([spec(clock, queue="api") for _ in range(10)])
    assert len(store.claim_due(W, 100, 30)) == 3  # the burst
    w = store.wakeups()
    assert not w.due_now and w.next_run_at == clock.now() + timedelta(seconds=0.5)
    clock.advance(0.25)
    assert store.claim_due(W, 100, 30) == []  # half a token starts nothing
    clock.advance(0.25)
    assert len(store.claim_due(W, 100, 30)) == 1
    clock.advance(2)
    assert len(store.claim_due(W, 100, 30)) == 3  # refilled to the burst, not beyond


def test_fair_between_queues_by_weight(store: Store, clock: FakeClock) -> None:
    store.set_queue(QueuePolicy("heavy", weight=3))
    store.insert(
        [spec(clock, queue="heavy") for _ in range(40)]
        + [spec(clock, queue="light") for _ in range(40)]
    )
    got = [c.job.spec.queue for c in store.claim_due(W, 20, 30)]
    assert (got.count("heavy"), got.count("light")) == (15, 5)


def test_one_owner_cannot_crowd_out_another(store: Store, clock: FakeClock) -> None:
    store.insert([spec(clock, owner_uid=1000) for _ in range(500)])
    clock.advance(60)
    late = store.insert([spec(clock, owner_uid=2000)])[0].job
    started = []
    for _ in range(3):  # one slot at a time, as a busy executor frees them
        [c] = store.claim_due(W, 1, 30)
        started.append(c.job.id)
        finish_all(store, [c])
    assert late.id in started[:2]


def test_aging_lets_old_low_priority_jobs_through(store: Store, clock: FakeClock) -> None:
    low = store.insert([spec(clock, priority=0)])[0].job
    # a steady stream of priority-2 work arriving after it: it overtakes the low job only
    # while it arrives less than 2 * AGING_STEP later
    clock.advance(2 * AGING_STEP + 1)
    store.insert([spec(clock, priority=2) for _ in range(5)])
    [c] = store.claim_due(W, 1, 30)
    assert c.job.id == low.id


def test_retry_on_and_no_retry_on(store: Store, clock: FakeClock) -> None:
    a, b, c = (
        i.job
        for i in store.insert(
            [
                spec(clock, key="a", retry_on=(75,)),
                spec(clock, key="b", no_retry_on=(2,)),
                spec(clock, key="c", retry_on=(75,)),
            ]
        )
    )
    claims = {cl.job.key: cl for cl in store.claim_due(W, 10, 30)}
    ja = store.finish(a.id, claims["a"].generation, AttemptResult(Outcome.FAILED, 1, "x"))
    jb = store.finish(b.id, claims["b"].generation, AttemptResult(Outcome.FAILED, 2, "x"))
    jc = store.finish(c.id, claims["c"].generation, AttemptResult(Outcome.FAILED, 75, "x"))
    assert (ja.status, ja.dead_reason) == (JobStatus.DEAD, "non_retryable")
    assert (jb.status, jb.dead_reason) == (JobStatus.DEAD, "non_retryable")
    assert jc.status is JobStatus.SCHEDULED


def test_lost_leases_without_crash_evidence_use_the_budget_and_are_never_poison(
    store: Store, clock: FakeClock
) -> None:
    """Issue 13: three lost leases in a row used to make a job poison whatever its budget."""
    job = store.insert([spec(clock, max_attempts=5, backoff=Backoff(0, 0))])[0].job
    for n in range(1, 6):
        store.claim_due(W, 1, 5)
        clock.advance(6)
        [j] = store.reclaim_expired(10)
        assert j.status is (JobStatus.DEAD if n == 5 else JobStatus.SCHEDULED), n
    assert (j.dead_reason, j.failures) == ("lease_expired", 5)
    assert store.get(job.id).attempts[-1].outcome is Outcome.LEASE_EXPIRED


def _crash(store: Store, clock: FakeClock, n: int, suspects: dict[int, bool]) -> dict[int, str]:
    """Daemon ``n`` claims every due job and dies; recovery marks ``suspects`` and reclaims."""
    owner = f"w:{100 + n}:crash"
    claims = store.claim_due(owner, 100, 30)
    gens = {c.job.id: c.generation for c in claims}
    store.mark_crash_evidence([(i, gens[i], suspects.get(i, False)) for i in gens])
    clock.advance(1)
    return {
        i: (j.status.value if j.dead_reason is None else j.dead_reason)
        for i in gens
        for j in [store.reclaim(i, gens[i], "daemon died")]
    }


def test_a_job_alone_at_three_crashes_in_a_row_is_poison_within_its_budget(
    store: Store, clock: FakeClock
) -> None:
    [ins] = store.insert([spec(clock, max_attempts=5, backoff=Backoff(0, 0))])
    job = ins.job.id
    assert _crash(store, clock, 1, {job: True}) == {job: "scheduled"}
    assert _crash(store, clock, 2, {job: True}) == {job: "scheduled"}
    assert _crash(store, clock, 3, {job: True}) == {job: "poison"}
    assert store.get(job).failures == 3


def test_crashes_that_do_not_single_a_job_out_never_make_it_poison(
    store: Store, clock: FakeClock
) -> None:
    ids = [
        i.job.id
        for i in store.insert(
            [spec(clock, key=f"k{n}", max_attempts=4, backoff=Backoff(0, 0)) for n in range(4)]
        )
    ]
    a, b, c, d = ids
    # a and b are suspects together each time; c outlived every crash; d is a suspect once
    evidence = [{a: True, b: True, d: True}, {a: True, b: True}, {a: True, b: True}]
    seen = [_crash(store, clock, n, marks) for n, marks in enumerate(evidence)]
    assert all(r == "scheduled" for crash in seen for r in crash.values()), seen
    last = _crash(store, clock, 9, {a: True, b: True})
    assert last == {a: "lease_expired", b: "lease_expired", c: "lease_expired", d: "lease_expired"}


def test_a_crash_between_two_alone_breaks_the_streak(store: Store, clock: FakeClock) -> None:
    [ins] = store.insert([spec(clock, max_attempts=9, backoff=Backoff(0, 0))])
    job = ins.job.id
    for n, suspect in enumerate([True, True, False, True, True]):
        assert _crash(store, clock, n, {job: suspect}) == {job: "scheduled"}, n
    assert _crash(store, clock, 7, {job: True}) == {job: "poison"}


def test_the_first_mark_of_an_attempt_stays(store: Store, clock: FakeClock) -> None:
    """A second recovery (after a crash during the first) finds the survivors already
    stopped: it must not turn them into suspects."""
    [ins] = store.insert([spec(clock, max_attempts=9, backoff=Backoff(0, 0))])
    job = ins.job.id
    for n in range(3):
        [c] = store.claim_due(f"w:{n}:d", 1, 30)
        store.mark_crash_evidence([(job, c.generation, False)])
        store.mark_crash_evidence([(job, c.generation, True)])
        assert store.reclaim(job, c.generation, "died").status is JobStatus.SCHEDULED


def test_a_replay_for_one_owner_replays_only_that_owners_dead_jobs(
    store: Store, clock: FakeClock
) -> None:
    """``owner`` bounds a replay by ids as much as one without: another user's dead job
    named by id stays dead (the API checks first; the store does not rely on it)."""
    store.insert([spec(clock, key="mine", owner_uid=1000, max_attempts=1),
                  spec(clock, key="theirs", owner_uid=2000, max_attempts=1)])  # fmt: skip
    finish_all(store, store.claim_due(W, 10, 30), Outcome.FAILED)
    dead = {j.key: j.id for j in store.list_dead(None, None, None, 100)}
    assert store.replay([dead["theirs"]], 10, owner=1000) == []
    assert [j.key for j in store.replay(None, 10, owner=1000)] == ["mine"]
    assert [j.key for j in store.list_dead(None, None, None, 100)] == ["theirs"]


def test_dlq_filters_replay_rate_and_purge(store: Store, clock: FakeClock) -> None:
    store.insert(
        [spec(clock, key=f"a{i}", queue="a", max_attempts=1) for i in range(3)]
        + [spec(clock, key="b0", queue="b", max_attempts=1)]
    )
    finish_all(store, store.claim_due(W, 10, 30), Outcome.FAILED)
    died = clock.now()
    clock.advance(100)
    assert len(store.list_dead(None, None, None, 100)) == 4
    assert [j.key for j in store.list_dead("b", None, None, 100)] == ["b0"]
    assert store.list_dead(None, "timeout", None, 100) == []
    assert store.list_dead(None, None, died + timedelta(seconds=1), 100) == []
    replayed = store.replay(None, 2, queue="a", rate=0.5)
    assert [j.key for j in replayed] == ["a0", "a1"]
    assert [j.run_at - clock.now() for j in replayed] == [timedelta(0), timedelta(seconds=2)]
    assert store.replay(None, 10, queue="a", rate=1) != []  # a2 only
    assert store.replay(None, 10, queue="a") == []
    count, _logs = store.purge_dead(clock.now() - timedelta(seconds=50), 1000)
    assert count == 1 and store.list_dead(None, None, None, 100) == []
