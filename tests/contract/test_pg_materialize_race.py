"""PostgreSQL only: several materializers, each a store with its own connections (as the
daemons on several hosts hold them), race over the same due schedules. Every occurrence
becomes exactly one job, and the materializer that reports it is the one that made it.

The guarantee is layered: the due cursors are locked ``FOR UPDATE SKIP LOCKED`` (racing
materializers take disjoint batches), the cursor moves by compare-and-set in the
transaction that inserts the job, and the occurrence key is unique per owner.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import JobTemplate
from jobctl.domain.schedule import Misfire, Overlap, Policy, ScheduleSpec, Timing
from jobctl.errors import Conflict
from tests.contract.conftest import PG_DSN, pg_schema

pytestmark = pytest.mark.postgres
T0 = datetime(2030, 1, 1, tzinfo=UTC)
MATERIALIZERS = 4
SCHEDULES = 120
BATCH = 16


@pytest.fixture
def stores() -> Iterator[list[Any]]:
    from jobctl.store.pg.store import PostgresStore

    for schema in pg_schema():
        clock = FakeClock(T0)
        opened = [
            PostgresStore(PG_DSN, clock, random.Random(i), schema=schema, pool_size=3)
            for i in range(MATERIALIZERS)
        ]
        try:
            yield opened
        finally:
            for s in opened:
                s.close()


def _spec(owner: int) -> ScheduleSpec:
    """Every minute, every missed occurrence made (so a batch makes several per schedule)."""
    policy = Policy(misfire=Misfire.ALL, catch_up_limit=1000, overlap=Overlap.ALLOW)
    timing = Timing("UTC", every=60, anchor=T0)
    return ScheduleSpec(timing, policy, JobTemplate(("true",), max_attempts=1), owner)


def _race(stores: list[Any]) -> tuple[list[tuple[str, int, datetime]], int]:
    """Every store materializes until none finds work, all released at once; what each
    reported created, and how many batches lost a compare-and-set (Conflict)."""
    start = threading.Barrier(len(stores))
    created: list[list[tuple[str, int, datetime]]] = [[] for _ in stores]
    conflicts = [0] * len(stores)

    def run(i: int) -> None:
        start.wait()
        while True:
            try:
                done = stores[i].materialize(BATCH)
            except Conflict:
                conflicts[i] += 1
                continue
            created[i] += done.created
            if done.schedules == 0:
                return

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    return [c for per in created for c in per], sum(conflicts)


def test_racing_materializers_make_each_occurrence_exactly_once(stores: list[Any]) -> None:
    clock = stores[0].clock
    made = stores[0].create_schedules([_spec(1000 + i % 3) for i in range(SCHEDULES)])
    ids = {s.id for s in made}
    reported: list[tuple[str, int, datetime]] = []
    for minutes in (7, 8, 8, 15, 16):  # a catch-up, a tick, nothing new, more catch-up
        clock.set(T0 + timedelta(minutes=minutes, seconds=30))
        created, _ = _race(stores)
        reported += created
    # What the materializers reported is what exists, each occurrence once.
    assert len({job_id for _, job_id, _ in reported}) == len(reported)
    jobs = stores[0].list_jobs(None, None, 100_000, None)
    assert sorted(j.id for j in jobs) == sorted(job_id for _, job_id, _ in reported)
    per_schedule = Counter(j.spec.schedule_id for j in jobs)
    assert set(per_schedule) == ids
    assert set(per_schedule.values()) == {16}  # minutes 1..16 after the anchor
    keys = Counter(j.key for j in jobs)
    assert max(keys.values()) == 1
    for s in made:
        expected = {
            f"{s.id}@{(T0 + timedelta(minutes=m)):%Y-%m-%dT%H:%M:%SZ}" for m in range(1, 17)
        }
        assert {j.key for j in jobs if j.spec.schedule_id == s.id} == expected
    # Every cursor is past the last occurrence, and nothing is due any more.
    assert all(s.next_run_at == T0 + timedelta(minutes=17) for s in stores[1].list_schedules())
    assert stores[2].materialize(BATCH).created == ()


def test_materializers_take_disjoint_batches(stores: list[Any]) -> None:
    """The row locks split the work: with every store in one round, the schedules handled
    add up to the schedules due (a schedule handled twice would count twice)."""
    stores[0].create_schedules([_spec(1000) for _ in range(SCHEDULES)])
    stores[0].clock.set(T0 + timedelta(minutes=3, seconds=30))
    created, conflicts = _race(stores)
    assert len(created) == SCHEDULES * 3
    assert conflicts == 0  # SKIP LOCKED: nobody plans a cursor another holds
    owners = Counter(sid for sid, _, _ in created)
    assert set(owners.values()) == {3}
