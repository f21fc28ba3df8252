"""The audit trail in the SQLite store (mixed into SqliteStore).

Records are not written by a transaction of their own: :meth:`AuditOps.audit` queues
them in an :class:`AuditBuffer`, which rides along with whatever transaction the writer
commits next (:class:`jobctl.store.writer.Rider`). Under load that is the next group
commit of enqueues, so auditing adds rows, never an fsync; when the daemon is idle the
writer commits them alone after at most ``RIDE_WAIT`` (0.1 s). A record is therefore
durable a moment after its request was answered, not before: a crash in that moment
loses the record, never the change it describes. Old records are pruned in batches like
finished jobs.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jobctl.domain.audit import AuditRecord
from jobctl.store import rows
from jobctl.store.queries import q
from jobctl.store.rows import RowLike
from jobctl.store.sqltx import savepoint

if TYPE_CHECKING:
    from jobctl.store.sqlitedb import SqliteDb

log = logging.getLogger("jobctl.store")
PRUNE_AUDIT_BATCH = 5000
#: Records waiting at most; while commits fail (a full disk) the oldest beyond it are
#: dropped, and counted in one log line once a commit succeeds again.
MAX_PENDING = 100_000


class AuditBuffer:
    """Audit records waiting for the next commit (a writer :class:`Rider`).

    Thread-safe: the event loop adds, the writer thread takes. ``nudge`` is called when
    the buffer goes from empty to not, so an idle writer commits within its ride wait.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: list[dict[str, Any]] = []
        self.dropped = 0
        self.nudge: Callable[[], None] = lambda: None

    def add(self, records: Sequence[AuditRecord]) -> None:
        new = [audit_params(r) for r in records]
        with self._lock:
            was_empty = not self._rows
            self._rows += new
            self._bound()
        if was_empty and new:
            self.nudge()

    def _bound(self) -> None:
        excess = len(self._rows) - MAX_PENDING
        if excess > 0:
            del self._rows[:excess]
            self.dropped += excess

    def pending(self) -> bool:
        return bool(self._rows)

    def ride(self, conn: sqlite3.Connection) -> Callable[[bool], None] | None:
        with self._lock:
            taken, self._rows = self._rows, []
        if not taken:
            return None
        try:
            with savepoint(conn, "audit"):
                conn.executemany(q("insert_audit"), taken)
        except sqlite3.Error as exc:  # never sinks the writes it rides with
            log.error("event=audit_write_failed records=%d error=%s", len(taken), exc)
            return None
        return lambda ok: self._landed(taken) if ok else self._restore(taken)

    def _landed(self, taken: list[dict[str, Any]]) -> None:
        if self.dropped:
            log.error("event=audit_dropped records=%d reason=commits_failing", self.dropped)
            self.dropped = 0

    def _restore(self, taken: list[dict[str, Any]]) -> None:
        """The commit failed: the rows go back in front, for the next one."""
        with self._lock:
            self._rows[:0] = taken
            self._bound()
        self.nudge()


def audit_params(r: AuditRecord) -> dict[str, Any]:
    """A record as the parameters of ``insert_audit`` (both backends)."""
    return {
        "at": rows.to_ms(r.at),
        "request_id": r.request_id,
        "uid": r.uid,
        "gid": r.gid,
        "pid": r.pid,
        "action": r.action,
        "target": r.target,
        "status": r.status,
        "error": r.error,
        "denied": int(r.denied),
    }


def record_from_row(row: RowLike) -> AuditRecord:
    return AuditRecord(
        at=rows.ms_to_dt(row["at"]),
        request_id=row["request_id"],
        uid=row["uid"],
        gid=row["gid"],
        pid=row["pid"],
        action=row["action"],
        target=row["target"],
        status=row["status"],
        error=row["error"],
        denied=bool(row["denied"]),
        id=row["id"],
    )


class AuditOps:
    def __init__(self, db: SqliteDb) -> None:
        self.db = db

    def audit(self, records: Sequence[AuditRecord]) -> None:
        """Queue records; they are written with the next commit (at most ~0.1 s away)."""
        self.db.audit_buffer.add(records)

    def flush_audit(self) -> None:
        """Write the queued records now (a commit of their own if nothing else commits)."""
        if self.db.audit_buffer.pending():
            self.db.write(_nothing)

    def list_audit(
        self,
        uid: int | None = None,
        action: str | None = None,
        since: datetime | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[AuditRecord]:
        """Records newest first: before id ``before``, at or after ``since``, of ``uid``,
        of ``action`` or any action under it (``schedules`` takes ``schedules.pause``)."""
        params = {
            "uid": uid,
            "action": action,
            "since": 0 if since is None else rows.to_ms(since),
            "before": 2**62 if before is None else before,
            "limit": limit,
        }
        name = "list_audit" if uid is None else "list_audit_by_uid"
        return self.db.read(
            lambda conn: [record_from_row(r) for r in conn.execute(q(name), params)]
        )

    def prune_audit(self, before: datetime, limit: int = PRUNE_AUDIT_BATCH) -> int:
        """Delete up to ``limit`` of the oldest records kept from before ``before``."""
        params = {"before": rows.to_ms(before), "limit": limit}
        return self.db.write(lambda conn: conn.execute(q("prune_audit"), params).rowcount)


def _nothing(conn: sqlite3.Connection) -> None:
    return None
