"""The audit trail's writes on PostgreSQL: records queued, then written by one statement per
commit, not one savepoint and one ``INSERT`` per request.

Why: under single-job enqueues every request adds one record. Written one write per
request, each record cost the group commit a savepoint, a statement and its release (three
round trips, issue 15's benchmark: about half the daemon waited on the server). Here the
first record queued submits one write; that write takes every record queued by the time it
runs (the group commit usually carries it in the same transaction as the enqueues) and
inserts them with one ``INSERT … SELECT FROM unnest``, in order. Records queued after it
took its share go to the next write. As on SQLite, a record is durable a moment after its
request was answered; :meth:`PgAuditWriter.flush` waits for every write begun so far.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from jobctl.domain.audit import AuditRecord
from jobctl.store.audit import audit_params
from jobctl.store.pg.db import PgConn, PgDb

log = logging.getLogger("jobctl.store")
#: The columns of ``insert_audit_rows``, in its parameters' order.
COLUMNS = ("at", "request_id", "uid", "gid", "pid", "action", "target", "status", "error")


class PgAuditWriter:
    """Records waiting for their write (see the module docstring). Thread-safe."""

    def __init__(self, db: PgDb) -> None:
        self._db = db
        self._lock = threading.Lock()
        self._rows: list[dict[str, Any]] = []
        self._queued = False  # a write is submitted and has not yet taken its records
        self._writes: list[Future[None]] = []

    def add(self, records: Sequence[AuditRecord]) -> None:
        new = [audit_params(r) for r in records]
        if not new:
            return
        with self._lock:
            self._rows += new
            if self._queued:
                return
            self._queued = True
        taken: list[dict[str, Any]] = []
        fut = self._db.submit(lambda conn: self._write(conn, taken))
        fut.add_done_callback(lambda done: _failed(done, taken))
        with self._lock:
            self._writes = [f for f in self._writes if not f.done()] + [fut]

    def flush(self) -> None:
        """Wait for every write submitted so far (a failed one was logged, not raised)."""
        with self._lock:
            writes, self._writes = self._writes, []
        for fut in writes:
            fut.exception()

    def _write(self, conn: PgConn, taken: list[dict[str, Any]]) -> None:
        if not taken:  # a retried transaction keeps the records its first run took
            with self._lock:
                taken += self._rows
                self._rows, self._queued = [], False
        if taken:
            params = {c: [r[c] for r in taken] for c in COLUMNS}
            params["denied"] = [r["denied"] for r in taken]
            conn.execute(self._db.q("insert_audit_rows"), params)


def _failed(done: Future[None], taken: list[dict[str, Any]]) -> None:
    error = done.exception()
    if error is not None:
        log.error("event=audit_write_failed records=%d error=%s", len(taken), error)


__all__ = ["PgAuditWriter"]
