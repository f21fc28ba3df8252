"""The striped counters of the PostgreSQL backend (``job_counts`` and ``log_usage``,
migration 0009; ``schedule_counts``, migration 0010), and their fold.

Why striped: the statement-level trigger that keeps the counts used to upsert one row per
(queue, owner, bucket). Two daemons' group commits, each several statements (promote,
claim, finish, insert), took two lanes' rows in opposite orders across statements and
deadlocked; PostgreSQL broke it after ``deadlock_timeout`` (1 s) and the write ran again.
Now each server process adds to rows of its own stripe (``pg_backend_pid()``): no two
open transactions share a counter row, so writers never wait for each other here, and
every reader sums over the stripes. ``log_usage`` (log bytes per owner, row triggers
that took the owners' rows in the order of the rows a statement touched) is striped the
same way, and so is ``schedule_counts`` (schedule totals per owner: two daemons changing
schedules of two owners in opposite orders deadlocked the same way).

Why fold: stripes would otherwise pile up (lanes x buckets x every process that ever
wrote), and the reads (a claim's due lanes, ``status``) sum them all. :func:`fold` moves
every stripe's rows into stripe 0 in one statement, taking only rows no open transaction
holds (``SKIP LOCKED``: a fold never waits for a writer, so it cannot close a wait cycle;
a writer may wait for a fold's commit, once). Folds run one at a time per store (a
try-advisory lock: a daemon that finds another folding skips its turn). Daemons on
PostgreSQL fold every :data:`FOLD_EVERY` seconds
(:class:`jobctl.engine.beat.CountFolds`).
"""

from __future__ import annotations

from jobctl.store.pg.db import PgConn, PgDb

#: Seconds between one daemon's folds.
FOLD_EVERY = 10.0


def fold(db: PgDb) -> int | None:
    """Fold the stripes' rows into stripe 0; how many rows moved, or None if another
    fold held the lock (this one then did nothing)."""

    def tx(conn: PgConn) -> int | None:
        row = conn.execute(db.q("try_fold_lock")).fetchone()
        if row is None or not row["locked"]:
            return None
        moved = conn.execute(db.q("fold_counts")).fetchone()
        conn.execute(db.q("drop_zero_counts"))
        conn.execute(db.q("fold_log_usage"))
        conn.execute(db.q("fold_schedule_counts"))
        conn.execute(db.q("drop_zero_schedule_counts"))
        return 0 if moved is None else int(moved["moved"])

    return db.transaction(tx)


__all__ = ["FOLD_EVERY", "fold"]
