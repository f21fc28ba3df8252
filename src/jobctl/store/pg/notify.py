"""Cross-daemon wake-ups over LISTEN/NOTIFY, a hint and never the data.

A daemon that committed an enqueue, a cancel or a replay wakes the others with an empty
``NOTIFY jobctl_wake`` (the payload limit of 8,000 bytes never matters: there is none),
sent on its own after the write committed, so the notification queue's commit lock is
never taken by the writes themselves. At most one per queue per :data:`COOLDOWN` seconds
per daemon; a wake-up asked for within the cooldown is sent when it ends (one for all
asked meanwhile), never dropped: a dropped one left a job enqueued 20 ms after another
waiting for the one-second safety poll on the other daemons (p99 dispatch lag ~1 s in
issue 15's benchmark). The receiving side (:class:`Listener`) holds one connection of its own
(never a pooled one: LISTEN needs a session, which a transaction-mode pooler does not
keep) and calls back on each notification; ``poll_only`` turns LISTEN off for such
set-ups, and the daemon's one-second safety-net poll carries the load instead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable
from typing import Protocol

import psycopg
from psycopg import sql

from jobctl.store.pg.db import PgDb

log = logging.getLogger("jobctl.store")
#: One wake-up per queue per this many seconds per daemon at most.
COOLDOWN = 0.1
#: Server process ids of its own notifications a daemon's listener skips: the last this
#: many its notifier sent from (more than its pool holds at once).
SENDERS_KEPT = 32


class Cancellable(Protocol):
    def cancel(self) -> None: ...


#: Runs a callable after a delay in seconds (``threading.Timer`` started); tests pass
#: one that only records it.
Later = Callable[[float, Callable[[], None]], Cancellable]


def _timer(delay: float, fn: Callable[[], None]) -> Cancellable:
    t = threading.Timer(delay, fn)
    t.daemon = True
    t.start()
    return t


class Notifier:
    def __init__(
        self, db: PgDb, monotonic: Callable[[], float] = time.monotonic, later: Later = _timer
    ) -> None:
        self._db = db
        self._monotonic = monotonic
        self._later = later
        self._last: dict[str, float] = {}
        self._pending: set[str] = set()  # asked for within their cooldown: sent at its end
        self._flush: Cancellable | None = None
        self._lock = threading.Lock()
        self.sent = 0  # notifications sent (for tests and metrics)
        #: Server processes this notifier sent from lately (in order, at most
        #: :data:`SENDERS_KEPT`: an old one's id may be reused by another daemon's): the
        #: listener of the same daemon skips their notifications (its own work wakes its
        #: services directly, as on SQLite).
        self.senders: dict[int, None] = {}

    def wake(
        self, queues: Iterable[str], elsewhere: Callable[[Callable[[], bool]], object] | None = None
    ) -> bool:
        """Tell the other daemons that ``queues`` have news; False when every queue was
        woken less than :data:`COOLDOWN` ago (then one is sent when the cooldown ends).
        ``elsewhere``: runs the sending (a round trip) on another thread, for a caller on
        the event loop, which must not wait for the server; True once handed to it."""
        now = self._monotonic()
        with self._lock:
            asked = set(queues)
            due = {q for q in asked if now - self._last.get(q, -COOLDOWN) >= COOLDOWN}
            for q in due:
                self._last[q] = now
            self._pending = (self._pending | asked) - due
            if self._pending and self._flush is None:
                wait = max(self._last[q] for q in self._pending) + COOLDOWN - now
                self._flush = self._later(max(wait, 0.0), self._send_pending)
        if not due:
            return False
        if elsewhere is not None:
            elsewhere(self._send)
            return True
        return self._send()

    def _send_pending(self) -> None:
        """The wake-up of the queues asked for during their cooldown (a timer's call)."""
        with self._lock:
            self._flush = None
            queues, self._pending = self._pending, set()
        if queues:
            self.wake(queues)

    def close(self) -> None:
        """Forget the wake-ups not yet sent (the store is closing)."""
        with self._lock:
            if self._flush is not None:
                self._flush.cancel()
            self._flush, self._pending = None, set()

    def _sent_from(self, pid: int) -> None:
        with self._lock:
            self.senders.pop(pid, None)
            self.senders[pid] = None  # the newest last
            while len(self.senders) > SENDERS_KEPT:
                del self.senders[next(iter(self.senders))]

    def _send(self) -> bool:
        try:
            with self._db.pool.connection() as conn:
                self._sent_from(conn.info.backend_pid)
                conn.execute(self._db.q("wake"), {"channel": self._db.channel})
                conn.commit()
        except psycopg.Error as exc:  # a hint: the others poll every second anyway
            log.warning("event=notify_failed error=%s", exc)
            return False
        self.sent += 1
        return True


class Listener:
    """Calls ``on_wake()`` for each notification, on a thread of its own, except those
    sent from the server processes in ``skip`` (the same daemon's :attr:`Notifier.senders`:
    each woke this daemon's timer and materializer for work it had just done itself,
    about ten reads a second under a steady enqueue, none of them needed)."""

    def __init__(
        self,
        db: PgDb,
        on_wake: Callable[[], None],
        *,
        poll_only: bool = False,
        skip: Collection[int] = frozenset(),
    ) -> None:
        self._skip = skip
        self.skipped = 0  # notifications skipped as this daemon's own (for tests)
        self._dsn = db.dsn
        self._params = db.connect_params  # keepalives: a dead LISTEN session is noticed
        self._listen = sql.SQL("LISTEN {}").format(sql.Identifier(db.channel))
        self._on_wake = on_wake
        self._stop = threading.Event()
        self.listening = threading.Event()
        self._thread: threading.Thread | None = None
        if not poll_only:
            self._thread = threading.Thread(target=self._run, name="jobctl-pg-listen", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        delay = 0.1
        while not self._stop.is_set():
            try:
                with psycopg.connect(
                    self._dsn, autocommit=True, connect_timeout=5, **self._params
                ) as conn:
                    conn.execute(self._listen)
                    self.listening.set()
                    delay = 0.1
                    while not self._stop.is_set():
                        for n in conn.notifies(timeout=0.5, stop_after=64):
                            if n.pid in self._skip:
                                self.skipped += 1
                            else:
                                self._on_wake()
            except psycopg.Error as exc:
                self.listening.clear()
                log.warning("event=listen_lost error=%s retry_in=%.1f", exc, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, 5.0)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


__all__ = ["COOLDOWN", "Later", "Listener", "Notifier"]
