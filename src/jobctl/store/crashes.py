"""Crash evidence in the SQLite store (a part of SqliteStore): what the poison rule reads.

Start-up recovery marks each orphaned attempt before it stops anything
(:meth:`CrashOps.mark_crash_evidence`): a *suspect* when its command had already gone,
cleared when the command was still running. Ending the attempt then asks
:func:`crash_streak` for the suspect sets of the crashes that ended the job's latest
attempts, and :func:`jobctl.domain.retry.crash_poison` decides.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING

from jobctl.domain.retry import POISON_CRASHES
from jobctl.store.queries import q

if TYPE_CHECKING:
    from jobctl.store.sqlitedb import SqliteDb

#: (job id, generation, suspect): one orphaned attempt and what recovery found.
CrashMark = tuple[int, int, bool]


class CrashOps:
    """``mark_crash_evidence`` of the store contract."""

    def __init__(self, db: SqliteDb) -> None:
        self.db = db

    def mark_crash_evidence(self, marks: Sequence[CrashMark]) -> None:
        def tx(conn: sqlite3.Connection) -> None:
            sql = q("mark_crash_evidence")
            for job_id, generation, suspect in marks:
                params = {"job_id": job_id, "generation": generation, "suspect": int(suspect)}
                # No row changed is no error: the first mark of an attempt stays, and an
                # attempt that ended meanwhile keeps no mark (documented in the query).
                conn.execute(sql, params)

        self.db.write(tx)


def crash_streak(conn: sqlite3.Connection, job_id: int) -> list[set[int]]:
    """Suspect sets of the crashes that ended the job's latest attempts, newest first.

    The streak is the run of most recent attempts (the one ending now included) that each
    ended in a different crash with the job as a suspect; it stops at the first attempt
    that did not, and at :data:`POISON_CRASHES`.
    """
    params = {"job_id": job_id, "limit": POISON_CRASHES}
    owners: list[str] = []
    for row in conn.execute(q("recent_crash_marks"), params).fetchall():
        if row["crash_suspect"] != 1 or row["lease_owner"] in owners:
            break
        owners.append(row["lease_owner"])
    if len(owners) < POISON_CRASHES:
        return []
    sql = q("crash_suspects")
    return [{r["job_id"] for r in conn.execute(sql, {"owner": o})} for o in owners]


__all__ = ["CrashMark", "CrashOps", "crash_streak"]
