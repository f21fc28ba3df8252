"""Issue 11 item 3: one schedule that cannot be materialized stops no other schedule.

A poisoned schedule (stored before today's limits, or broken since: its template is one
the store refuses) is marked broken with a reason and skipped; every healthy schedule
beside it fires on time. In process, on a real SQLite file, with a fake clock.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path

import pytest

from jobctl.domain import models
from jobctl.domain.clock import FakeClock
from jobctl.domain.limits import MAX_PAYLOAD_BYTES
from jobctl.domain.models import JobTemplate
from jobctl.domain.schedule import Overlap, Policy, ScheduleSpec, Timing
from jobctl.engine.materializer import Materializer
from jobctl.metrics import Metrics
from jobctl.store.aio import AsyncStore
from jobctl.store.sqlite import SqliteStore

HEALTHY = 1000


@pytest.fixture
async def astore(tmp_path: Path, clock: FakeClock) -> AsyncIterator[AsyncStore]:
    store = SqliteStore(tmp_path / "broken.db", clock, random.Random(3))
    a = AsyncStore(store, threads=2)
    yield a
    a.close()
    store.close()


def _spec(clock: FakeClock, command: str = "true") -> ScheduleSpec:
    timing = Timing("UTC", every=60, anchor=clock.now() + timedelta(seconds=60))
    policy = Policy(overlap=Overlap.ALLOW)  # no executor here: earlier jobs stay scheduled
    return ScheduleSpec(timing, policy, JobTemplate((command,)), os.geteuid())


def _poison(store: SqliteStore, sid: str, change: Callable[[dict[str, object]], None]) -> None:
    """Rewrite a stored template past every check, as an older version could store it."""

    def tx(conn: object) -> None:
        row = conn.execute("SELECT template FROM schedule_defs WHERE id = ?", (sid,)).fetchone()  # type: ignore[attr-defined]
        template = json.loads(row[0])
        change(template)
        conn.execute(  # type: ignore[attr-defined]
            "UPDATE schedule_defs SET template = ? WHERE id = ?", (json.dumps(template), sid)
        )

    store.db.writer.call(tx)


def _create_many(store: SqliteStore, clock: FakeClock, n: int) -> list[str]:
    return [store.create_schedule(_spec(clock, f"true {i}")).id for i in range(n)]


def _timeout(value: float) -> Callable[[dict[str, object]], None]:
    return lambda t: t.update(timeout=value)


def _huge_command(t: dict[str, object]) -> None:
    t["command"] = ["echo", "x" * MAX_PAYLOAD_BYTES]


@pytest.mark.parametrize(
    ("change", "reason", "healthy"),
    [
        (_timeout(1e-9), "timeout must be", HEALTHY),  # issue 11's: under the ms resolution
        (_huge_command, "over the 65536-byte limit", 100),
        (lambda t: t.update(env={"A": "x\0y"}), "NUL", 100),
        (lambda t: t.update(max_attempts=0), "max_attempts must be", 100),
    ],
)
async def test_a_poisoned_schedule_breaks_alone_and_1000_healthy_fire_on_time(
    astore: AsyncStore,
    clock: FakeClock,
    change: Callable[[dict[str, object]], None],
    reason: str,
    healthy: int,
) -> None:
    store = astore.store
    assert isinstance(store, SqliteStore)
    ids = _create_many(store, clock, healthy // 2)
    bad = store.create_schedule(_spec(clock, "poisoned")).id
    ids += _create_many(store, clock, healthy - len(ids))
    _poison(store, bad, change)
    metrics = Metrics()
    mat = Materializer(astore, clock, metrics=metrics)
    first = store.get_schedule(ids[0]).next_run_at
    for tick in range(2):
        clock.set(first + timedelta(seconds=60 * tick))
        await mat.run_once()  # never raises: the poisoned one is marked, the rest goes on
        jobs = [j for j in store.list_jobs(None, None, 10_000, None) if j.spec.scheduled_for]
        on_time = [j for j in jobs if j.spec.scheduled_for == clock.now()]
        assert len(on_time) == healthy, f"tick {tick}: {len(on_time)} of {healthy} fired"
        assert {j.spec.schedule_id for j in on_time} == set(ids)
        assert all(j.run_at == clock.now() for j in on_time)
    broken = store.get_schedule(bad)
    assert broken.broken_at == first and reason in (broken.broken_reason or "")
    assert broken.next_run_at == first  # its cursor stays on the occurrence that failed
    totals = store.schedule_totals()
    assert totals["broken"] == 1 and totals["total"] == healthy + 1
    scraped = (await metrics.scrape(astore)).decode()
    assert 'jobctl_schedules{state="broken"} 1.0' in scraped
    assert f'jobctl_schedules{{state="active"}} {float(healthy)}' in scraped


async def test_a_row_the_store_refuses_breaks_only_its_schedule(
    astore: AsyncStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the domain's checks too: the store's CHECK refuses the row (IntegrityError)
    inside the batched insert, which is redone schedule by schedule."""
    store = astore.store
    assert isinstance(store, SqliteStore)
    ids = _create_many(store, clock, 20)
    bad = store.create_schedule(_spec(clock, "poisoned")).id
    _poison(store, bad, _timeout(1e-9))
    monkeypatch.setattr(models, "check_job_fields", lambda job: None)  # validation missed it
    clock.set(store.get_schedule(bad).next_run_at)
    done = store.materialize(1000)
    assert done.schedules == 21 and len(done.created) == 20
    assert [sid for sid, _ in done.broken] == [bad]
    assert "CHECK constraint failed" in done.broken[0][1]
    assert {sid for sid, _, _ in done.created} == set(ids)
    assert store.get_schedule(bad).broken_reason == done.broken[0][1]


async def test_broken_schedules_do_not_wake_the_materializer_and_resume_retries(
    astore: AsyncStore, clock: FakeClock
) -> None:
    store = astore.store
    assert isinstance(store, SqliteStore)
    bad = store.create_schedule(_spec(clock, "poisoned")).id
    _poison(store, bad, _timeout(1e-9))
    mat = Materializer(astore, clock)
    clock.set(store.get_schedule(bad).next_run_at)
    assert await mat.run_once() is None  # nothing left to wake up for: no error loop
    assert store.schedule_wakeup() is None
    assert store.materialize(10).schedules == 0  # not read again
    _poison(store, bad, _timeout(5))  # the cause fixed (as an edit would) ...
    resumed, passed = store.resume_schedule(bad)
    assert resumed.broken_at is None and resumed.broken_reason is None and passed.count == 0
    nxt = await mat.run_once()
    [job] = [j for j in store.list_jobs(None, None, 10, None) if j.spec.schedule_id == bad]
    assert job.spec.scheduled_for == resumed.next_run_at  # ... the failed one is retried
    assert job.spec.timeout == 5 and nxt == resumed.next_run_at + timedelta(seconds=60)


async def test_a_schedule_that_breaks_again_after_resume_is_marked_again(
    astore: AsyncStore, clock: FakeClock
) -> None:
    store = astore.store
    assert isinstance(store, SqliteStore)
    bad = store.create_schedule(_spec(clock, "poisoned")).id
    _poison(store, bad, _huge_command)
    clock.set(store.get_schedule(bad).next_run_at)
    assert store.materialize(10).broken
    store.resume_schedule(bad)
    assert store.get_schedule(bad).broken_at is None
    again = store.materialize(10)
    assert [sid for sid, _ in again.broken] == [bad]


async def test_a_schedule_whose_zone_left_tzdata_is_listed_and_breaks_alone(
    astore: AsyncStore, clock: FakeClock
) -> None:
    """Not user input, but the same isolation: an OS update that removes a zone must not
    make `schedules list` fail for everyone, nor stop the other schedules."""
    from jobctl.api.schedule_schemas import schedule_out
    from jobctl.cli.schedule_views import in_zone

    store = astore.store
    assert isinstance(store, SqliteStore)
    good = store.create_schedule(_spec(clock)).id
    gone = store.create_schedule(_spec(clock, "zoned")).id

    def move(conn: object) -> None:
        conn.execute("UPDATE schedule_defs SET tz = 'Mars/Olympus' WHERE id = ?", (gone,))  # type: ignore[attr-defined]

    store.db.writer.call(move)
    listed = {s.id: s for s in store.list_schedules()}
    assert listed[gone].spec.timing.tz == "Mars/Olympus"  # listed, not an error for all
    out = schedule_out(listed[gone])
    assert " UTC (" in in_zone(out["next_run_at"], out["tz"])  # the CLI shows it
    clock.set(listed[good].next_run_at)
    done = store.materialize(10)
    assert [sid for sid, _, _ in done.created] == [good]
    assert [sid for sid, _ in done.broken] == [gone]
    assert "Mars/Olympus" in done.broken[0][1]
