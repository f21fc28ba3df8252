"""Many schedules in one call (issue 18): one transaction, each item answering alone."""

from __future__ import annotations

import dataclasses

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import JobTemplate
from jobctl.domain.schedule import Policy, Schedule, ScheduleSpec, Timing
from jobctl.errors import Conflict, InvalidInput, InvalidSchedule
from jobctl.store.base import Store

pytestmark = pytest.mark.store_parts("schedules")

TEMPLATE = JobTemplate(command=("true",), max_attempts=1)


def spec(name: str | None = None, cron: str = "0 * * * *", owner: int = 1000) -> ScheduleSpec:
    return ScheduleSpec(Timing("UTC", cron=cron), Policy(), TEMPLATE, owner, name)


def test_a_batch_answers_each_item_as_reading_it_back_would(store: Store, clock: FakeClock) -> None:
    every = ScheduleSpec(Timing("Asia/Tokyo", every=90, anchor=clock.now()), Policy(), TEMPLATE, 7)
    got = store.create_schedules([spec("a"), spec(None, "*/5 * * * *"), every])
    assert all(isinstance(s, Schedule) for s in got)
    for s in got:
        assert isinstance(s, Schedule)
        assert store.get_schedule(s.id) == s
    # one creation time for the batch: listed by id within it
    assert {s.id for s in store.list_schedules()} == {s.id for s in got}  # type: ignore[union-attr]
    assert store.schedule_totals()["total"] == 3


def test_a_refused_item_fails_alone(store: Store, clock: FakeClock) -> None:
    store.create_schedule(spec("taken"))
    bad = dataclasses.replace(spec("bad"), template=dataclasses.replace(TEMPLATE, max_attempts=0))
    never = ScheduleSpec(Timing("UTC", cron="0 0 30 2 *"), Policy(), TEMPLATE, 1000, "never")
    got = store.create_schedules([spec("one"), spec("taken"), bad, never, spec("one"), spec("two")])
    assert isinstance(got[0], Schedule) and got[0].spec.name == "one"
    assert isinstance(got[1], Conflict) and "taken" in got[1].message
    assert isinstance(got[2], InvalidInput)
    assert isinstance(got[3], InvalidSchedule)
    assert isinstance(got[4], Conflict)  # the same name twice in one batch: the first wins
    assert isinstance(got[5], Schedule)
    names = sorted(s.spec.name or "" for s in store.list_schedules())
    assert names == ["one", "taken", "two"]
    assert store.owner_usage(1000)["schedules"] == 3


def test_names_are_per_owner_in_a_batch_too(store: Store) -> None:
    got = store.create_schedules([spec("x", owner=1), spec("x", owner=2)])
    assert all(isinstance(s, Schedule) for s in got)
