"""A group commit in two round trips: the hot path of single-job enqueues on PostgreSQL.

A write that can say up front which statements it will send (a :class:`Staged` write:
keyless enqueues, the audit trail's flush) runs in one pipeline with ``BEGIN`` and
``COMMIT`` sent as statements of their own: ``BEGIN`` and every write's reads in the first
round trip, every write's ``INSERT``, the audit rows riding along and ``COMMIT`` in the
second. No savepoints: in a pipeline the server skips every statement after a failed one
until the next sync, ``COMMIT`` included, so one failure leaves nothing committed; the
group commit then runs the same writes the checked way (:class:`jobctl.store.pg.db.GroupCommit`:
savepoints, one write's failure answered to it alone), and nobody was answered before.

Why: the checked way costs five round trips per commit (``BEGIN``, the reads, savepoint
+ ``INSERT`` + release, the audit's savepoint + ``INSERT`` + release, ``COMMIT``), and on
a loaded host each one waits for the server process and then for the committer thread to
be scheduled; with 8 clients a commit carries 3-4 jobs, so that was about 1.4 round trips
per job (issue 15's benchmark, docs/benchmarks.md "PostgreSQL single-job enqueue").

The connection runs in autocommit while it is here (so psycopg sends no ``BEGIN`` of its
own, which in a pipeline costs a sync), and is handed back to the pool idle, in
transaction mode again.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import psycopg
from psycopg import pq
from psycopg_pool import PoolTimeout

if TYPE_CHECKING:
    from jobctl.store.pg.db import PgConn, PgDb, Rider

T = TypeVar("T")
_IDLE = pq.TransactionStatus.IDLE


class Staged(ABC, Generic[T]):
    """A group-commit write that can be pipelined (see the module docstring).

    Calling it is the checked way (its statements in a savepoint of the group commit);
    the pipelined way is :meth:`stage`, then :meth:`reads` and :meth:`writes` on a
    connection in pipeline mode, in the transaction of the group commit."""

    @abstractmethod
    def stage(self) -> bool:
        """Whether this write can run pipelined now (called once, before any statement)."""

    @abstractmethod
    def reads(self, conn: PgConn) -> None:
        """Queue the statements whose rows :meth:`writes` needs; fetch nothing."""

    @abstractmethod
    def writes(self, conn: PgConn) -> T:
        """Fetch the reads, queue the writes (fetching nothing after them); the answer,
        given to the caller only once the transaction committed."""

    @abstractmethod
    def __call__(self, conn: PgConn) -> T:
        """The checked way: all of it, in the caller's (savepoint of a) transaction."""


class Nothing(Staged[None]):
    """A write of nothing: the commit it asks for carries the rider's records."""

    def stage(self) -> bool:
        return True

    def reads(self, conn: PgConn) -> None:
        return None

    def writes(self, conn: PgConn) -> None:
        return None

    def __call__(self, conn: PgConn) -> None:
        return None


NOTHING = Nothing()


def commit_pipelined(
    db: PgDb, ops: Sequence[Staged[Any]], rider: Rider | None, taken: list[Any]
) -> list[Any] | None:
    """Each op's answer once committed in one pipelined transaction; None if nothing was
    committed and the ops should run the checked way (a statement failed, or the
    connection was lost before ``COMMIT`` was sent). :class:`Unreachable` when no
    connection came in time, or one was lost after ``COMMIT`` was sent (it may have gone
    through: nobody may be told it did)."""
    try:
        with db.pool.connection() as conn:
            return _run(conn, ops, rider, taken)
    except PoolTimeout as exc:
        raise Unreachable(exc) from exc


class Unreachable(Exception):
    """No connection, or the one in use broke after ``COMMIT`` was sent (see
    :func:`commit_pipelined`); ``error`` is psycopg's."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _run(
    conn: PgConn, ops: Sequence[Staged[Any]], rider: Rider | None, taken: list[Any]
) -> list[Any] | None:
    conn.autocommit = True
    sent = False
    try:
        with conn.pipeline():
            conn.execute(b"BEGIN", prepare=False)
            for op in ops:
                op.reads(conn)
            values = [op.writes(conn) for op in ops]  # the first fetch: round trip 1
            if rider is not None:
                rider.queue(conn, taken)
            sent = True
            conn.execute(b"COMMIT", prepare=False)
        return values  # the pipeline's sync: round trip 2
    except Exception as exc:
        if sent and conn.broken:  # COMMIT may have reached the server: unknown outcome
            raise Unreachable(exc) from exc
        # A statement failed (the server skipped the rest, COMMIT included), an op raised
        # before COMMIT was queued, or the connection broke before it was: nothing is
        # committed, and the checked way runs the ops again and answers what they raise.
        return None
    finally:
        _idle(conn)


def _idle(conn: PgConn) -> None:
    """Hand ``conn`` back as the pool lends it: out of any transaction, autocommit off."""
    if conn.closed or conn.broken:
        return  # the pool discards it
    try:
        if conn.info.transaction_status != _IDLE:
            conn.execute(b"ROLLBACK", prepare=False)  # a failed one: nothing of it stays
        conn.autocommit = False
    except psycopg.Error:
        conn.close()  # whatever state it is in, it is not lent again


__all__ = ["NOTHING", "Nothing", "Staged", "Unreachable", "commit_pipelined"]
