"""The daemon's heartbeat row (daemons sharing PostgreSQL): written every ``lease_ttl / 3``
with what it runs, so ``jobctl status`` on any daemon lists the cluster and start-up
recovery on a host leaves a live daemon's jobs alone (:mod:`jobctl.domain.cluster`); and
the fold of the striped counters every few seconds (:class:`CountFolds`)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from jobctl.domain.clock import Clock
from jobctl.domain.cluster import DaemonBeat
from jobctl.engine.service import Service
from jobctl.store.aio import AsyncStore


class DaemonBeats(Service):
    """Writes ``beat()`` through ``write`` (the store's ``daemon_beat``) every ``every``
    seconds; a failed write is logged and tried again a second later."""

    name = "daemon_beat"

    def __init__(
        self,
        store: AsyncStore,
        clock: Clock,
        beat: Callable[[], DaemonBeat],
        write: Callable[[DaemonBeat], None],
        every: float,
    ) -> None:
        super().__init__(clock)
        self._store = store
        self._beat = beat
        self._write = write
        self._every = every
        self.beats = 0

    async def run_once(self) -> datetime | None:
        await self._store.run(self._write, self._beat())
        self.beats += 1
        return self._clock.now() + timedelta(seconds=self._every)


class CountFolds(Service):
    """Folds the striped counters of a store several daemons share (``fold``, the
    store's ``fold_counts``: :mod:`jobctl.store.pg.counts`) every ``every`` seconds, so
    that the rows the reads sum stay about one per lane and bucket."""

    name = "count_fold"

    def __init__(
        self, store: AsyncStore, clock: Clock, fold: Callable[[], object], every: float
    ) -> None:
        super().__init__(clock)
        self._store = store
        self._fold = fold
        self._every = every
        self.folds = 0

    async def run_once(self) -> datetime | None:
        await self._store.run(self._fold)
        self.folds += 1
        return self._clock.now() + timedelta(seconds=self._every)


__all__ = ["CountFolds", "DaemonBeats"]
