"""Give up leases that can no longer be renewed, before another daemon may reclaim them.

Daemons sharing PostgreSQL (:mod:`jobctl.cluster`): a daemon cut off from the database
cannot renew its leases, and once a lease has run out another daemon reclaims the job and
runs it again. So the command must be stopped first. The watch knows, for each live
attempt, until when its lease is surely held: the claim's ``lease_until``, then the local
time a heartbeat that renewed it was *sent* plus the lease TTL (the server wrote a later
end, never an earlier one). A third of the TTL before that (:data:`GIVE_UP_AT`: two
heartbeats were due meanwhile, every ``lease_ttl / 3``, and none got through), it hands the
jobs to ``give_up``: the executor stops their commands, logged in one line, with a grace
cut to :func:`stop_grace` so that the SIGKILL lands before the lease ends. It runs on its
own timer, not behind the heartbeat: a heartbeat stuck on a dead connection or on a pool
that cannot reconnect does not delay it.

When the database comes back, heartbeats renew the leases left and the daemon carries on;
the stopped attempts' results are written then (``interrupted``: the job runs again).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

from jobctl.domain.clock import Clock

#: The part of the lease TTL left when a lease not renewed is given up.
GIVE_UP_AT = 1 / 3
#: The part of the lease TTL left, at least, when the SIGKILL of a given-up command lands.
KILLED_BY = 1 / 10


def stop_grace(lease_ttl: float, kill_grace: float) -> float:
    """Seconds between SIGTERM and SIGKILL for a given-up command: ``kill_grace``, cut so
    that the SIGKILL still comes a tenth of the TTL before the lease ends."""
    return max(0.0, min(kill_grace, lease_ttl * (GIVE_UP_AT - KILLED_BY)))


class LeaseWatch:
    def __init__(
        self,
        clock: Clock,
        lease_ttl: float,
        give_up: Callable[[list[int]], None],
    ) -> None:
        self._clock = clock
        self._ttl = timedelta(seconds=lease_ttl)
        self.margin = timedelta(seconds=lease_ttl * GIVE_UP_AT)
        self._give_up = give_up
        self._held: dict[int, datetime] = {}  # job id -> when its lease surely ends
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def claimed(self, job_id: int, lease_until: datetime) -> None:
        self._held[job_id] = lease_until
        self._changed.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    def renewed(self, job_ids: Iterable[int], sent_at: datetime) -> None:
        """A heartbeat sent at ``sent_at`` renewed these leases (given-up ones stay so)."""
        for job_id in job_ids:
            if job_id in self._held:
                self._held[job_id] = max(self._held[job_id], sent_at + self._ttl)
        self._changed.set()

    def done(self, job_id: int) -> None:
        self._held.pop(job_id, None)

    def due(self, now: datetime) -> list[int]:
        """The jobs whose give-up time has come (dropped from the watch)."""
        late = sorted(j for j, until in self._held.items() if until - self.margin <= now)
        for job_id in late:
            del self._held[job_id]
        return late

    async def _run(self) -> None:
        while self._held:
            self._changed.clear()
            late = self.due(self._clock.now())
            if late:
                self._give_up(late)
                continue
            first = min(self._held.values()) - self.margin
            await self._clock.sleep_until(first, self._changed)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


__all__ = ["GIVE_UP_AT", "LeaseWatch", "stop_grace"]
