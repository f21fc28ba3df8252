"""Fair dispatch: how many due jobs each lane may start now. Pure.

A *lane* is one (queue, owner) pair with due jobs. Each claim fills the executor's free
slots from the lanes by weighted fair queuing:

* between queues, in proportion to their weights, each within its own limits (paused,
  concurrency, token-bucket rate);
* inside a queue, round-robin between owners, so one user's 100,000 jobs cannot delay
  another user's job by more than one turn per competing owner;
* inside a lane, by the job's sort key (see :func:`sort_key`): priority with aging.

The planner keeps a little state between claims (how much each queue and owner has been
served) so fairness holds across claims of one slot at a time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from jobctl.domain.resources import Resources

#: Seconds of head start per priority level: a job with priority p sorts as if it had been
#: due p * AGING_STEP earlier. Ordering by that fixed key *is* linear aging (a job's
#: effective priority grows by one level per AGING_STEP overdue) and stays indexable.
AGING_STEP = 300.0


def sort_key_ms(run_at_ms: int, priority: int) -> int:
    """The dispatch order of a due job: smaller starts first."""
    return run_at_ms - int(priority * AGING_STEP * 1000)


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """A queue's limits; ``None`` means unlimited.

    ``resources`` and ``on_failure`` are the queue's defaults for its jobs (not dispatch
    limits): what a job that gives none of its own gets (domain/queue_defaults.py)."""

    name: str
    concurrency: int | None = None
    rate: float | None = None  # jobs per second (token bucket)
    burst: int = 1
    weight: int = 1
    paused: bool = False
    resources: Resources | None = None  # nice, memory_max, cpu_quota of its jobs
    on_failure: str | None = None  # its jobs' failure notifier


@dataclass(frozen=True, slots=True)
class Bucket:
    """A token bucket's state: ``tokens`` at ``at``."""

    tokens: float
    at: datetime

    def refill(self, rate: float, burst: int, now: datetime) -> float:
        elapsed = max(0.0, (now - self.at).total_seconds())
        return min(float(burst), self.tokens + elapsed * rate)


@dataclass
class Fairness:
    """Service received so far, by queue and by (queue, owner): the memory of fair queuing."""

    queues: dict[str, float] = field(default_factory=dict)
    owners: dict[tuple[str, int], int] = field(default_factory=dict)


def allowance(policy: QueuePolicy, running: int, tokens: float | None) -> int:
    """How many more jobs of this queue may start now."""
    if policy.paused:
        return 0
    left = math.inf
    if policy.concurrency is not None:
        left = min(left, policy.concurrency - running)
    if policy.rate is not None and tokens is not None:
        left = min(left, math.floor(tokens + 1e-9))
    return int(max(0, min(left, 1_000_000)))


def plan_claims(
    free: int,
    lanes: Mapping[tuple[str, int], int],
    allowances: Mapping[str, int],
    weights: Mapping[str, int],
    state: Fairness,
    owner_room: Mapping[int, int] | None = None,
) -> dict[tuple[str, int], int]:
    """Split ``free`` slots over lanes ``{(queue, owner): due}``; update ``state``.

    Slot by slot, the least-served queue gives its turn to its least-served owner. When
    one lane is all that is left to serve, the rest of its share is handed out in one step
    (the same plan and state as slot by slot, without a thousand passes over the lanes).
    ``owner_room``: owners with a ``running`` quota and how many more of their jobs may
    start, across queues (owners not in it: no limit); an owner out of room waits.
    """
    owners_left = dict(owner_room or {})
    left = {lane: (0 if owners_left.get(lane[1], 1) <= 0 else n) for lane, n in lanes.items()}
    room = {q: allowances.get(q, 0) for q in {q for q, _ in lanes}}
    queue_left = _per_queue(left)
    _admit(room, state)
    plan: dict[tuple[str, int], int] = {}
    budget = free
    while budget > 0:
        ready = [q for q, r in room.items() if r > 0 and queue_left[q] > 0]
        if not ready:
            break
        q = min(ready, key=lambda name: (state.queues[name], name))
        owner = _next_owner(q, left, state)
        lane = (q, owner)
        k = (
            min(budget, room[q], left[lane])
            if len(ready) == 1 and left[lane] == queue_left[q]
            else 1
        )
        if owner in owners_left:
            k = min(k, owners_left[owner])
            owners_left[owner] -= k
        plan[lane] = plan.get(lane, 0) + k
        left[lane] -= k
        queue_left[q] -= k
        if owners_left.get(owner, 1) <= 0:
            _close_owner(owner, left, queue_left)
        room[q] -= k
        budget -= k
        share = 1.0 / max(1, weights.get(q, 1))
        for _ in range(k):  # one addition per slot: the same float as slot by slot
            state.queues[q] += share
        state.owners[lane] = state.owners.get(lane, 0) + k
    return plan


def _per_queue(left: Mapping[tuple[str, int], int]) -> dict[str, int]:
    """Jobs left to plan per queue, over its lanes."""
    out: dict[str, int] = {}
    for (q, _), n in left.items():
        out[q] = out.get(q, 0) + n
    return out


def _admit(queues: Iterable[str], state: Fairness) -> None:
    """A queue new to the state starts level with the least-served one, not at zero, so a
    newcomer cannot monopolise the executor to "catch up" on history it never had."""
    floor = min(state.queues.values(), default=0.0)
    for q in queues:
        state.queues.setdefault(q, floor)


def _close_owner(owner: int, left: dict[tuple[str, int], int], queue_left: dict[str, int]) -> None:
    """The owner reached its running quota: none of its lanes gets another slot."""
    for (q, o), n in left.items():
        if o == owner and n:
            queue_left[q] -= n
            left[(q, o)] = 0


def _next_owner(queue: str, left: Mapping[tuple[str, int], int], state: Fairness) -> int:
    owners = [o for (q, o), n in left.items() if q == queue and n > 0]
    floor = min((state.owners.get((queue, o), 0) for o in owners), default=0)
    for o in owners:
        state.owners.setdefault((queue, o), floor)
    return min(owners, key=lambda o: (state.owners[(queue, o)], o))
