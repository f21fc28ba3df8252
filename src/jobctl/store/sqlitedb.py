"""What every part of the SQLite backend shares: the file, its writer and its readers.

The backend is assembled by composition (:class:`jobctl.store.sqlite.SqliteStore`): each
part (jobs, executor batches, queues, schedules, retention, audit, crash evidence) is a
small class that receives one :class:`SqliteDb` and uses only its public members, so a
part can be read, and a second backend written, without knowing the others.
"""

from __future__ import annotations

import logging
import random
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import TypeVar

from jobctl.domain.clock import Clock
from jobctl.domain.dispatch import Fairness
from jobctl.domain.quota import Limits
from jobctl.lograte import RateLimitedLog
from jobctl.store import rows
from jobctl.store.audit import AuditBuffer
from jobctl.store.dblock import DbLock
from jobctl.store.health import Health, check_at_start, is_corruption, refused_at_start
from jobctl.store.migrate import migrate
from jobctl.store.writer import Writer

T = TypeVar("T")
BUSY_TIMEOUT_MS = 10_000


def connect(path: str, *, readonly: bool = False) -> sqlite3.Connection:
    conn = sqlite3.connect(
        path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
    )
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys=ON")
    if readonly:
        conn.execute("PRAGMA query_only=ON")
    else:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
    return conn


class SqliteDb:
    """One SQLite file: the group-commit writer, per-thread readers, the clock and the
    state the writer thread keeps between transactions (fairness, quotas)."""

    def __init__(
        self, path: str | Path, clock: Clock, rng: random.Random | None, *, lock: bool
    ) -> None:
        self.path = str(path)
        self.clock = clock
        self.rng = rng or random.Random()
        self._lock = DbLock(self.path) if lock else None
        #: Fair-share state of the claims (touched only by the writer thread).
        self.fairness = Fairness()
        #: Per-owner quotas (the daemon sets it); None: nobody has a quota.
        self.quota: Callable[[int], Limits] | None = None
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        #: Audit rows waiting to ride along with the writer's next commit.
        self.audit_buffer = AuditBuffer()
        errors = RateLimitedLog(logging.getLogger("jobctl.store"), clock)
        self.health = Health(self.path)
        try:
            self.writer = Writer(
                self._open_writer,
                rider=self.audit_buffer,
                errors=errors,
                translate=self.health.translate,
                refusal=self.health.refusal,
            )
        except BaseException as exc:
            self._release_lock()
            if is_corruption(exc):
                raise refused_at_start(self.path, exc) from None
            raise
        self.audit_buffer.nudge = self.writer.nudge

    def _open_writer(self) -> sqlite3.Connection:
        conn = connect(self.path)
        try:
            check_at_start(conn, self.path)
            migrate(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def now_ms(self) -> int:
        return rows.to_ms(self.clock.now())

    def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in the next group commit; its answer once that is on disk."""
        return self.writer.call(fn)

    def submit(self, fn: Callable[[sqlite3.Connection], T]) -> Future[T]:
        """:meth:`write` without waiting: the future resolves after the commit."""
        return self.writer.submit(fn)

    def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in a read transaction on this thread's read-only connection."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path, readonly=True)
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        try:
            conn.execute("BEGIN")
            try:
                return fn(conn)
            finally:
                conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            error = self.health.translate(exc)
            if error is exc:
                raise
            raise error from None

    def close(self) -> None:
        self.writer.close()
        with self._readers_lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()
        self._release_lock()  # after the connections: see jobctl.store.dblock

    def _release_lock(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None


__all__ = ["BUSY_TIMEOUT_MS", "SqliteDb", "connect"]
