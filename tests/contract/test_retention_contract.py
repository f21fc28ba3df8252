"""Retention: only finished jobs older than their status's age are pruned, in batches."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import AttemptResult, JobSpec, JobTemplate
from jobctl.domain.schedule import Policy, ScheduleSpec, Timing
from jobctl.domain.states import JobStatus, Outcome
from jobctl.store.base import Store
from jobctl.store.rows import to_ms
from tests.contract.raw import raw_write


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


@pytest.mark.store_parts("schedules")
def test_an_occurrences_job_is_kept_while_its_cursor_could_reach_it(
    store: Store, clock: FakeClock
) -> None:
    """The job is the evidence that an occurrence fired: pruned while the cursor could
    still reach its nominal time (a cursor moved back by an edit under a lagging clock, or
    restored), the occurrence would fire again."""
    spec = ScheduleSpec(
        Timing("UTC", cron="0 * * * *"), Policy(), JobTemplate(("true",), max_attempts=1), 1
    )
    sched = store.create_schedule(spec)
    clock.set(sched.next_run_at)
    [(_, job_id, nominal)] = store.materialize(10).created
    [claim] = store.claim_due("w", 10, 30)
    store.finish(job_id, claim.generation, AttemptResult(Outcome.SUCCEEDED, 0))
    clock.advance(days=8)
    cutoffs = {"succeeded": clock.now() - timedelta(days=7)}
    raw_write(store, "UPDATE schedule_cursors SET next_run_at = ? WHERE id = ?",
              (to_ms(nominal), sched.id))  # fmt: skip
    assert store.prunable(cutoffs) == {"succeeded": 0}
    assert store.prune(cutoffs).total == 0
    assert store.get(job_id).status is JobStatus.SUCCEEDED
    raw_write(store, "UPDATE schedule_cursors SET next_run_at = ? WHERE id = ?",
              (to_ms(nominal + timedelta(hours=1)), sched.id))  # fmt: skip
    assert store.prunable(cutoffs) == {"succeeded": 1}
    assert store.prune(cutoffs).jobs == {"succeeded": 1}


@pytest.mark.store_parts("schedules")
def test_a_deleted_schedules_jobs_are_pruned_whatever_its_cursor(
    store: Store, clock: FakeClock
) -> None:
    spec = ScheduleSpec(
        Timing("UTC", cron="0 * * * *"), Policy(), JobTemplate(("true",), max_attempts=1), 1
    )
    sched = store.create_schedule(spec)
    clock.set(sched.next_run_at)
    [(_, job_id, nominal)] = store.materialize(10).created
    store.cancel(job_id, "not wanted")
    raw_write(store, "UPDATE schedule_cursors SET next_run_at = ? WHERE id = ?",
              (to_ms(nominal), sched.id))  # fmt: skip
    store.delete_schedule(sched.id)  # it never fires again: nothing to guard
    clock.advance(days=8)
    assert store.prune({"cancelled": clock.now() - timedelta(days=7)}).jobs == {"cancelled": 1}
