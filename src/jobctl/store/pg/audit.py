"""The audit trail's writes on PostgreSQL: records queued, then carried by the next group
commit in one statement, not one write (savepoint, ``INSERT``, release) per request.

Why: under single-job enqueues every request adds one record. Written as a write of its
own, each record cost the group commit three round trips, and, when it landed in a
transaction of its own, a commit (an fsync that the enqueues' commit queued behind; issue
15's benchmark: about half the daemon waited on the server). As on SQLite
(:class:`jobctl.store.audit.AuditBuffer`), the records ride along with whatever the group
commit commits next (:class:`jobctl.store.pg.db.Rider`): one ``INSERT … SELECT FROM
json_populate_recordset`` for all of them (one JSON parameter), in order, in a savepoint
sent in one round trip with its release (a bad record never sinks the writes it rides
with), or in the pipelined commit without one (:mod:`jobctl.store.pg.pipelined`). When
the daemon is idle the group commit carries them in a commit of their own after at most
:data:`jobctl.store.pg.db.RIDE_EVERY` (it asks :meth:`PgAuditWriter.waiting`). A record
is therefore durable a moment after its request was answered, never before the change it
describes; :meth:`PgAuditWriter.flush` waits for every record queued so far.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import orjson
import psycopg

from jobctl.domain.audit import AuditRecord
from jobctl.store.audit import MAX_PENDING, audit_params
from jobctl.store.pg.db import PgConn, PgDb
from jobctl.store.pg.pipelined import NOTHING
from jobctl.store.pg.rawpipe import Pipe, native

log = logging.getLogger("jobctl.store")
_SAVEPOINT = "jobctl_audit"


class PgAuditWriter:
    """Records waiting for a commit to carry them (see the module docstring).

    Thread-safe: the event loop adds, the group commit's threads take. A ride that took
    records holds a future, settled when its transaction has landed, for :meth:`flush`.
    """

    def __init__(self, db: PgDb) -> None:
        self._db = db
        self._lock = threading.Lock()
        self._rows: list[dict[str, Any]] = []
        self._landing: dict[int, Future[None]] = {}  # id(taken) -> settled when it lands
        self.dropped = 0

    def add(self, records: Sequence[AuditRecord]) -> None:
        new = [audit_params(r) for r in records]
        if not new:
            return
        with self._lock:
            self._rows += new
            self._bound()

    def flush(self) -> None:
        """Wait until every record queued so far is committed (or its write failed and was
        logged: it is then kept for a later commit, not raised here)."""
        with self._lock:
            waiting = bool(self._rows)
        if waiting:
            self._db.submit(NOTHING).exception()  # its commit carries them
        with self._lock:
            landing = list(self._landing.values())
        for fut in landing:
            fut.exception()

    # -- the Rider of the group commit --------------------------------------------------

    def ride(self, conn: PgConn, taken: list[Any]) -> None:
        self._take(taken)
        if taken:
            _insert(self._db, conn, taken)

    def queue(self, pipe: Pipe, taken: list[Any]) -> None:
        self._take(taken)
        if taken:
            pipe.execute(native(self._db.q("insert_audit_rows"), ("rows",)), (_json(taken),))

    def waiting(self) -> bool:
        return bool(self._rows)  # one read of a list's length: atomic, no lock needed

    def landed(self, taken: list[Any], ok: bool) -> None:
        with self._lock:
            fut = self._landing.pop(id(taken), None)
            if not ok:  # back in front, for the next commit
                self._rows[:0] = taken
                self._bound()
        if fut is not None:
            fut.set_result(None)
        if ok and self.dropped:
            log.error("event=audit_dropped records=%d reason=commits_failing", self.dropped)
            self.dropped = 0

    # -- internals ----------------------------------------------------------------------

    def _take(self, taken: list[Any]) -> None:
        """The queued records into ``taken``, unless it holds some already (a retried
        transaction keeps the records its first run took)."""
        if taken:
            return
        with self._lock:
            taken += self._rows
            self._rows = []
            if taken:
                self._landing[id(taken)] = Future()

    def _bound(self) -> None:
        excess = len(self._rows) - MAX_PENDING
        if excess > 0:
            del self._rows[:excess]
            self.dropped += excess


def _insert(db: PgDb, conn: PgConn, taken: list[dict[str, Any]]) -> None:
    """All of ``taken`` in one statement, in a savepoint sent with it in one round trip;
    if that fails (a record the server refuses, such as a NUL in a path), each record alone,
    so only the refused ones are lost (and logged), as when each was a write of its own."""
    params = {"rows": _json(taken)}
    try:
        with conn.pipeline():
            conn.execute(f"SAVEPOINT {_SAVEPOINT}")
            conn.execute(db.q("insert_audit_rows"), params)
            conn.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
    except psycopg.OperationalError:
        raise  # the connection, not the records: the whole transaction is retried
    except psycopg.Error:
        conn.execute(f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}")
        conn.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
        for row in taken:
            _insert_one(db, conn, row)


def _json(taken: list[dict[str, Any]]) -> str:
    """``insert_audit_rows``'s parameter: the records as one JSON array of objects named
    by column (:func:`jobctl.store.audit.audit_params`)."""
    return orjson.dumps(taken).decode()


def _insert_one(db: PgDb, conn: PgConn, row: dict[str, Any]) -> None:
    try:
        with conn.transaction():
            conn.execute(db.q("insert_audit"), row)
    except psycopg.OperationalError:
        raise
    except psycopg.Error as exc:
        log.error(
            "event=audit_write_failed records=1 request_id=%s error=%s", row["request_id"], exc
        )


__all__ = ["PgAuditWriter"]
