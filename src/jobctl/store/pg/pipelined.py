"""A group commit in one round trip: the hot path of single-job enqueues on PostgreSQL.

A write that can say up front which statements it will send (a :class:`Staged` write:
single-job enqueues, keyed or not, the audit trail's flush) runs in one pipeline with ``BEGIN`` and
``COMMIT`` sent as statements of their own: ``BEGIN``, every write's statements, the
audit rows riding along and ``COMMIT`` go out together, and the answers come back
together, one round trip. No savepoints: in a pipeline the server skips every statement
after a failed one until the next sync, ``COMMIT`` included, so one failure leaves
nothing committed; the group commit then runs the same writes the checked way
(:class:`jobctl.store.pg.groupcommit.GroupCommit`: savepoints, one write's failure answered to it
alone), and nobody was answered before. A write that finds it must be answered the
checked way (a job for a worker queue, an owner past the ``queued`` quota) makes its own
statement fail, for the same effect.

Why: the checked way costs five round trips per commit (``BEGIN``, the reads, savepoint
+ ``INSERT`` + release, the audit's savepoint + ``INSERT`` + release, ``COMMIT``), and on
a loaded host each one waits for the server process and then for the committer thread to
be scheduled; the two round trips of branch ``pgenq`` (the reads, then the writes) are
one since the writes read what they need themselves (issue 15's benchmark,
docs/benchmarks.md "PostgreSQL single-job enqueue").

A connection lost during the round trip may have committed (``COMMIT`` went out with the
rest, and the server answers nothing before it has run everything): every write of the
batch is then :class:`Unreachable` (503), none acknowledged, unless every write can run
again safely (:meth:`Staged.resend`: enqueues whose jobs all carry keys, which the unique
index keeps from being stored twice): the batch then runs the checked way on a fresh
connection, as the checked way's own transaction does when its connection is lost before
its ``COMMIT`` (:class:`jobctl.store.pg.groupcommit.GroupCommit`, :mod:`jobctl.store.pg.resend`).

A connection the server hung up on while it sat in the pool (a restart,
``pg_terminate_backend``, a timeout: its farewell or end of stream waits on the socket)
is not used: it is dropped and the batch runs on another (:func:`hung_up`).

The statements go through libpq itself (:mod:`jobctl.store.pg.rawpipe`), not through
psycopg's cursors, which cost the committer thread about half a millisecond per commit;
psycopg never sees them, and the connection is handed back to the pool as it was lent:
out of pipeline mode, idle.
"""

from __future__ import annotations

import contextlib
import select
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import psycopg
from psycopg import pq
from psycopg_pool import PoolTimeout

from jobctl.store.pg.rawpipe import Broken, Failed, Pipe

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

    from jobctl.store.pg.db import PgConn, Rider

T = TypeVar("T")
_IDLE = pq.TransactionStatus.IDLE
#: Seconds a pipelined commit waits for its answers before the connection is taken as
#: broken (the sessions' ``statement_timeout`` ends any statement sooner).
ANSWER_WAIT = 15.0
#: Pooled connections found hung up that one commit drops before it goes the checked way
#: (whose transaction reconnects): after a server restart every idle one has.
HUNG_UP_MAX = 3


class Staged(ABC, Generic[T]):
    """A group-commit write that can be pipelined (see the module docstring).

    Calling it is the checked way (its statements in a savepoint of the group commit);
    the pipelined way is :meth:`stage`, then :meth:`queue` on a connection in pipeline
    mode, in the transaction of the group commit, and :meth:`answer` once it committed."""

    #: Whether :meth:`queue` sends queue locks. A pipelined commit carries one such write
    #: at most (:class:`jobctl.store.pg.groupcommit.GroupCommit`): its one statement of
    #: locks is then the transaction's only one, in order by itself
    #: (:mod:`jobctl.store.pg.lockorder`), without the cost of the ordering rule that
    #: statements after others need.
    locks_queues = False

    @abstractmethod
    def stage(self) -> bool:
        """Whether this write can run pipelined now (called once, before any statement)."""

    @abstractmethod
    def queue(self, pipe: Pipe) -> None:
        """Queue the write's statements; fetch nothing (the round trip is the commit's)."""

    @abstractmethod
    def answer(self) -> T:
        """The answer, from the results of :meth:`queue`'s statements, once committed."""

    @abstractmethod
    def __call__(self, conn: PgConn) -> T:
        """The checked way: all of it, in the caller's (savepoint of a) transaction."""

    def resend(self, error: Exception) -> bool:
        """Whether this write may run again the checked way, on a fresh connection, after
        its pipelined commit was lost once sent (:class:`Unreachable`: it may have
        committed). Only a write whose second run stores nothing twice and answers what
        the first would have may say so (keyed enqueues: :mod:`jobctl.store.pg.resend`);
        it may answer ``error`` (503) itself to those of its callers it cannot run again,
        and keep the others. By default no: the whole batch is answered ``error``."""
        return False

    def found_committed(self) -> bool:
        """After the run that :meth:`resend` allowed: whether it found that the lost
        commit had gone through (then the rider's records it carried are stored too);
        False when it cannot tell."""
        return False


class Nothing(Staged[None]):
    """A write of nothing: the commit it asks for carries the rider's records."""

    def stage(self) -> bool:
        return True

    def queue(self, pipe: Pipe) -> None:
        return None

    def answer(self) -> None:
        return None

    def __call__(self, conn: PgConn) -> None:
        return None

    def resend(self, error: Exception) -> bool:
        return True  # it writes nothing: twice is as once


NOTHING = Nothing()


def commit_pipelined(
    pool: ConnectionPool[PgConn],
    ops: Sequence[Staged[Any]],
    rider: Rider | None,
    taken: list[Any],
) -> list[Any] | None:
    """Each op's answer once committed in one pipelined transaction on ``pool`` (the
    committer thread's own); None if nothing was committed and the ops should run the
    checked way (a statement failed, or every connection lent had hung up).
    :class:`Unreachable` when no connection came in time, or the one in use broke during
    the round trip (it may have committed: nobody may be told it did)."""
    try:
        for _ in range(HUNG_UP_MAX):
            with pool.connection() as conn:
                if not hung_up(conn):
                    return _run(conn, ops, rider, taken)
                conn.close()  # the pool drops it, and the others the server left
            pool.check()
    except PoolTimeout as exc:
        raise Unreachable(exc, sent=False) from exc
    return None


class Unreachable(Exception):
    """No connection, or the one in use broke during the round trip (see
    :func:`commit_pipelined`); ``error`` is psycopg's, ``sent`` whether the transaction
    went out (then it may have committed; else nothing was sent, and a second try would
    only wait for a connection again)."""

    def __init__(self, error: Exception, sent: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.sent = sent


def hung_up(conn: PgConn) -> bool:
    """Whether the server has ended this idle connection: it sends a ``FATAL`` and closes,
    and either one leaves the socket readable, where nothing else arrives unasked on a
    pool's connection (no ``LISTEN``). A poll of the socket, no round trip: the whole transaction
    is sent at once, and one sent to a dead connection cannot be told from one lost after
    it committed."""
    if conn.closed:
        return True
    poll = select.poll()
    poll.register(conn.fileno(), select.POLLIN)
    return bool(poll.poll(0))


def _run(
    conn: PgConn, ops: Sequence[Staged[Any]], rider: Rider | None, taken: list[Any]
) -> list[Any] | None:
    pipe = queue_all(conn, ops, rider, taken)
    if pipe is None:
        return None
    try:
        pipe.run()  # everything goes out at once with the sync: the round trip
    except Failed:
        # A statement failed: the server skipped the rest, COMMIT included; nothing is
        # committed, and the checked way runs the ops again and answers what they raise.
        idle(conn, pipe, sent=True)
        return None
    except Exception as exc:  # Broken, or anything unforeseen: COMMIT went out with the
        conn.close()  # rest and may have run; the connection is not lent again
        raise Unreachable(exc, sent=True) from exc
    idle(conn, pipe, sent=True)
    return [op.answer() for op in ops]


def queue_all(
    conn: PgConn, ops: Sequence[Staged[Any]], rider: Rider | None, taken: list[Any]
) -> Pipe | None:
    """``conn`` in pipeline mode with the transaction of ``ops`` and the rider's records
    queued (``BEGIN`` … ``COMMIT``), not sent; None if an op could not queue its
    statements (then nothing was committed and ``conn`` is idle again)."""
    conn.pgconn.enter_pipeline_mode()
    pipe = Pipe(conn, ANSWER_WAIT)
    try:
        pipe.execute("BEGIN")
        for op in ops:
            op.queue(pipe)
        if rider is not None:
            rider.queue(pipe, taken)
        pipe.execute("COMMIT")
    except Exception:
        # An op could not queue its statements (a value with no text form, say): COMMIT
        # was not queued, so nothing commits; the checked way runs the ops again and
        # answers what they raise.
        idle(conn, pipe, sent=False)
        return None
    return pipe


def idle(conn: PgConn, pipe: Pipe, sent: bool) -> None:
    """Hand ``conn`` back as the pool lends it: out of pipeline mode and of any
    transaction, as psycopg left it (psycopg never saw this commit's statements)."""
    if conn.closed or conn.broken:
        return  # the pool discards it
    try:
        if not sent:  # queued, not sent: send it with the sync, so that its end is known
            with contextlib.suppress(Failed):
                pipe.run()
        conn.pgconn.exit_pipeline_mode()
        # A failed one: nothing of it stays. Through libpq, not psycopg, which would
        # answer a ROLLBACK with DEALLOCATE ALL, our prepared statements included.
        if (
            conn.info.transaction_status != _IDLE
            and conn.pgconn.exec_(b"ROLLBACK").status != pq.ExecStatus.COMMAND_OK
        ):
            conn.close()
    except (Broken, psycopg.Error):
        conn.close()  # whatever state it is in, it is not lent again


__all__ = [
    "NOTHING",
    "Nothing",
    "Staged",
    "Unreachable",
    "commit_pipelined",
    "hung_up",
    "idle",
    "queue_all",
]
