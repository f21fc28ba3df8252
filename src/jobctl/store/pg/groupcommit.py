"""The group commit of the PostgreSQL backend: concurrent writes, a batch per transaction.

A few committer threads each take every write waiting at that moment and run them in one
transaction, each write in its own savepoint (``conn.transaction()`` nested: the one
savepoint helper of this backend), and answer them after the commit (a write that needed
a queue lock out of the one lock order, and found it held, gives its savepoint up and
runs again alone after the commit: :mod:`jobctl.store.pg.lockorder`). A batch of
:class:`~jobctl.store.pg.pipelined.Staged` writes runs first as a pipelined commit of one
round trip (:mod:`jobctl.store.pg.pipelined`). Split from :mod:`jobctl.store.pg.db`, which
holds the pools, the sessions' settings and the transactions this runs in.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import psycopg
from psycopg_pool import ConnectionPool

from jobctl.errors import StoreError, StoreUnavailable
from jobctl.store.pg.lockorder import OutOfOrder
from jobctl.store.pg.pipelined import NOTHING, Staged, Unreachable, commit_pipelined
from jobctl.store.pg.rawpipe import Pipe

if TYPE_CHECKING:
    from jobctl.store.pg.db import PgDb

log = logging.getLogger("jobctl.store")
T = TypeVar("T")
PgConn = psycopg.Connection[dict[str, Any]]
Op = Callable[[PgConn], Any]

#: Writes one commit carries at most.
BATCH_MAX = 512
#: Seconds an idle group commit lets its rider's records wait for a write to carry them
#: before it commits them alone (the audit records of the last requests before a lull).
RIDE_EVERY = 0.1


def unavailable(exc: BaseException) -> StoreUnavailable:
    """What a caller is told while the database cannot be reached (restarting, network)."""
    return StoreUnavailable(f"the database is unavailable: {exc}", retry_after=1)


class Rider(Protocol):
    """What rides along with every group commit (the audit trail's queued records).

    ``ride`` runs at the end of each transaction with a list that is empty on the first
    run and keeps what that run took on a retry; ``landed`` is told once whether the
    transaction committed (on False the rider keeps its records for a later one)."""

    def ride(self, conn: PgConn, taken: list[Any]) -> None: ...

    def queue(self, pipe: Pipe, taken: list[Any]) -> None:
        """As :meth:`ride`, in a pipelined commit (:mod:`jobctl.store.pg.pipelined`): its
        statement queued, fetching nothing, in no savepoint (a failure there undoes the
        whole transaction, which then runs the checked way, :meth:`ride` again)."""
        ...

    def waiting(self) -> bool:
        """Whether it holds something to write (an idle group commit then commits it)."""
        ...

    def landed(self, taken: list[Any], ok: bool) -> None: ...


class GroupCommit:
    """Concurrent writes, a batch per transaction (see the module docstring)."""

    def __init__(self, db: PgDb, pools: list[ConnectionPool[PgConn]]) -> None:
        """One committer thread per pool of ``pools``, each writing through its own."""
        self._db = db
        self._queue: queue.SimpleQueue[tuple[Op, Future[Any]] | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(
                target=self._run,
                args=(pool, i == 0),
                name=f"jobctl-pg-commit-{i}",
                daemon=True,
            )
            for i, pool in enumerate(pools)
        ]
        self._closed = False
        #: Carried by every transaction of this group commit (set by the store).
        self.rider: Rider | None = None
        for t in self._threads:
            t.start()

    def submit(self, fn: Callable[[PgConn], T]) -> Future[T]:
        fut: Future[T] = Future()
        if self._closed:
            fut.set_exception(StoreError("the store is closed"))
            return fut
        self._queue.put((fn, fut))
        return fut

    def close(self) -> None:
        self._closed = True
        for _ in self._threads:
            self._queue.put(None)
        for t in self._threads:
            t.join()

    def _run(self, pool: ConnectionPool[PgConn], rides: bool) -> None:
        """Commit what is waiting, batch after batch. The ``rides`` thread also looks at
        the rider every :data:`RIDE_EVERY` seconds while idle, and commits what it holds
        (one thread-pool wake-up per interval while idle, instead of a timer thread started
        per request that found none armed: a tenth of the event loop's time under load)."""
        while True:
            try:
                first = self._queue.get(timeout=RIDE_EVERY if rides else None)
            except queue.Empty:
                if self.rider is not None and self.rider.waiting():
                    self._commit([(NOTHING, Future())], pool)
                continue
            if first is None:
                return
            batch = [first]
            while len(batch) < BATCH_MAX:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)  # this thread stops after the batch
                    break
                batch.append(item)
            self._commit(batch, pool)

    def _commit(self, batch: list[tuple[Op, Future[Any]]], pool: ConnectionPool[PgConn]) -> None:
        """``batch`` in one transaction on ``pool`` (the committer thread's own)."""
        if not self._pipelined(batch, pool):
            self._checked(batch, pool)

    def _checked(self, batch: list[tuple[Op, Future[Any]]], pool: ConnectionPool[PgConn]) -> None:
        """``batch`` the checked way: each write in a savepoint, or alone."""
        if len(batch) == 1:
            self._alone(*batch[0], pool)
            return
        taken: list[Any] = []
        try:
            outcomes = self._db.transaction(
                lambda conn: self._carried(
                    conn, [_in_savepoint(conn, fn) for fn, _ in batch], taken
                ),
                pool,
            )
        except BaseException as exc:  # nothing of the batch is committed
            self.landed(taken, False)
            if len(batch) > 1 and isinstance(exc, psycopg.Error):
                for op in batch:  # one op's failure must not sink the others: alone
                    self._commit([op], pool)
                return
            if isinstance(exc, psycopg.Error):
                log.error("event=pg_commit_failed writes=%d error=%s", len(batch), exc)
            for _, fut in batch:
                _settle(fut, False, exc)
            return
        self.landed(taken, True)
        bounced = []
        for (fn, fut), (ok, value) in zip(batch, outcomes, strict=True):
            if not ok and isinstance(value, OutOfOrder):
                bounced.append((fn, fut))  # its savepoint gave up its locks: alone now
            else:
                _settle(fut, ok, value)
        if bounced:
            log.debug("event=pg_lock_order_bounced writes=%d", len(bounced))
        for fn, fut in bounced:
            self._alone(fn, fut, pool)

    def _pipelined(self, batch: list[tuple[Op, Future[Any]]], pool: ConnectionPool[PgConn]) -> bool:
        """True if ``batch`` was settled by a pipelined commit (one round trip, see
        :mod:`jobctl.store.pg.pipelined`); False if it must run the checked way: a write
        that cannot be pipelined, or a pipelined commit that committed nothing."""
        ops = [fn for fn, _ in batch]
        if not all(isinstance(op, Staged) for op in ops):
            return False
        staged: list[Staged[Any]] = [op for op in ops if isinstance(op, Staged)]
        if sum(op.locks_queues for op in staged) > 1:  # lock_queues_shared's premise
            return False
        if not all([op.stage() for op in staged]):  # every one asked: each takes its items
            return False
        taken: list[Any] = []
        try:
            values = commit_pipelined(pool, staged, self.rider, taken)
        except Unreachable as exc:  # sent, it may have committed
            self.lost(batch, staged, pool, taken, exc)
            return True
        except BaseException as exc:  # nobody's write is known to be stored
            self.landed(taken, False)
            for _, fut in batch:
                _settle(fut, False, exc)
            return True
        self.landed(taken, values is not None)
        if values is None:
            return False
        for (_, fut), value in zip(batch, values, strict=True):
            _settle(fut, True, value)
        return True

    def lost(
        self,
        batch: list[tuple[Op, Future[Any]]],
        staged: list[Staged[Any]],
        pool: ConnectionPool[PgConn],
        taken: list[Any],
        lost: Unreachable,
    ) -> None:
        """A pipelined commit without a connection (503 to every write, as the checked
        way's), or lost once sent: it may have committed. If every write may run again
        (:meth:`Staged.resend`: keyed enqueues, whose keys keep them from being stored
        twice), the batch runs the checked way on a fresh connection, as a checked
        transaction lost before its ``COMMIT`` is retried; else each write is answered
        503, none acknowledged. The rider's records that commit carried count as stored
        only if a write found it had committed (else they go in again later, as after any
        lost commit). The event loop's lost commits come here too, on a thread (it
        blocks): :mod:`jobctl.store.pg.loopcommit`."""
        error = unavailable(lost.error)
        if lost.sent and all([op.resend(error) for op in staged]):  # each one asked
            log.warning("event=pg_pipelined_resent writes=%d error=%s", len(batch), error)
            self._checked(batch, pool)
            self.landed(taken, any(op.found_committed() for op in staged))
            return
        self.landed(taken, False)
        for _, fut in batch:
            _settle(fut, False, error)

    def _alone(self, fn: Op, fut: Future[Any], pool: ConnectionPool[PgConn]) -> None:
        """One write in its own transaction, without a savepoint: its failure rolls back
        that transaction, which holds nothing else (a savepoint and its release are two
        round trips, and under one-at-a-time enqueues most commits carry one write)."""
        taken: list[Any] = []
        try:
            value = self._db.transaction(lambda conn: self._carried(conn, fn(conn), taken), pool)
        except BaseException as exc:  # nothing of it is committed
            self.landed(taken, False)
            if isinstance(
                exc, psycopg.errors.SerializationFailure | psycopg.errors.DeadlockDetected
            ):
                log.error("event=pg_commit_failed writes=1 error=%s", exc)
            if isinstance(exc, OutOfOrder):  # alone, a write takes its locks in order: a bug
                log.error("event=pg_lock_order_broken error=%s", exc)
                exc = StoreError(f"a write broke the queue lock order: {exc}")
            _settle(fut, False, exc)
            return
        self.landed(taken, True)
        _settle(fut, True, value)

    def _carried(self, conn: PgConn, value: T, taken: list[Any]) -> T:
        """``value``, once the rider has written its part in the same transaction."""
        if self.rider is not None:
            self.rider.ride(conn, taken)
        return value

    def landed(self, taken: list[Any], ok: bool) -> None:
        """Tell the rider whether the commit that carried ``taken`` committed."""
        if self.rider is not None and taken:
            self.rider.landed(taken, ok)


def _in_savepoint(conn: PgConn, fn: Op) -> tuple[bool, Any]:
    try:
        with conn.transaction():
            return True, fn(conn)
    except psycopg.OperationalError:
        raise  # the connection, not this op
    except (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected):
        raise  # the whole transaction is retried
    except Exception as exc:
        return False, exc


def _settle(fut: Future[Any], ok: bool, value: Any) -> None:
    if fut.done():  # the caller gave up on it (cancelled): nothing to tell
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


__all__ = ["GroupCommit", "Op", "PgConn", "Rider", "unavailable"]
