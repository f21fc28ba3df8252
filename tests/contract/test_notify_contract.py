"""A job's failure notifier and its record, on every backend (issue 12): ``on_failure`` is
stored with the job (and in its fingerprint only when set), ``record_notification`` keeps
what the notification did, and a job that is gone is NotFound."""

from __future__ import annotations

import json

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import AttemptResult, JobSpec
from jobctl.domain.states import JobStatus, Outcome
from jobctl.errors import NotFound
from jobctl.store.base import Store


def test_on_failure_is_kept_and_the_notification_recorded(store: Store, clock: FakeClock) -> None:
    spec = JobSpec(("false",), clock.now(), 1000, max_attempts=1, on_failure="echo $X | mail")
    [ins] = store.insert([spec])
    [c] = store.claim_due("w", 1, 30)
    store.finish_many([(c.job.id, c.generation, AttemptResult(Outcome.FAILED, 1, "exit code 1"))])
    job = store.get(ins.job.id)
    assert job.status is JobStatus.DEAD and job.spec.on_failure == "echo $X | mail"
    assert job.notified is None
    record = json.dumps({"at": "2027-01-01T00:00:00.000Z", "steps": [{"exit_code": 0}]})
    store.record_notification(ins.job.id, record)
    assert store.get(ins.job.id).notified == record
    with pytest.raises(NotFound):
        store.record_notification(ins.job.id + 1000, record)


def test_the_fingerprint_covers_on_failure_only_when_set(store: Store, clock: FakeClock) -> None:
    plain = JobSpec(("true",), clock.now(), 1000, key="k")
    assert "on_failure" not in plain._fingerprint_fields()
    [first] = store.insert([plain])
    [again] = store.insert([plain])
    assert not again.created and again.job.id == first.job.id
    other = JobSpec(("true",), clock.now(), 1000, key="k2", on_failure="x")
    [ins] = store.insert([other])
    assert store.get(ins.job.id).spec.on_failure == "x"
    assert ins.job.spec.fingerprint() != JobSpec(("true",), clock.now(), 1000).fingerprint()
