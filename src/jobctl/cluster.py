"""A daemon on a PostgreSQL database several daemons share: what the composition root
(:mod:`jobctl.daemon`) adds to the SQLite wiring.

- the store, on the database server's clock (the daemon's clock moved by its measured
  offset to ``clock_timestamp()``, measured at start and again every
  :data:`REMEASURE_EVERY` heartbeats; a warning above 5 s);
- this daemon's row in ``daemons``, written before recovery and then every
  ``lease_ttl / 3`` (:class:`jobctl.engine.beat.DaemonBeats`), marked stopped on a clean
  stop;
- the fold of the striped job counters every :data:`~jobctl.store.pg.counts.FOLD_EVERY`
  seconds (:mod:`jobctl.store.pg.counts`; one daemon at a time folds, the others skip);
- LISTEN/NOTIFY wake-ups from the other daemons (an enqueue, cancel, replay or
  materialization wakes the timer and the materializer), with a 1 s safety poll behind
  them (:attr:`jobctl.engine.service.Service.max_sleep`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

from jobctl import __version__, files
from jobctl.domain.cluster import DaemonBeat
from jobctl.engine.beat import CountFolds, DaemonBeats
from jobctl.engine.service import Service
from jobctl.store.aio import AsyncStore
from jobctl.store.pg.clock import ServerClock
from jobctl.store.pg.counts import FOLD_EVERY
from jobctl.store.pg.notify import Listener
from jobctl.store.pg.store import PostgresStore

if TYPE_CHECKING:
    from jobctl.daemon.wiring import DaemonConfig

log = logging.getLogger("jobctl.daemon")
#: The clock offset to the server is measured again every this many heartbeats.
REMEASURE_EVERY = 60
#: Longest sleep of the timer and the materializer: the safety net behind NOTIFY.
SAFETY_POLL = 1.0


def open_store(cfg: DaemonConfig) -> tuple[PostgresStore, DaemonConfig]:
    """The store on ``cfg.database_url`` and the config with the server's clock in it;
    the daemon's local directory (logs) is made first."""
    assert cfg.database_url is not None
    files.ensure_dir(cfg.db.parent)
    files.ensure_dir(cfg.db.parent / "logs")
    clock = ServerClock(cfg.clock)
    store = PostgresStore(cfg.database_url, clock, lease_ttl=cfg.lease_ttl)
    try:
        clock.remeasure(store.db)
    except BaseException:
        store.close()
        raise
    return store, dataclasses.replace(cfg, clock=clock)


class Cluster:
    """This daemon's part in the cluster: its heartbeat row and the wake-ups."""

    def __init__(
        self,
        store: PostgresStore,
        astore: AsyncStore,
        cfg: DaemonConfig,
        owner: str,
        woken: tuple[Service, ...],
        running: Callable[[], int],
    ) -> None:
        self.store = store
        self.owner = owner
        self._cfg = cfg
        self._started = cfg.clock.now()
        self._running = running
        self._woken = woken
        for service in woken:
            service.max_sleep = SAFETY_POLL
        self.beats = DaemonBeats(astore, cfg.clock, self.beat, self._write, cfg.lease_ttl / 3)
        #: Folds the striped job counters (store/pg/counts.py) every FOLD_EVERY seconds.
        self.folds = CountFolds(astore, cfg.clock, store.fold_counts, FOLD_EVERY)
        self._listener: Listener | None = None

    def beat(self) -> DaemonBeat:
        now = self._cfg.clock.now()
        return DaemonBeat(
            owner=self.owner,
            host=socket.gethostname(),
            pid=os.getpid(),
            version=__version__,
            started_at=self._started,
            last_seen=now,
            running=self._running(),
            slots=self._cfg.concurrency,
            lease_ttl=self._cfg.lease_ttl,
        )

    def _write(self, beat: DaemonBeat) -> None:
        self.store.daemon_beat(beat)
        clock = self._cfg.clock
        beats = self.beats.beats
        if isinstance(clock, ServerClock) and beats and beats % REMEASURE_EVERY == 0:
            clock.remeasure(self.store.db)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Write the row now (before recovery: a daemon starting meanwhile sees this one
        live) and listen for the other daemons' wake-ups."""
        self.store.daemon_beat(self.beat())
        wake = lambda: _call_soon(loop, self._wake)  # noqa: E731
        self._listener = self.store.listen(wake, poll_only=not self._cfg.pg_listen)
        if not self._cfg.pg_listen:
            log.info("event=listen_off poll_every=%.0fs reason=pg_listen", SAFETY_POLL)

    def _wake(self) -> None:
        for service in self._woken:
            service.wake()

    def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()
        try:
            self.store.daemon_stopped(self.owner)
        except Exception as exc:  # the database is gone: the row goes stale, shown gone
            log.warning("event=daemon_stop_unrecorded error=%s", exc)


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[[], None]) -> None:
    """``fn`` on the loop's thread (the listener calls from its own); a closed loop: no-op."""
    if not loop.is_closed():
        loop.call_soon_threadsafe(fn)


__all__ = ["SAFETY_POLL", "Cluster", "open_store"]
