"""The owners' ``queued`` quota of an insert on PostgreSQL: which groups would take their
owner past it (as on SQLite). Split from :mod:`jobctl.store.pg.inserts` to keep it small."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from jobctl.domain.models import JobSpec
from jobctl.domain.quota import COUNT_RETRY_AFTER, Limits
from jobctl.errors import JobctlError, QuotaExceeded
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


def refuse_over(
    groups: Sequence[Sequence[JobSpec]], limited: dict[int, int], have: dict[int, int]
) -> dict[int, JobctlError]:
    """Groups (by index) that would take their owner past ``limited``, from ``have``."""
    have = dict(have)
    refused: dict[int, JobctlError] = {}
    for i, group in enumerate(groups):
        adding: dict[int, int] = {}
        for spec in group:
            if spec.owner_uid in limited:
                adding[spec.owner_uid] = adding.get(spec.owner_uid, 0) + 1
        over = [uid for uid, n in adding.items() if have[uid] + n > limited[uid]]
        if over:
            uid = over[0]
            refused[i] = QuotaExceeded(
                f"queued quota: you have {have[uid]} scheduled jobs of at most "
                f"{limited[uid]}; {adding[uid]} more would pass it",
                quota="queued",
                limit=limited[uid],
                used=have[uid],
                retry_after=COUNT_RETRY_AFTER,
            )
            continue
        for uid, n in adding.items():
            have[uid] += n
    return refused


def _queued(db: PgDb, conn: PgConn, uid: int) -> int:
    return scheduled(conn.execute(db.q("owner_counts"), {"uid": uid}))


def scheduled(rows: Iterable[RowLike]) -> int:
    """Jobs waiting to run (scheduled or due) in an ``owner_counts`` answer."""
    counts = {r["bucket"]: r["n"] for r in rows}
    return int(counts.get("scheduled", 0) + counts.get("due", 0))


__all__ = ["over_queued_quota", "queued_limits", "refuse_over", "scheduled"]
