"""Log bytes accounted in the store: sized when attempts end, per owner, taken off when
their jobs are pruned or purged (issue 12 item 5)."""

from __future__ import annotations

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import AttemptResult, JobSpec
from jobctl.domain.states import Outcome
from jobctl.errors import JobctlError
from jobctl.store.base import Store

W = "worker"


def _run(store: Store, clock: FakeClock, owner: int, size: int, outcome: Outcome) -> int:
    spec = JobSpec(command=("true",), run_at=clock.now(), owner_uid=owner, max_attempts=1)
    store.insert([spec])
    [c] = store.claim_due(W, 1, 30)
    store.finish_many([(c.job.id, c.generation, AttemptResult(outcome, log_bytes=size))])
    return c.job.id


def test_log_bytes_are_counted_per_owner_and_dropped_with_their_jobs(
    store: Store, clock: FakeClock
) -> None:
    assert store.log_bytes() == 0
    ok = _run(store, clock, 1000, 300, Outcome.SUCCEEDED)
    _run(store, clock, 1000, 20, Outcome.FAILED)  # dead
    _run(store, clock, 2000, 5, Outcome.SUCCEEDED)
    assert store.log_bytes() == 325
    assert store.log_bytes(1000) == 320 and store.log_bytes(2000) == 5
    assert store.log_bytes(3000) == 0
    assert [a.number for a in store.get(ok).attempts] == [1]
    clock.advance(100)
    count, _ = store.purge_dead(clock.now(), 100)
    assert count == 1 and store.log_bytes(1000) == 300
    pruned = store.prune({"succeeded": clock.now()})
    assert pruned.total == 2
    assert store.log_bytes() == 0 and store.log_bytes(1000) == 0


def test_a_fenced_finish_still_sizes_the_log(store: Store, clock: FakeClock) -> None:
    spec = JobSpec(command=("true",), run_at=clock.now(), owner_uid=1000)
    store.insert([spec])
    [c] = store.claim_due(W, 1, 30)
    store.cancel(c.job.id, "stop")  # the executor's finish is then refused
    out = store.finish_many(
        [(c.job.id, c.generation, AttemptResult(Outcome.CANCELLED, log_bytes=42))]
    )
    assert isinstance(out[0], JobctlError)  # fenced: the job is no longer running
    assert store.log_bytes(1000) == 42
    # the same size again (a retried report) is not counted twice
    store.finish_many([(c.job.id, c.generation, AttemptResult(Outcome.CANCELLED, log_bytes=42))])
    assert store.log_bytes() == 42
