"""Jobs claimed ahead of free slots: the executor's local ready queue (issue 17).

Under a backlog of quick commands a slot goes round claim → start → exit → claim, and
while the timer's claim commits (2-4 ms of a ~20 ms cycle) the spawn helper has nothing to
start. With ``claim_ahead`` > 0 the timer claims up to that many jobs beyond the free
slots; the executor holds them here and starts one the moment an attempt gives its slot
back, so the claim that refills this queue commits while the helper works. It is still
one claim per cycle, for the room the starts freed, as a backlog tick claims per freed
slot without it.

A job held here is claimed: it holds its lease (renewed by the heartbeat with the running
ones) and counts as running for queue limits, rates and quotas, which are enforced at the
claim (conservative: a queue at its limit may have a claimed job wait here a moment; never
more than the limit run). ``concurrency`` still bounds the commands running at once.

The room is kept to what is expected to start soon: ``claim_ahead`` and ``concurrency``
at most, and no more than the slots expected to free within :data:`AHEAD_WAIT`, from how
long attempts held their slots lately (a running mean). Commands that run for minutes
leave no room at all, so nothing waits here behind them; a burst of ``true`` fills it. A
job found cancelled, its lease lost, leaves the queue without starting; at shutdown, and
for a lease the lease watch gives up, the job is given back without using an attempt
(docs/architecture.md, *Claims ahead of free slots*).
"""

from __future__ import annotations

from collections.abc import Iterator

from jobctl.domain.models import Claim

#: Seconds a job claimed ahead is expected to wait at most (the room's bound, above).
AHEAD_WAIT = 0.1
#: Weight of the newest slot hold in the running mean (about the last 16 attempts).
_WEIGHT = 1 / 16


class ReadyQueue:
    """Claims held until a slot frees, first claimed first started."""

    def __init__(self, ahead: int, concurrency: int) -> None:
        self.ahead = ahead
        self._concurrency = concurrency
        self._claims: dict[int, Claim] = {}  # job id -> claim, in claim order
        #: The running mean of a slot's hold (start to slot given back), seconds; None
        #: until an attempt has given its slot back: no room before that.
        self.hold: float | None = None

    def __len__(self) -> int:
        return len(self._claims)

    def __iter__(self) -> Iterator[Claim]:
        return iter(list(self._claims.values()))

    def room(self) -> int:
        """How many more jobs may be claimed ahead now: never more than ``concurrency``
        wait (a daemon of one slot holds at most one job claimed ahead, not eight)."""
        if self.ahead <= 0 or self.hold is None:
            return 0
        soon = self.ahead if self.hold <= 0 else int(self._concurrency * AHEAD_WAIT / self.hold)
        return max(0, min(self.ahead, self._concurrency, soon) - len(self._claims))

    def held(self, seconds: float) -> None:
        """An attempt gave back its slot after holding it ``seconds``."""
        if self.ahead > 0:
            seconds = max(0.0, seconds)
            h = self.hold
            self.hold = seconds if h is None else h + (seconds - h) * _WEIGHT

    def add(self, claim: Claim) -> None:
        self._claims[claim.job.id] = claim

    def pop(self) -> Claim | None:
        """The claim held longest, out of the queue (None: empty)."""
        for job_id in self._claims:
            return self._claims.pop(job_id)
        return None

    def remove(self, job_id: int, generation: int | None = None) -> Claim | None:
        """The job's claim out of the queue (of ``generation`` only, when given)."""
        claim = self._claims.get(job_id)
        if claim is None or generation not in (None, claim.generation):
            return None
        return self._claims.pop(job_id)

    def drain(self, queue: str | None = None) -> list[Claim]:
        """Every claim (of ``queue``'s jobs only, when given), out of the queue."""
        claims = [c for c in self._claims.values() if queue is None or c.job.spec.queue == queue]
        for claim in claims:
            del self._claims[claim.job.id]
        return claims

    def leases(self) -> list[tuple[int, int]]:
        return [(c.job.id, c.generation) for c in self._claims.values()]
