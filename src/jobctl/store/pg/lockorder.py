"""The one order every PostgreSQL transaction takes queue locks in (issue 15).

Several daemons share the database, and a group commit runs many writes in one
transaction (:class:`jobctl.store.pg.groupcommit.GroupCommit`, each write in a savepoint), so the
order inside one write is not enough: a batch that writes queue ``qb`` then ``qa`` and
another transaction that takes ``qa`` then ``qb`` wait for each other, and PostgreSQL
breaks that only after ``deadlock_timeout`` (1 s), rolling one back.

What locks a queue, per path (X a queue name; every lock held to the transaction's end):

- advisory lock ``a:X`` (``lock_queues``: exclusive where X may become a worker queue,
  shared where a job only has its kind checked; ``lock_queues_shared``: shared, the
  one-round-trip enqueue's, which skips the setting below for its cost: a pipelined
  commit carries one write that locks queues at most, so its one statement, in key order,
  is its transaction's only queue locks): inserts, checked and pipelined
  (:mod:`jobctl.store.pg.inserts`, one statement for the write's queues), schedule
  creates and edits
  (:mod:`jobctl.store.schedules`), a worker queue's mark (:func:`jobctl.store.workerq.mark`),
  and ``set_queue`` (exclusive, so that no two writers insert one queue's row at once);
- row lock ``r:X`` on ``queues``: a claim's ``lock_limited_queues`` (``FOR UPDATE``, its
  limited queues in name order; ``spend_tokens`` then updates rows it holds), and
  ``lock_queue_row`` before ``upsert_queue`` (``set_queue``) and ``mark_worker_queue``
  (a worker queue's mark: alone, from an insert of payload jobs, from a schedule's
  template), which insert the row if it is missing.

The order is the byte order of those keys (``COLLATE "C"``): every advisory lock before
every row lock; advisory locks by their own key (``a:`` and, in hex, the hash of schema and
name the lock is taken on: two names of one hash are one lock, and one key), rows by name.
The rule, kept by each of those statements: a transaction waits only for a lock keyed
after every queue lock it holds (the highest key it holds is the transaction-local
setting ``jobctl.queue_lock_top``, raised by each statement and undone with a rolled-back
savepoint exactly as its locks are); a lock keyed at or before that is only tried. A
claim skips a queue whose try failed (this time); any other write gives its savepoint up
with :class:`OutOfOrder`, and the group commit runs it again alone after the batch
commits, in a transaction that holds nothing yet, where each write takes its locks in
increasing order: its advisory locks in one statement (sorted there), then its rows sorted
(:func:`jobctl.store.workerq.lock_rows` before a batch's marks). A missing row is inserted
only under the queue's exclusive advisory lock, so that INSERT waits for no one; the
upserts of a held row wait for no one.

Why that is cycle-free: in a cycle of waits T1 → T2 → … → T1, each Ti waits for a lock
keyed above every key it holds, and that lock is held by T(i+1), which waits in turn for
a key above it: keys would strictly grow around the cycle. The cost: a write bounced out
of a batch is one more commit; it happens only when another transaction holds the very
lock it needed out of order. Other waits of a batch (job rows, schedule cursors) are not
queue locks and not ordered here.

SQLite needs none of this: one writer connection, ``BEGIN IMMEDIATE``, so no transaction
ever waits for a lock another transaction holds while holding one itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

    from jobctl.store.pg.db import PgConn, PgDb


class OutOfOrder(Exception):
    """A write needed a queue lock keyed before one its transaction holds, and another
    transaction holds it: waiting could close a cycle. The group commit rolls the write's
    savepoint back and runs it again alone (see the module docstring)."""


def advisory(db: PgDb, conn: PgConn, modes: list[tuple[str, bool]]) -> psycopg.Cursor[Any]:
    """Send ``lock_queues`` for ``modes`` (name, exclusive; each name once; the statement
    orders them by key); its cursor, for :func:`check` (in a pipeline, once the answers
    are in)."""
    params = {"names": [n for n, _ in modes], "exclusive": [x for _, x in modes]}
    return conn.execute(db.q("lock_queues"), params)


def check(cur: psycopg.Cursor[Any]) -> None:
    """Raise :class:`OutOfOrder` if ``lock_queues`` missed a lock it could only try."""
    row = cur.fetchone()
    if row is not None and row["missed"]:
        raise OutOfOrder(f"{row['missed']} queue lock(s) held elsewhere, out of order")


def rows(db: PgDb, conn: PgConn, names: Iterable[str]) -> None:
    """Lock the ``queues`` rows of ``names`` (each held with its exclusive advisory lock),
    in byte order, by the rule; :class:`OutOfOrder` for one that can only be tried and is
    held elsewhere."""
    for name in sorted(set(names)):
        row = conn.execute(db.q("lock_queue_row"), {"name": name}).fetchone()
        if row is None or not row["ok"]:
            raise OutOfOrder(f"queue {name!r}: its row is held elsewhere, out of order")


__all__ = ["OutOfOrder", "advisory", "check", "rows"]
