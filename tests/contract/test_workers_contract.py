"""Payload jobs and worker queues in the store, on every backend (issue 16,
docs/workers.md): a payload round-trips; the first payload job makes its queue a worker
queue, which then refuses command jobs (and a queue with command jobs refuses payload
jobs); the executor's claim never takes a worker queue's job and the timer's wake-ups do
not count them; a lease takes them, only the lessee's own unless the queue's list (or
being an admin) allows every owner's; a worker lease that expires is reclaimed like any;
a stale generation's finish changes nothing; a released lease uses no attempt; a
schedule's template is held to its queue's kind when created and when edited."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import AttemptResult, JobSpec, JobTemplate
from jobctl.domain.schedule import Policy, ScheduleSpec, Timing
from jobctl.domain.states import JobStatus, Outcome
from jobctl.domain.workers import Lessee, payload_text
from jobctl.errors import Conflict, LeaseLost
from jobctl.store.base import Store

EX = "executor"
ALICE, BOB = 1000, 1001


def _job(
    clock: FakeClock,
    owner: int = ALICE,
    queue: str = "work",
    key: str | None = None,
    max_attempts: int = 3,
) -> JobSpec:
    payload = payload_text({"task": "m:f", "kwargs": {"n": 1}})
    return JobSpec(
        command=(),
        payload=payload,
        run_at=clock.now(),
        owner_uid=owner,
        queue=queue,
        key=key,
        max_attempts=max_attempts,
    )


def _cmd(clock: FakeClock, queue: str = "work") -> JobSpec:
    return JobSpec(command=("true",), run_at=clock.now(), owner_uid=ALICE, queue=queue)


def test_a_payload_round_trips_and_its_key_covers_it(store: Store, clock: FakeClock) -> None:
    [ins] = store.insert([_job(clock, key="k")])
    got = store.get(ins.job.id)
    assert got.spec.payload == '{"kwargs":{"n":1},"task":"m:f"}' and got.spec.command == ()
    [again] = store.insert([_job(clock, key="k")])
    assert not again.created and again.job.id == ins.job.id
    other = JobSpec(
        command=(), payload="[2]", run_at=clock.now(), owner_uid=ALICE, queue="work", key="k"
    )
    with pytest.raises(Conflict):
        store.insert([other])


def test_a_queue_holds_one_kind_of_job(store: Store, clock: FakeClock) -> None:
    store.insert([_job(clock)])
    assert store.worker_queues() == {"work": ()}
    with pytest.raises(Conflict, match="served by workers"):
        store.insert([_cmd(clock)])
    store.insert([_cmd(clock, "shell")])
    with pytest.raises(Conflict, match="queue of their own"):
        store.insert([_job(clock, queue="shell")])
    assert "shell" not in store.worker_queues()
    with pytest.raises(Conflict):
        store.set_worker_queue("shell", ["uid:1"])


def test_one_write_cannot_give_a_new_queue_both_kinds(store: Store, clock: FakeClock) -> None:
    """Command jobs, then payload jobs for the same new queue, in one batched write (two
    requests' groups): the payload group is refused as if the command job were stored
    already, whichever comes first; a refused group's jobs count for nothing."""
    submit = store.submit_insert_groups  # type: ignore[attr-defined]
    out = submit([[_cmd(clock, "fresh")], [_job(clock, queue="fresh")]]).result()
    assert out[0][0].created and isinstance(out[1], Conflict)
    assert "fresh" not in store.worker_queues()
    out = submit([[_job(clock, queue="new")], [_cmd(clock, "new")]]).result()
    assert out[0][0].created and isinstance(out[1], Conflict)
    assert store.worker_queues() == {"new": ()}
    out = submit([[_cmd(clock, "new"), _cmd(clock, "other")], [_job(clock, queue="other")]])
    assert isinstance(out.result()[0], Conflict)  # refused whole: "other" got nothing
    assert out.result()[1][0].created and "other" in store.worker_queues()


def test_the_executor_never_claims_a_workers_job(store: Store, clock: FakeClock) -> None:
    store.insert([_job(clock), _cmd(clock, "shell")])
    claims = store.claim_due(EX, 10, 30)
    assert [c.job.spec.queue for c in claims] == ["shell"]
    assert store.claim_due(EX, 10, 30) == []
    w = store.wakeups(EX)
    assert not w.due_now  # the workers' job does not wake the timer into a busy loop


def test_a_lease_takes_the_lessees_own_unless_the_queue_allows(
    store: Store, clock: FakeClock
) -> None:
    store.insert([_job(clock, ALICE), _job(clock, BOB)])
    bob = Lessee(BOB, gids=frozenset({50}))
    [mine] = store.lease(["work"], bob, 10, 30)
    assert mine.job.spec.owner_uid == BOB and mine.job.lease_owner == "@worker:1001"
    assert store.lease(["work"], bob, 10, 30) == []
    assert store.lease(["other"], Lessee(ALICE), 10, 30) == []
    store.set_worker_queue("work", ["gid:50"])
    [alices] = store.lease(["work"], bob, 10, 30)
    assert alices.job.spec.owner_uid == ALICE and alices.attempt == 1


def test_an_admin_leases_every_owners_jobs(store: Store, clock: FakeClock) -> None:
    store.insert([_job(clock, ALICE), _job(clock, BOB)])
    got = store.lease(["work"], Lessee(0, admin=True), 10, 30)
    assert sorted(c.job.spec.owner_uid for c in got) == [ALICE, BOB]


def test_an_expired_worker_lease_is_reclaimed_and_the_stale_finish_fenced(
    store: Store, clock: FakeClock
) -> None:
    store.insert([_job(clock, max_attempts=3)])
    [first] = store.lease(["work"], Lessee(ALICE), 1, 5)
    assert store.heartbeat([(first.job.id, first.generation)], 5) == []
    clock.advance(6)
    [back] = store.reclaim_expired(10, EX)
    assert back.status is JobStatus.SCHEDULED
    clock.advance(3600)
    [second] = store.lease(["work"], Lessee(ALICE), 1, 5)
    assert second.generation > first.generation
    with pytest.raises(LeaseLost):
        store.finish(first.job.id, first.generation, AttemptResult(Outcome.SUCCEEDED))
    assert store.heartbeat([(first.job.id, first.generation)], 5) == [first.job.id]
    done = store.finish(
        second.job.id, second.generation, AttemptResult(Outcome.SUCCEEDED, output_tail="42")
    )
    assert done.status is JobStatus.SUCCEEDED
    attempts = store.get(done.id).attempts
    assert [a.outcome for a in attempts] == [Outcome.LEASE_EXPIRED, Outcome.SUCCEEDED]


def test_a_released_lease_uses_no_attempt_and_waits_its_delay(
    store: Store, clock: FakeClock
) -> None:
    """What ``POST /v1/leases/{id}/release`` records: an interrupted attempt (free), the
    job due again after the delay (at once without one)."""
    store.insert([_job(clock, max_attempts=1)])
    [first] = store.lease(["work"], Lessee(ALICE), 1, 30)
    back = AttemptResult(Outcome.INTERRUPTED, error="released", retry_after=60.0)
    job = store.finish(first.job.id, first.generation, back)
    assert job.status is JobStatus.SCHEDULED and job.failures == 0
    assert job.run_at == clock.now() + timedelta(seconds=60)
    assert store.lease(["work"], Lessee(ALICE), 1, 30) == []
    clock.advance(60)
    [second] = store.lease(["work"], Lessee(ALICE), 1, 30)
    job = store.finish(second.job.id, second.generation, AttemptResult(Outcome.INTERRUPTED))
    assert job.run_at == clock.now() and job.failures == 0
    [third] = store.lease(["work"], Lessee(ALICE), 1, 30)
    assert third.generation == first.generation + 2


def _schedule(template: JobTemplate) -> ScheduleSpec:
    return ScheduleSpec(Timing("UTC", cron="0 6 * * *"), Policy(), template, ALICE)


PAYLOAD_T = JobTemplate(command=(), payload='{"task":"m:f"}', queue="work")
COMMAND_T = JobTemplate(command=("true",), queue="shell")


@pytest.mark.store_parts("schedules")
def test_a_schedule_keeps_its_queue_to_its_kind(store: Store, clock: FakeClock) -> None:
    """Created one by one (not only in a batch): a payload template makes its queue a
    worker queue, a command template is refused on one."""
    store.create_schedule(_schedule(PAYLOAD_T))
    assert store.worker_queues() == {"work": ()}
    with pytest.raises(Conflict, match="served by workers"):
        store.create_schedule(_schedule(replace(COMMAND_T, queue="work")))
    store.insert([_cmd(clock, "shell")])
    with pytest.raises(Conflict, match="queue of their own"):
        store.create_schedule(_schedule(replace(PAYLOAD_T, queue="shell")))


@pytest.mark.store_parts("schedules")
def test_an_edit_moving_a_template_to_a_queue_of_the_other_kind_is_refused(
    store: Store, clock: FakeClock
) -> None:
    pay = store.create_schedule(_schedule(PAYLOAD_T))
    cmd = store.create_schedule(_schedule(COMMAND_T))
    store.insert([_cmd(clock, "shell")])
    moved = replace(cmd.spec, template=replace(COMMAND_T, queue="work"))
    with pytest.raises(Conflict, match="served by workers"):
        store.edit_schedule(cmd.id, moved, cmd.spec, ALICE)
    moved = replace(pay.spec, template=replace(PAYLOAD_T, queue="shell"))
    with pytest.raises(Conflict, match="queue of their own"):
        store.edit_schedule(pay.id, moved, pay.spec, ALICE)
    assert store.get_schedule(cmd.id).spec == cmd.spec  # nothing changed
    assert store.get_schedule(pay.id).spec == pay.spec
    fresh = replace(pay.spec, template=replace(PAYLOAD_T, queue="fresh"))
    store.edit_schedule(pay.id, fresh, pay.spec, ALICE)  # a new queue: now a worker queue
    assert "fresh" in store.worker_queues()


@pytest.mark.store_parts("schedules")
def test_a_command_schedule_whose_queue_became_a_worker_queue_breaks_instead_of_firing(
    store: Store, clock: FakeClock
) -> None:
    """Marked after the schedule was made (no command job waited there to refuse it):
    its occurrence would wait for a worker that cannot run it, so the schedule is broken
    with the reason, and fires again once moved to another queue and resumed."""
    cmd = store.create_schedule(_schedule(COMMAND_T))
    store.set_worker_queue("shell", None)
    clock.advance(days=1)
    done = store.materialize(100)
    assert not done.created
    assert [sid for sid, _ in done.broken] == [cmd.id]
    assert "became a worker queue" in done.broken[0][1]
    assert store.materialize(100).schedules == 0  # broken: not read again
    moved = replace(cmd.spec, template=replace(COMMAND_T, queue="other"))
    store.edit_schedule(cmd.id, moved, cmd.spec, ALICE)
    store.resume_schedule(cmd.id)
    again = store.materialize(100)
    assert [sid for sid, _, _ in again.created] == [cmd.id] and not again.broken
