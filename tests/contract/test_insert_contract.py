"""Batched inserts: what a batch answers, and that the counts it keeps stay exact."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import JobSpec
from jobctl.errors import InvalidInput, KeyConflict
from jobctl.store.base import Store

OWNER = "contract-host"


def spec(clock: FakeClock, **kw: object) -> JobSpec:
    fields: dict[str, object] = {"command": ("true",), "run_at": clock.now(), "owner_uid": 1000}
    fields.update(kw)
    return JobSpec(**fields)  # type: ignore[arg-type]


def _counts(store: Store) -> dict[str, tuple[int, int, int]]:
    return {s.queue: (s.scheduled, s.due, s.running) for s in store.stats()}


def test_the_answer_equals_what_reading_back_gives(store: Store, clock: FakeClock) -> None:
    # run_at with microseconds: the store keeps milliseconds, and so must its answer
    at = clock.now() + timedelta(minutes=3, microseconds=123_456)
    inserted = store.insert([spec(clock, run_at=at), spec(clock, key="mine", run_at=at)])
    for ins in inserted:
        assert ins.created
        assert ins.job == store.get(ins.job.id)
    auto, mine = (i.job for i in inserted)
    assert auto.key.startswith("job-") and auto.key != mine.key and mine.key == "mine"
    assert mine.id == auto.id + 1  # ids in batch order


def test_a_key_twice_in_one_batch_is_one_job(store: Store, clock: FakeClock) -> None:
    first, again, other = store.insert(
        [spec(clock, key="dup"), spec(clock, key="dup"), spec(clock, key="other")]
    )
    assert (first.created, again.created, other.created) == (True, False, True)
    assert first.job.id == again.job.id != other.job.id
    assert [j.key for j in store.list_jobs(None, None, 10, None)] == ["other", "dup"]
    assert _counts(store)["default"] == (2, 2, 0)


def test_a_key_twice_with_different_bodies_refuses_the_whole_batch(
    store: Store, clock: FakeClock
) -> None:
    with pytest.raises(KeyConflict):
        store.insert([spec(clock, key="a"), spec(clock, key="b"), spec(clock, key="a", priority=3)])
    assert store.list_jobs(None, None, 10, None) == []
    assert store.stats() == [] or _counts(store).get("default", (0, 0, 0)) == (0, 0, 0)


def test_counts_follow_inserts_by_queue_and_bucket(store: Store, clock: FakeClock) -> None:
    later = clock.now() + timedelta(hours=1)
    store.insert([spec(clock, queue="a"), spec(clock, queue="a", run_at=later)])
    store.insert([spec(clock, queue="b", run_at=later) for _ in range(3)])
    store.insert([spec(clock, queue="a", key="k")])
    store.insert([spec(clock, queue="a", key="k")])  # a repeat adds nothing
    assert _counts(store) == {"a": (3, 2, 0), "b": (3, 0, 0)}
    clock.set(later)
    claims = store.claim_due(OWNER, 10, 60)
    assert len(claims) == 6
    assert _counts(store) == {"a": (0, 0, 3), "b": (0, 0, 3)}


def test_a_big_batch_keeps_order_and_keys(store: Store, clock: FakeClock) -> None:
    specs = [spec(clock, key=f"k{i}" if i % 3 else None) for i in range(1200)]
    inserted = store.insert(specs)
    ids = [i.job.id for i in inserted]
    assert ids == sorted(ids) and len(set(ids)) == 1200
    assert all(i.job.key == f"k{n}" for n, i in enumerate(inserted) if n % 3)
    again = store.insert(specs[1:600])  # keyed ones repeat; unkeyed ones are new jobs
    assert [i.created for i in again] == [n % 3 == 0 for n in range(1, 600)]
    assert _counts(store)["default"][0] == 1200 + 199


def test_keys_are_scoped_per_owner(store: Store, clock: FakeClock) -> None:
    """The same key from two users makes two jobs; neither is ever the other's answer."""
    [alice] = store.insert([spec(clock, key="report", owner_uid=1001)])
    [bob] = store.insert([spec(clock, key="report", owner_uid=1002, command=("other",))])
    assert alice.created and bob.created and alice.job.id != bob.job.id
    [again] = store.insert([spec(clock, key="report", owner_uid=1002, command=("other",))])
    assert not again.created and again.job.id == bob.job.id
    with pytest.raises(KeyConflict) as refused:
        store.insert([spec(clock, key="report", owner_uid=1001, command=("other",))])
    assert refused.value.details["job_id"] == alice.job.id


def test_one_batch_of_two_owners_with_one_key_makes_two_jobs(
    store: Store, clock: FakeClock
) -> None:
    a, b = store.insert(
        [spec(clock, key="k", owner_uid=1001), spec(clock, key="k", owner_uid=1002)]
    )
    assert a.created and b.created and a.job.id != b.job.id
    assert (store.get(a.job.id).spec.owner_uid, store.get(b.job.id).spec.owner_uid) == (1001, 1002)


def test_resource_limits_come_back_from_a_read_and_a_claim(store: Store, clock: FakeClock) -> None:
    """``jobs.resources`` is a column of both backends (jobrow's one declaration)."""
    from jobctl.domain.resources import Resources

    limits = Resources(nice=5, memory_max=256 << 20, cpu_quota=50.0)
    limited, plain = store.insert([spec(clock, resources=limits, key="l"), spec(clock)])
    assert store.get(limited.job.id).spec.resources == limits == limited.job.spec.resources
    assert store.get(plain.job.id).spec.resources is None
    claimed = {c.job.id: c.job.spec.resources for c in store.claim_due(OWNER, 10, 30)}
    assert claimed == {limited.job.id: limits, plain.job.id: None}
    [again] = store.insert([spec(clock, resources=limits, key="l")])
    assert not again.created  # the same request: its limits are part of its fingerprint


def test_concurrent_groups_without_keys_each_answer_as_if_alone(
    store: Store, clock: FakeClock
) -> None:
    """Groups that share one write (as concurrent requests do) keep their own outcome: a
    group the store refuses fails alone and stores nothing; the others are stored, in
    order, each answered with its own jobs (PostgreSQL inserts keyless groups together)."""
    submit = getattr(store, "submit_insert_groups")  # noqa: B009 - both backends have it
    bad = spec(clock)
    object.__setattr__(bad, "max_attempts", 2**70)  # past any integer column: only the store
    groups = [[spec(clock, queue="a")], [spec(clock), bad], [spec(clock, queue="c")] * 2]
    first, refused, third = submit(groups).result()
    assert isinstance(refused, InvalidInput) and "refused" in str(refused)
    assert [i.job.spec.queue for i in first + third] == ["a", "c", "c"]
    assert all(i.created and i.job == store.get(i.job.id) for i in first + third)
    assert first[0].job.id < third[0].job.id < third[1].job.id
    assert sorted(j.spec.queue for j in store.list_jobs(None, None, 10, None)) == ["a", "c", "c"]
    assert {q: c for q, c in _counts(store).items() if c != (0, 0, 0)} == {
        "a": (1, 1, 0),
        "c": (2, 2, 0),
    }


def test_concurrent_groups_without_keys_are_all_answered_by_one_write(
    store: Store, clock: FakeClock
) -> None:
    groups = [[spec(clock, queue=f"q{i}")] for i in range(8)] + [[spec(clock)] * 3]
    out = getattr(store, "submit_insert_groups")(groups).result()  # noqa: B009
    assert [len(o) for o in out] == [1] * 8 + [3]
    ids = [i.job.id for o in out for i in o]
    assert ids == sorted(ids) and len(set(ids)) == 11
    assert [o[0].job.spec.queue for o in out[:8]] == [f"q{i}" for i in range(8)]
