"""Schedule totals are counters kept with every change (issue 18): after any sequence of
operations they equal a recount of the schedules themselves.

``status`` reads ``schedule_totals`` and the quota check reads ``owner_usage`` on every
request, so neither may scan the schedules; both read counters the store keeps in the
transaction of each change. Random operations (create, pause, resume, delete, edit,
trigger, materialize with misfire and overlap skips, broken templates, runs of the jobs)
are followed by a comparison with what a walk of every schedule page says.
"""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import AttemptResult, JobTemplate
from jobctl.domain.schedule import Misfire, Overlap, Policy, Schedule, ScheduleSpec, Timing
from jobctl.domain.states import Outcome
from jobctl.errors import JobctlError
from jobctl.store.base import Store
from tests.contract.raw import raw_write

pytestmark = pytest.mark.store_parts("schedules")

OWNERS = (1000, 1001, 1002)
SKIPS = ("misfire_skips", "overlap_skips", "pause_skips")


def recount(store: Store) -> tuple[dict[str, int], dict[int, int]]:
    """The totals and per-owner live counts, recounted from the schedules themselves."""
    every: list[Schedule] = []
    after = None
    while page := store.list_schedules(True, 7, after):  # small pages: the keyset walked
        every += page
        after = page[-1].id
    live = [s for s in every if s.deleted_at is None]
    totals = {
        "total": len(live),
        "paused": sum(s.paused for s in live),
        "broken": sum(not s.paused and s.broken_at is not None for s in live),
    }
    for name in SKIPS:
        totals[name] = sum(getattr(s, name) for s in live)
    per_owner = {uid: sum(s.spec.owner_uid == uid for s in live) for uid in OWNERS}
    return totals, per_owner


def _spec(rng: random.Random, clock: FakeClock) -> ScheduleSpec:
    if rng.random() < 0.5:
        timing = Timing("UTC", every=rng.choice((60, 300, 3600)), anchor=clock.now())
    else:
        timing = Timing(
            rng.choice(("UTC", "Europe/Berlin")), cron=rng.choice(("*/5 * * * *", "0 * * * *"))
        )
    policy = Policy(
        rng.choice(list(Misfire)),
        rng.randint(1, 5),
        rng.choice(list(Overlap)),
    )
    return ScheduleSpec(timing, policy, JobTemplate(("true",), max_attempts=1), rng.choice(OWNERS))


def _poison(store: Store, sid: str) -> None:
    """A template the store refuses to run (as an older version could store it): the next
    materialization marks the schedule broken."""
    [(text,)] = raw_write(store, "SELECT template FROM schedule_defs WHERE id = ?", (sid,))
    template = json.loads(text) | {"max_attempts": 0}
    raw_write(
        store, "UPDATE schedule_defs SET template = ? WHERE id = ?", (json.dumps(template), sid)
    )


def _run_some(store: Store, rng: random.Random) -> None:
    for claim in store.claim_due("w", rng.randint(0, 20), 30):
        outcome = rng.choice((Outcome.SUCCEEDED, Outcome.FAILED))
        store.finish(claim.job.id, claim.generation, AttemptResult(outcome, 0))


def _step(store: Store, clock: FakeClock, rng: random.Random, ids: list[str]) -> None:
    op = rng.choice(("create", "create", "pause", "resume", "delete", "edit", "trigger",
                     "time", "time", "run", "poison"))  # fmt: skip
    if op == "create" or not ids:
        ids.append(store.create_schedule(_spec(rng, clock)).id)
        return
    sid = rng.choice(ids)
    try:
        if op == "pause":
            store.pause_schedule(sid)
        elif op == "resume":
            store.resume_schedule(sid)
        elif op == "delete":
            store.delete_schedule(sid)
        elif op == "edit":
            old = store.get_schedule(sid)
            new = dataclasses.replace(old.spec, timing=_spec(rng, clock).timing)
            store.edit_schedule(sid, new, old.spec, old.spec.owner_uid)
        elif op == "trigger":
            store.trigger_schedule(sid)
        elif op == "poison":
            _poison(store, sid)
        elif op == "run":
            _run_some(store, rng)
    except JobctlError:  # a deleted schedule refuses most of these: that is no change
        pass
    if op == "time":
        clock.advance(rng.choice((30, 600, 3600, 4 * 3600)))
        while store.materialize(50).schedules:
            pass


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_counters_equal_a_recount_after_random_operations(
    store: Store, clock: FakeClock, seed: int
) -> None:
    rng = random.Random(seed)
    ids: list[str] = []
    for step in range(150):
        _step(store, clock, rng, ids)
        if step % 10 == 9:
            _check(store)
    _check(store)
    totals = store.schedule_totals()
    assert totals["total"] > 0 and totals["paused"] + totals["misfire_skips"] > 0  # exercised


def _check(store: Store) -> None:
    expected, per_owner = recount(store)
    totals = store.schedule_totals()
    assert {k: totals[k] for k in expected} == expected
    for uid, live in per_owner.items():
        assert store.owner_usage(uid)["schedules"] == live
