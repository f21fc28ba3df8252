"""Every compare-and-set of the SQLite store checks that it hit its row.

With one writer these misses cannot happen in the daemon; each test makes one happen
on purpose (a temporary trigger on the writer's connection plays the other writer) and
checks that the operation refuses as a whole and leaves nothing half-done.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.domain.dispatch import QueuePolicy
from jobctl.domain.models import AttemptResult, JobSpec, JobTemplate
from jobctl.domain.schedule import Policy, ScheduleSpec, Timing
from jobctl.domain.states import JobStatus, Outcome
from jobctl.errors import Conflict, LeaseLost, NotFound
from jobctl.store.sqlite import SqliteStore

T0 = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    s = SqliteStore(tmp_path / "cas.db", FakeClock(T0))
    yield s
    s.close()


def _sql(store: SqliteStore, sql: str) -> None:
    store.db.writer.outside_transaction(lambda c: c.execute(sql))


def _end_attempt_elsewhere(store: SqliteStore, job_id: int) -> None:
    _sql(store, f"UPDATE attempts SET outcome = 'failed', finished_at = 1 WHERE job_id = {job_id}")


def _spec(queue: str = "default") -> JobSpec:
    return JobSpec(command=("true",), run_at=T0, owner_uid=1000, queue=queue)


def test_spending_tokens_of_a_bucket_changed_since_it_was_read_fails_the_claim(
    store: SqliteStore,
) -> None:
    store.set_queue(QueuePolicy("r", rate=1.0, burst=5))
    store.insert([_spec("r") for _ in range(3)])
    _sql(
        store,
        "CREATE TEMP TRIGGER other_writer AFTER UPDATE OF status ON jobs "
        "BEGIN UPDATE queues SET tokens = tokens - 1 WHERE name = 'r'; END",
    )
    with pytest.raises(Conflict, match="tokens changed"):
        store.claim_due("me", 10, 30)
    assert {j.status for j in store.list_jobs(None, "r", 10, None)} == {JobStatus.SCHEDULED}
    _sql(store, "DROP TRIGGER other_writer")
    assert len(store.claim_due("me", 10, 30)) == 3
    [(_, tokens)] = [(p, t) for p, t in store.queues() if p.name == "r"]
    assert tokens == pytest.approx(2.0)


def test_a_manual_occurrence_never_moves_the_last_job_back(store: SqliteStore) -> None:
    spec = ScheduleSpec(Timing("UTC", cron="0 * * * *"), Policy(), JobTemplate(("true",)), 1000)
    sched = store.create_schedule(spec)
    _sql(store, f"UPDATE schedule_cursors SET last_job_id = 999999 WHERE id = '{sched.id}'")
    job = store.trigger_schedule(sched.id)
    assert job.id < 999999
    assert store.get_schedule(sched.id).last_job_id == 999999
    _sql(store, f"UPDATE schedule_cursors SET last_job_id = NULL WHERE id = '{sched.id}'")
    job = store.trigger_schedule(sched.id)
    assert store.get_schedule(sched.id).last_job_id == job.id


def test_a_manual_occurrence_whose_cursor_vanished_is_refused_whole(store: SqliteStore) -> None:
    spec = ScheduleSpec(Timing("UTC", cron="0 * * * *"), Policy(), JobTemplate(("true",)), 1000)
    sched = store.create_schedule(spec)
    _sql(
        store,
        "CREATE TEMP TRIGGER other_writer AFTER INSERT ON jobs "
        f"BEGIN DELETE FROM schedule_cursors WHERE id = '{sched.id}'; END",
    )
    with pytest.raises(NotFound, match="cursor is gone"):
        store.trigger_schedule(sched.id)
    _sql(store, "DROP TRIGGER other_writer")
    assert store.list_jobs(None, None, 10, None) == []


def test_finishing_an_attempt_that_is_no_longer_open_changes_nothing(
    store: SqliteStore,
) -> None:
    store.insert([_spec(), _spec()])
    a, b = store.claim_due("me", 2, 30)
    _end_attempt_elsewhere(store, a.job.id)
    failed = AttemptResult(Outcome.FAILED, exit_code=1)
    with pytest.raises(LeaseLost, match="no longer open"):
        store.finish(a.job.id, a.generation, failed)
    assert store.get(a.job.id).status is JobStatus.RUNNING
    out = store.finish_many([(a.job.id, a.generation, failed), (b.job.id, b.generation, failed)])
    assert isinstance(out[0], LeaseLost)
    assert not isinstance(out[1], LeaseLost)
    assert store.get(a.job.id).status is JobStatus.RUNNING
    assert store.get(b.job.id).status is not JobStatus.RUNNING


def test_cancelling_a_running_job_whose_attempt_ended_elsewhere_is_refused(
    store: SqliteStore,
) -> None:
    store.insert([_spec()])
    [c] = store.claim_due("me", 1, 30)
    _end_attempt_elsewhere(store, c.job.id)
    with pytest.raises(LeaseLost):
        store.cancel(c.job.id, "stop")
    assert store.get(c.job.id).status is JobStatus.RUNNING
