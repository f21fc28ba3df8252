"""Cross-daemon wake-ups over LISTEN/NOTIFY, a hint and never the data.

A daemon that committed an enqueue, a cancel or a replay wakes the others with an empty
``NOTIFY jobctl_wake`` (the payload limit of 8,000 bytes never matters: there is none),
sent on its own after the write committed, so the notification queue's commit lock is
never taken by the writes themselves. At most one per queue per :data:`COOLDOWN` seconds
per daemon. The receiving side (:class:`Listener`) holds one connection of its own
(never a pooled one: LISTEN needs a session, which a transaction-mode pooler does not
keep) and calls back on each notification; ``poll_only`` turns LISTEN off for such
set-ups, and the daemon's one-second safety-net poll carries the load instead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

import psycopg
from psycopg import sql

from jobctl.store.pg.db import PgDb

log = logging.getLogger("jobctl.store")
#: One wake-up per queue per this many seconds per daemon at most.
COOLDOWN = 0.1


class Notifier:
    def __init__(self, db: PgDb, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._db = db
        self._monotonic = monotonic
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()
        self.sent = 0  # notifications sent (for tests and metrics)

    def wake(self, queues: Iterable[str]) -> bool:
        """Tell the other daemons that ``queues`` have news; False when every queue was
        woken less than :data:`COOLDOWN` ago (nothing is sent)."""
        now = self._monotonic()
        with self._lock:
            due = [q for q in set(queues) if now - self._last.get(q, -COOLDOWN) >= COOLDOWN]
            for q in due:
                self._last[q] = now
        if not due:
            return False
        try:
            with self._db.pool.connection() as conn:
                conn.execute(self._db.q("wake"), {"channel": self._db.channel})
                conn.commit()
        except psycopg.Error as exc:  # a hint: the others poll every second anyway
            log.warning("event=notify_failed error=%s", exc)
            return False
        self.sent += 1
        return True


class Listener:
    """Calls ``on_wake()`` for each notification, on a thread of its own."""

    def __init__(self, db: PgDb, on_wake: Callable[[], None], *, poll_only: bool = False) -> None:
        self._dsn = db.dsn
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
                with psycopg.connect(self._dsn, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(self._listen)
                    self.listening.set()
                    delay = 0.1
                    while not self._stop.is_set():
                        for _ in conn.notifies(timeout=0.5, stop_after=64):
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


__all__ = ["COOLDOWN", "Listener", "Notifier"]
