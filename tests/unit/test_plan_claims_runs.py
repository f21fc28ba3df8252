"""plan_claims hands a lone lane its share in one step: same plan and state as slot by slot."""

from __future__ import annotations

import random
from collections.abc import Mapping

from jobctl.domain.dispatch import Fairness, plan_claims


def _slot_by_slot(
    free: int,
    lanes: Mapping[tuple[str, int], int],
    allowances: Mapping[str, int],
    weights: Mapping[str, int],
    state: Fairness,
) -> dict[tuple[str, int], int]:
    """The reference: one slot per pass, least-served queue, then least-served owner."""
    left = dict(lanes)
    room = {q: allowances.get(q, 0) for q in {q for q, _ in lanes}}
    floor = min(state.queues.values(), default=0.0)
    for q in room:
        state.queues.setdefault(q, floor)
    plan: dict[tuple[str, int], int] = {}
    for _ in range(free):
        ready = [
            q for q, r in room.items() if r > 0 and any(left[ln] > 0 for ln in left if ln[0] == q)
        ]
        if not ready:
            break
        q = min(ready, key=lambda name: (state.queues[name], name))
        owners = [o for (lq, o), n in left.items() if lq == q and n > 0]
        low = min(state.owners.get((q, o), 0) for o in owners)
        for o in owners:
            state.owners.setdefault((q, o), low)
        lane = (q, min(owners, key=lambda o: (state.owners[(q, o)], o)))
        plan[lane] = plan.get(lane, 0) + 1
        left[lane] -= 1
        room[q] -= 1
        state.queues[q] += 1.0 / max(1, weights.get(q, 1))
        state.owners[lane] += 1
    return plan


def test_matches_slot_by_slot_on_random_lanes() -> None:
    rng = random.Random(11)
    for _ in range(500):
        queues = [f"q{i}" for i in range(rng.randint(1, 4))]
        lanes = {
            (q, o): rng.randint(1, 40)
            for q in queues
            for o in rng.sample(range(5), rng.randint(1, 3))
        }
        allow = {q: rng.choice([0, 1, 7, 1000]) for q in queues}
        weights = {q: rng.randint(1, 3) for q in queues}
        fast, ref = Fairness(), Fairness()
        for free in (1, 5, 64, 1000):
            assert plan_claims(free, lanes, allow, weights, fast) == _slot_by_slot(
                free, lanes, allow, weights, ref
            )
            assert (fast.queues, fast.owners) == (ref.queues, ref.owners)


def test_one_lane_takes_its_share_at_once() -> None:
    state = Fairness()
    assert plan_claims(1000, {("herd", 1): 200_000}, {"herd": 1_000_000}, {}, state) == {
        ("herd", 1): 1000
    }
    assert state.owners[("herd", 1)] == 1000


def test_a_queue_new_to_the_state_starts_level_with_the_least_served_not_at_zero() -> None:
    """A newcomer must not take every slot to "catch up" on history it never had: it starts
    level with the least-served queue and the two then take turns."""
    state = Fairness(queues={"old": 100.0, "older": 250.0})
    lanes = {("old", 1): 10, ("new", 2): 10}
    plan = plan_claims(4, lanes, {"old": 10, "new": 10}, {}, state)
    assert plan == {("old", 1): 2, ("new", 2): 2}
    assert state.queues["new"] == state.queues["old"] == 102.0
