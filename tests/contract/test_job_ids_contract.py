"""Job ids are never reused, whatever was deleted (issue 13, item 3)."""

from __future__ import annotations

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import AttemptResult, JobSpec
from jobctl.domain.schedule import Policy, ScheduleSpec, Timing
from jobctl.domain.states import Outcome
from jobctl.store.base import Store
from tests.contract.test_schedule_contract import TEMPLATE


def _dead(store: Store, clock: FakeClock, n: int) -> list[int]:
    specs = [JobSpec(("false",), clock.now(), 1, max_attempts=1) for _ in range(n)]
    ids = [i.job.id for i in store.insert(specs)]
    for c in store.claim_due("w", n, 30):
        store.finish(c.job.id, c.generation, AttemptResult(Outcome.FAILED, 1))
    return ids


def _new_id(store: Store, clock: FakeClock) -> int:
    return store.insert([JobSpec(("true",), clock.now(), 1)])[0].job.id


def test_purging_the_newest_job_does_not_free_its_id(store: Store, clock: FakeClock) -> None:
    ids = _dead(store, clock, 3)
    clock.advance(days=1)
    assert store.purge_dead(clock.now(), 100)[0] == 3
    assert _new_id(store, clock) > max(ids)


def test_pruning_every_job_does_not_free_their_ids(store: Store, clock: FakeClock) -> None:
    given = _dead(store, clock, 2)
    given.append(_new_id(store, clock))
    store.cancel(given[-1], "test")
    clock.advance(days=1)
    assert store.prune({"dead": clock.now(), "cancelled": clock.now()}).total == 3
    assert store.list_jobs(None, None, 10, None) == []
    after = [_new_id(store, clock) for _ in range(2)]
    assert min(after) > max(given) and after[1] == after[0] + 1


@pytest.mark.store_parts("schedules")
def test_materialized_jobs_do_not_reuse_ids_either(store: Store, clock: FakeClock) -> None:
    ids = _dead(store, clock, 2)
    clock.advance(days=1)
    store.purge_dead(clock.now(), 100)
    timing = Timing("UTC", every=60, anchor=clock.now())
    store.create_schedule(ScheduleSpec(timing, Policy(), TEMPLATE, 1000))
    clock.advance(minutes=2)
    store.materialize(10)
    occurrences = store.list_jobs(None, None, 10, None)
    assert occurrences and min(j.id for j in occurrences) > max(ids)
