"""Per-queue defaults in the store contract (both backends): a queue's resource limits
and failure notifier are stored with its limits, and a claim fills in the queue's limits
where a job gives none (issue 12)."""

from __future__ import annotations

from dataclasses import replace

from jobctl.domain.clock import FakeClock
from jobctl.domain.dispatch import QueuePolicy
from jobctl.domain.resources import Resources
from jobctl.store.base import Store
from tests.contract.test_queue_contract import W, spec

GIB = 1 << 30


def test_queue_defaults_are_stored_with_its_limits(store: Store) -> None:
    policy = QueuePolicy(
        "batch", concurrency=2, resources=Resources(5, GIB, 50.0), on_failure="notify-ops"
    )
    assert store.set_queue(policy) == policy
    assert store.queue_policy("batch") == policy
    [(listed, _)] = store.queues()
    assert listed == policy
    cleared = replace(policy, resources=None, on_failure=None)
    assert store.set_queue(cleared) == cleared
    assert store.queue_policy("batch") == cleared


def test_a_claim_fills_in_the_queues_limits_one_by_one(store: Store, clock: FakeClock) -> None:
    store.set_queue(QueuePolicy("batch", resources=Resources(10, GIB)))
    own, bare, elsewhere = store.insert(
        [
            spec(clock, queue="batch", resources=Resources(nice=3, cpu_quota=25.0)),
            spec(clock, queue="batch"),
            spec(clock, queue="default"),
        ]
    )
    got = {c.job.id: c.job.spec.resources for c in store.claim_due(W, 10, 30)}
    assert got == {
        own.job.id: Resources(3, GIB, 25.0),  # its own nice and cpu, the queue's memory
        bare.job.id: Resources(10, GIB),
        elsewhere.job.id: None,
    }
    # the stored job keeps only its own: a later change of the queue reaches it
    assert store.get(bare.job.id).spec.resources is None


def test_a_changed_queue_default_reaches_the_next_attempt(store: Store, clock: FakeClock) -> None:
    store.set_queue(QueuePolicy("batch", resources=Resources(memory_max=GIB)))
    store.insert([spec(clock, queue="batch")])
    store.set_queue(QueuePolicy("batch", resources=Resources(memory_max=2 * GIB)))
    [c] = store.claim_due(W, 10, 30)
    assert c.job.spec.resources == Resources(memory_max=2 * GIB)
