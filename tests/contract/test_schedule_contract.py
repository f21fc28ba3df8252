"""Schedules in the store contract: materialization, misfire, overlap, pause, trigger."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import AttemptResult, JobSpec, JobTemplate
from jobctl.domain.schedule import Misfire, Overlap, Policy, ScheduleSpec, Timing, jitter_offset
from jobctl.domain.states import JobStatus, Outcome
from jobctl.errors import Conflict, InvalidInput, NotFound
from jobctl.store.base import Store

pytestmark = pytest.mark.store_parts("schedules")

TEMPLATE = JobTemplate(command=("true",), max_attempts=1)


def hourly(**policy: object) -> ScheduleSpec:
    return ScheduleSpec(Timing("UTC", cron="0 * * * *"), Policy(**policy), TEMPLATE, 1000)  # type: ignore[arg-type]


def at_hour(clock: FakeClock, hours: float) -> datetime:
    base = clock.now().replace(minute=0, second=0, microsecond=0)
    return base + timedelta(hours=hours)


def run_job(store: Store, job_id: int, outcome: Outcome = Outcome.SUCCEEDED) -> None:
    claims = [c for c in store.claim_due("w", 100, 30) if c.job.id == job_id]
    assert claims, f"job {job_id} was not due"
    store.finish(job_id, claims[0].generation, AttemptResult(outcome, 0))


def test_create_get_list_by_id_and_name(store: Store, clock: FakeClock) -> None:
    s = store.create_schedule(
        ScheduleSpec(
            Timing("Asia/Tokyo", cron="0 6 * * *"), Policy(), TEMPLATE, 1000, name="report"
        )
    )
    assert s.id.startswith("sch-") and s.next_run_at == datetime(2027, 3, 1, 21, tzinfo=UTC)
    assert store.get_schedule("report") == store.get_schedule(s.id) == s
    assert [x.id for x in store.list_schedules()] == [s.id]
    with pytest.raises(Conflict):
        store.create_schedule(
            ScheduleSpec(Timing("UTC", cron="@daily"), Policy(), TEMPLATE, 1000, name="report")
        )
    with pytest.raises(NotFound):
        store.get_schedule("nope")
    with pytest.raises(InvalidInput):
        ScheduleSpec(Timing("UTC", cron="@daily"), Policy(), TEMPLATE, 1, name="sch-x")


def test_occurrence_becomes_one_job_with_its_key(store: Store, clock: FakeClock) -> None:
    s = store.create_schedule(hourly())
    assert store.materialize(100).created == ()
    clock.set(at_hour(clock, 1))
    m = store.materialize(100)
    [(sid, job_id, nominal)] = m.created
    assert (sid, nominal) == (s.id, at_hour(clock, 0))
    job = store.get(job_id)
    assert job.key == f"{s.id}@{nominal:%Y-%m-%dT%H:%M:%SZ}"
    assert (job.spec.schedule_id, job.spec.scheduled_for, job.run_at) == (s.id, nominal, nominal)
    assert store.materialize(100).created == ()  # the cursor moved in the same transaction
    assert store.get_schedule(s.id).next_run_at == at_hour(clock, 1)
    assert store.schedule_wakeup() == at_hour(clock, 1)


@pytest.mark.parametrize(
    ("misfire", "jobs", "skipped"),
    [(Misfire.SKIP, 0, 6), (Misfire.ONCE, 1, 5), (Misfire.ALL, 6, 0)],
)
def test_daemon_down_six_hours(
    store: Store, clock: FakeClock, misfire: Misfire, jobs: int, skipped: int
) -> None:
    s = store.create_schedule(hourly(misfire=misfire, overlap=Overlap.ALLOW))
    clock.set(at_hour(clock, 6.5))  # occurrences 13:00 .. 18:00 missed
    m = store.materialize(100)
    assert len(m.created) == jobs
    got = store.get_schedule(s.id)
    assert got.misfire_skips == skipped and got.next_run_at == at_hour(clock, 1)
    if skipped:
        [rec] = [r for r in m.skipped if r.reason == "misfire"]
        assert rec.skips.count == skipped
        assert got.last_skip_reason == "misfire"
        _, history = store.schedule_history(s.id, 10)
        assert history[0].skips.count == skipped
    if misfire is Misfire.ONCE:
        assert m.created[0][2] == at_hour(clock, 0)  # keyed by the latest occurrence


def test_overlap_skip_while_previous_unfinished(store: Store, clock: FakeClock) -> None:
    s = store.create_schedule(hourly(overlap=Overlap.SKIP))
    clock.set(at_hour(clock, 1))
    [(_, first, _)] = store.materialize(100).created
    clock.set(at_hour(clock, 1))  # the first job never ran: the next occurrence is skipped
    m = store.materialize(100)
    assert m.created == () and store.get_schedule(s.id).overlap_skips == 1
    run_job(store, first)
    clock.set(at_hour(clock, 1))
    assert len(store.materialize(100).created) == 1


def test_overlap_queue_waits_for_the_previous_job(store: Store, clock: FakeClock) -> None:
    s = store.create_schedule(hourly(overlap=Overlap.QUEUE))
    clock.set(at_hour(clock, 1))
    [(_, first, _)] = store.materialize(100).created
    clock.set(at_hour(clock, 1))
    assert store.materialize(100).created == ()
    waiting = store.get_schedule(s.id).waiting
    assert waiting == clock.now()
    assert store.schedule_wakeup() == at_hour(clock, 1)
    run_job(store, first)
    assert store.schedule_wakeup() == clock.now()  # released: work now
    [(_, second, nominal)] = store.materialize(100).created
    assert nominal == waiting and store.get(second).status is JobStatus.SCHEDULED
    assert store.get_schedule(s.id).waiting is None


def test_jitter_delays_the_run_but_not_the_key(store: Store, clock: FakeClock) -> None:
    s = store.create_schedule(hourly(jitter=600.0))
    clock.set(at_hour(clock, 1))
    [(_, job_id, nominal)] = store.materialize(100).created
    job = store.get(job_id)
    assert job.run_at == nominal + jitter_offset(s.id, 600)
    assert job.key.endswith(f"{nominal:%H:%M:%SZ}")


def test_pause_resume_records_what_passed(store: Store, clock: FakeClock) -> None:
    s = store.create_schedule(hourly())
    store.pause_schedule(s.id)
    clock.set(at_hour(clock, 3.5))
    assert store.materialize(100).created == ()
    resumed, passed = store.resume_schedule(s.id)
    assert passed.count == 3 and resumed.pause_skips == 3 and not resumed.paused
    assert resumed.next_run_at == at_hour(clock, 1) and resumed.last_skip_reason == "paused"


def test_delete_keeps_history(store: Store, clock: FakeClock) -> None:
    s = store.create_schedule(
        ScheduleSpec(Timing("UTC", cron="0 * * * *"), Policy(), TEMPLATE, 1000, name="gone")
    )
    clock.set(at_hour(clock, 1))
    [(_, job_id, _)] = store.materialize(100).created
    store.delete_schedule("gone")
    clock.set(at_hour(clock, 5))
    assert store.materialize(100).created == ()
    assert store.get_schedule(s.id).deleted_at is not None
    with pytest.raises(NotFound):
        store.get_schedule("gone")
    assert store.list_schedules() == [] and len(store.list_schedules(include_deleted=True)) == 1
    assert [j.id for j in store.schedule_history(s.id, 10)[0]] == [job_id]


def test_a_deleted_schedules_name_can_be_used_again(store: Store, clock: FakeClock) -> None:
    """Issue 12, item 1: the old one keeps its history and shows its name; the name is free."""

    def named(cron: str) -> ScheduleSpec:
        return ScheduleSpec(Timing("UTC", cron=cron), Policy(), TEMPLATE, 1000, name="w")

    old = store.create_schedule(named("0 * * * *"))
    clock.set(at_hour(clock, 1))
    [(_, job_id, _)] = store.materialize(100).created
    store.delete_schedule("w")
    new = store.create_schedule(named("0 7 * * *"))
    assert new.id != old.id and store.get_schedule("w").id == new.id
    with pytest.raises(Conflict):
        store.create_schedule(named("0 8 * * *"))  # live names stay unique
    gone = store.get_schedule(old.id)
    assert gone.spec.name == "w" and gone.deleted_at is not None
    assert [j.id for j in store.schedule_history(old.id, 10)[0]] == [job_id]
    store.delete_schedule("w")
    store.delete_schedule(old.id)  # deleting again changes nothing
    clock.advance(1)  # listed oldest first
    third = store.create_schedule(named("0 9 * * *"))
    assert store.get_schedule("w").id == third.id
    listed = store.list_schedules(include_deleted=True)
    assert [(s.id, s.spec.name) for s in listed] == [(old.id, "w"), (new.id, "w"), (third.id, "w")]


def test_trigger_is_a_manual_occurrence(store: Store, clock: FakeClock) -> None:
    s = store.create_schedule(hourly())
    job = store.trigger_schedule(s.id)
    assert job.key == f"{s.id}@manual-{clock.now():%Y-%m-%dT%H:%M:%SZ}"
    assert job.run_at == clock.now() and job.spec.schedule_id == s.id
    assert store.get_schedule(s.id).last_job_id == job.id


def test_a_thousand_schedules_each_occurrence_exactly_once(store: Store, clock: FakeClock) -> None:
    rng = random.Random(5)
    crons = ["*/5 * * * *", "0 * * * *", "15,45 * * * *", "0 */3 * * *", "30 2 * * *"]
    zones = ["UTC", "Asia/Tokyo", "America/New_York", "Australia/Lord_Howe"]
    specs = []
    for i in range(1000):
        timing = (
            Timing(rng.choice(zones), cron=rng.choice(crons))
            if i % 4
            else Timing("UTC", every=rng.choice([300.0, 900.0, 3600.0]), anchor=clock.now())
        )
        specs.append(
            store.create_schedule(
                ScheduleSpec(timing, Policy(overlap=Overlap.ALLOW), TEMPLATE, 1000)
            )
        )
    start = clock.now()
    seen: dict[str, list[datetime]] = {}
    end = start + timedelta(hours=2)
    while (wake := store.schedule_wakeup()) is not None and wake <= end:
        clock.set(max(wake, clock.now()))  # what the materializer service does: sleep, run
        while (m := store.materialize(500)).schedules:
            for sid, _, nominal in m.created:
                seen.setdefault(sid, []).append(nominal)
    assert all(s.misfire_skips == 0 for s in store.list_schedules())
    for s in specs:
        expected, t = [], start
        while (t := s.spec.timing.next_after(t)) <= clock.now():
            expected.append(t)
        assert seen.get(s.id, []) == expected, s.spec.timing
    total = sum(len(v) for v in seen.values())
    assert len(store.list_jobs(None, None, 100_000, None)) == total


def test_a_taken_schedule_id_is_drawn_again(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobctl.store import schedules

    ids = iter(["sch-000000000001", "sch-000000000001", "sch-000000000002"])
    monkeypatch.setattr(schedules, "new_schedule_id", lambda _now: next(ids))
    a = store.create_schedule(hourly())
    b = store.create_schedule(hourly())
    assert (a.id, b.id) == ("sch-000000000001", "sch-000000000002")


def test_one_batch_keeps_each_schedules_own_state(store: Store, clock: FakeClock) -> None:
    """Schedules with the same timing, policy and cursor in one batch: each gets the fate
    its own state calls for (previous job active or not, an occurrence waiting or not)."""
    busy, idle = store.create_schedule(hourly()), store.create_schedule(hourly())
    queued = store.create_schedule(hourly(overlap=Overlap.QUEUE))
    clock.set(at_hour(clock, 1))
    first = {sid: job_id for sid, job_id, _ in store.materialize(100).created}
    assert set(first) == {busy.id, idle.id, queued.id}
    run_job(store, first[idle.id])
    clock.set(at_hour(clock, 1))
    m = store.materialize(100)
    assert m.schedules == 3
    assert [sid for sid, _, _ in m.created] == [idle.id]
    assert [(r.schedule_id, r.reason) for r in m.skipped] == [(busy.id, "overlap")]
    assert store.get_schedule(queued.id).waiting == at_hour(clock, 0)
    assert store.get_schedule(idle.id).last_job_id == m.created[0][1]
    assert store.get_schedule(busy.id).last_job_id == first[busy.id]


def test_catch_up_in_a_batch_keys_every_occurrence(store: Store, clock: FakeClock) -> None:
    a = store.create_schedule(hourly(misfire=Misfire.ALL, catch_up_limit=2, overlap=Overlap.ALLOW))
    b = store.create_schedule(hourly(misfire=Misfire.ALL, catch_up_limit=2, overlap=Overlap.ALLOW))
    clock.set(at_hour(clock, 3.5))  # three occurrences missed: the oldest is skipped
    m = store.materialize(100)
    for s in (a, b):
        mine = [(job_id, nominal) for sid, job_id, nominal in m.created if sid == s.id]
        assert [n for _, n in mine] == [at_hour(clock, -1), at_hour(clock, 0)]
        assert [store.get(j).key for j, _ in mine] == [
            f"{s.id}@{n:%Y-%m-%dT%H:%M:%SZ}" for _, n in mine
        ]
        got = store.get_schedule(s.id)
        assert (got.last_job_id, got.misfire_skips) == (mine[-1][0], 1)
        assert got.next_run_at == at_hour(clock, 1)
    assert sorted((r.schedule_id, r.skips.count) for r in m.skipped) == sorted(
        [(a.id, 1), (b.id, 1)]
    )
    assert store.materialize(100).schedules == 0


def test_a_batch_larger_than_the_limit_continues(store: Store, clock: FakeClock) -> None:
    made = [store.create_schedule(hourly()) for _ in range(7)]
    clock.set(at_hour(clock, 1))
    sizes = []
    while (m := store.materialize(3)).schedules:
        sizes.append((m.schedules, len(m.created)))
    assert sizes == [(3, 3), (3, 3), (1, 1)]
    assert all(store.get_schedule(s.id).next_run_at == at_hour(clock, 1) for s in made)


def test_list_pages_oldest_first_by_keyset(store: Store, clock: FakeClock) -> None:
    made = []
    for _ in range(7):
        made.append(store.create_schedule(hourly()).id)
        clock.advance(1)
    store.delete_schedule(made[3])
    live = [sid for sid in made if sid != made[3]]
    pages, after = [], None
    while page := store.list_schedules(limit=2, after=after):
        pages.append([s.id for s in page])
        after = page[-1].id
    assert pages == [live[0:2], live[2:4], live[4:6]]
    assert [s.id for s in store.list_schedules(True, limit=3, after=made[2])] == made[3:6]
    assert store.list_schedules(limit=5, after=made[-1]) == []


def test_history_is_the_schedules_own_jobs_newest_first(store: Store, clock: FakeClock) -> None:
    s, other = store.create_schedule(hourly()), store.create_schedule(hourly())
    mine: list[int] = []
    for _ in range(3):
        clock.set(at_hour(clock, 1))
        mine += [job_id for sid, job_id, _ in store.materialize(100).created if sid == s.id]
        for c in store.claim_due("w", 100, 30):
            store.finish(c.job.id, c.generation, AttemptResult(Outcome.SUCCEEDED, 0))
    mine.append(store.trigger_schedule(s.id).id)
    # A job that only borrows the key shape is not the schedule's.
    [borrowed] = store.insert([JobSpec(("true",), clock.now(), 1000, key=f"{s.id}@x")])
    assert borrowed.job.spec.schedule_id is None
    jobs, _ = store.schedule_history(s.id, 10)
    assert [j.id for j in jobs] == mine[::-1]
    assert [j.id for j in store.schedule_history(s.id, 2)[0]] == mine[:1:-1]
    assert {j.spec.schedule_id for j in store.schedule_history(other.id, 10)[0]} == {other.id}


def test_totals_count_live_schedules_and_their_skips(store: Store, clock: FakeClock) -> None:
    a, b, c = (store.create_schedule(hourly()) for _ in range(3))
    for s in (a, b, c):
        store.pause_schedule(s.id)
    clock.set(at_hour(clock, 3.5))
    for s in (a, b):
        store.resume_schedule(s.id)  # three hours passed while paused: 3 skips each
    store.delete_schedule(b.id)
    totals = store.schedule_totals()
    assert (totals["total"], totals["paused"]) == (2, 1)  # a, and c still paused
    assert totals["pause_skips"] == 3  # b's are gone with b
    assert (totals["misfire_skips"], totals["overlap_skips"]) == (0, 0)


def test_names_are_unique_per_owner(store: Store, clock: FakeClock) -> None:
    """Two users may both have a "report"; a name means the caller's own schedule."""

    def named(owner: int) -> ScheduleSpec:
        return ScheduleSpec(Timing("UTC", cron="0 6 * * *"), Policy(), TEMPLATE, owner, "report")

    alice = store.create_schedule(named(1001))
    bob = store.create_schedule(named(1002))
    assert alice.id != bob.id
    assert store.get_schedule("report", 1001).id == alice.id
    assert store.get_schedule("report", 1002).id == bob.id
    with pytest.raises(NotFound):
        store.get_schedule("report", 1003)
    with pytest.raises(Conflict):
        store.create_schedule(named(1002))
    assert {s.id for s in store.list_schedules(owner=1002)} == {bob.id}
    assert {s.id for s in store.list_schedules()} == {alice.id, bob.id}


def test_hashed_fields_follow_the_schedule_id_through_create_materialize_and_edit(
    store: Store, clock: FakeClock
) -> None:
    """H is hashed from the id the store gives the schedule: the cursor, the job keys and
    the cursor after an edit all come from that id (every backend must pass it on)."""
    from zoneinfo import ZoneInfo

    from jobctl.domain.cron import next_fire, parse_cron

    def expected(cron: str, sid: str, after: datetime) -> datetime:
        return next_fire(parse_cron(cron, sid), ZoneInfo("UTC"), after)

    specs = [ScheduleSpec(Timing("UTC", cron="H * * * *"), Policy(), TEMPLATE, 1000) for _ in "ab"]
    made = [store.create_schedule(spec) for spec in specs]
    now = clock.now()
    for s in made:
        assert s.spec.timing.seed == s.id
        assert s.next_run_at == expected("H * * * *", s.id, now)
        assert store.get_schedule(s.id).next_run_at == s.next_run_at
    clock.set(at_hour(clock, 2))
    created = {sid: nominal for sid, _, nominal in store.materialize(100).created}
    for s in made:
        assert created[s.id] == expected("H * * * *", s.id, clock.now() - timedelta(hours=1))
    first = made[0]
    edited = ScheduleSpec(Timing("UTC", cron="H H * * *"), Policy(), TEMPLATE, 1000)
    new, _ = store.edit_schedule(first.id, edited, store.get_schedule(first.id).spec, 1000)
    assert new.next_run_at == expected("H H * * *", first.id, clock.now())
