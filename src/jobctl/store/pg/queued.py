"""The owners' ``queued`` quota of an insert on PostgreSQL: which groups would take their
owner past it (as on SQLite). Split from :mod:`jobctl.store.pg.inserts` to keep it small."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from jobctl.domain.models import JobSpec
from jobctl.domain.quota import Limits, refuse_over
from jobctl.errors import JobctlError
from jobctl.store.pg.db import PgConn, PgDb
from jobctl.store.rows import RowLike


def over_queued_quota(
    db: PgDb, conn: PgConn, groups: Sequence[Sequence[JobSpec]]
) -> dict[int, JobctlError]:
    """Groups that would take their owner past the ``queued`` quota (as on SQLite)."""
    limited = queued_limits(db, groups)
    have = {uid: _queued(db, conn, uid) for uid in limited}
    return refuse_over(groups, limited, have)


def queued_limits(db: PgDb, groups: Sequence[Sequence[JobSpec]]) -> dict[int, int]:
    """The ``queued`` quota of each owner of ``groups`` that has one."""
    quota: Callable[[int], Limits] | None = db.quota
    if quota is None:
        return {}
    limits = {s.owner_uid: quota(s.owner_uid).queued for g in groups for s in g}
    return {uid: n for uid, n in limits.items() if n is not None}


def _queued(db: PgDb, conn: PgConn, uid: int) -> int:
    return scheduled(conn.execute(db.q("owner_counts"), {"uid": uid}))


def scheduled(rows: Iterable[RowLike]) -> int:
    """Jobs waiting to run (scheduled or due) in an ``owner_counts`` answer."""
    counts = {r["bucket"]: r["n"] for r in rows}
    return int(counts.get("scheduled", 0) + counts.get("due", 0))


__all__ = ["over_queued_quota", "queued_limits", "scheduled"]
