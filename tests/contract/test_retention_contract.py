"""Retention: only finished jobs older than their status's age are pruned, in batches."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import AttemptResult, JobSpec
from jobctl.domain.states import JobStatus, Outcome
from jobctl.store.base import Store


def _finished(store: Store, clock: FakeClock, n: int, outcome: Outcome) -> list[int]:
    specs = [JobSpec(("true",), clock.now(), 1, max_attempts=1) for _ in range(n)]
    ids = [i.job.id for i in store.insert(specs)]
    for c in store.claim_due("w", n, 30):
        store.finish(c.job.id, c.generation, AttemptResult(outcome, 0))
    return ids


def test_prune_by_age_and_status_in_batches(store: Store, clock: FakeClock) -> None:
    _finished(store, clock, 5, Outcome.SUCCEEDED)
    dead = _finished(store, clock, 2, Outcome.FAILED)
    waiting = store.insert([JobSpec(("true",), clock.now() + timedelta(days=30), 1)])[0].job
    clock.advance(days=8)
    cutoffs = {
        "succeeded": clock.now() - timedelta(days=7),
        "dead": clock.now() - timedelta(days=30),
    }
    assert store.prunable(cutoffs) == {"succeeded": 5, "dead": 0}
    first = store.prune(cutoffs, limit=3)
    assert first.jobs == {"succeeded": 3} and first.total == 3
    rest = store.prune(cutoffs, limit=100)
    assert rest.jobs == {"succeeded": 2, "dead": 0}
    assert store.prune(cutoffs).total == 0
    remaining = {j.id for j in store.list_jobs(None, None, 100, None)}
    assert remaining == {*dead, waiting.id}
    assert store.get(waiting.id).status is JobStatus.SCHEDULED
    store.checkpoint()


def test_only_final_jobs_can_be_pruned(store: Store, clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="only final jobs"):
        store.prune({"scheduled": clock.now()})
