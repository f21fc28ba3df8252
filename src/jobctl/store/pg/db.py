"""What every part of the PostgreSQL backend shares: the pool, the group commit, the
named queries and the clock.

Writes go through :class:`GroupCommit`: a few committer threads each take every write
waiting at that moment and run them in one transaction, each write in its own savepoint
(``conn.transaction()`` nested: the one savepoint helper of this backend), and answer
them after the commit (a write that needed a queue lock out of the one lock order, and
found it held, gives its savepoint up and runs again alone after the commit:
:mod:`jobctl.store.pg.lockorder`). A commit costs one fsync on the server however many writes it
carries, so concurrent enqueues do not queue behind each other's commits. A batch of
:class:`~jobctl.store.pg.pipelined.Staged` writes (single-job enqueues) runs first as a
pipelined commit of one round trip, without savepoints, and the checked way above only if
that committed nothing (:mod:`jobctl.store.pg.pipelined`). Reads run in their own short
transactions on the pool.

Each committer thread writes through a connection of its own (a pool of one), not the
main pool: the striped counters (:mod:`jobctl.store.pg.counts`) keep a stripe per server
process, and the main pool hands its connections out in turn, so a daemon's writes went
through every one of them (about 10 stripes per daemon between folds, and every claim
and ``status`` sums them all). Now a daemon writes at most ``committers`` stripes.

A database that cannot be reached answers fast: a connection is given up after
:data:`CONNECT_TIMEOUT`, a caller waits at most :data:`POOL_TIMEOUT` for one, and either
is :class:`StoreUnavailable` (HTTP 503 with ``Retry-After``), never a request hung for the
pool's default 30 s. A transaction that met a connection the server had closed
(restarted, or ``pg_terminate_backend``) before its commit was sent is run again on a
fresh one; one lost during the commit is not (it may have gone through): its caller is
told 503, and nothing it sent was acknowledged. A pipelined commit sends its ``COMMIT``
with everything else; lost, it is run again the checked way only when every write of it
is safe to send twice (keyed enqueues: :mod:`jobctl.store.pg.resend`).

Each session sets ``statement_timeout`` and ``idle_in_transaction_session_timeout`` (a
hung statement or a forgotten transaction cannot hold a lease-critical path) and
``synchronous_commit = on`` (an answer means the change is durable on the server).
Every connection has TCP keepalives and ``tcp_user_timeout`` sized from the lease TTL
(:mod:`jobctl.store.pg.keepalive`): a network that drops packets silently is noticed
before a lease is lost to it.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from jobctl.domain.clock import Clock
from jobctl.domain.dispatch import Fairness
from jobctl.domain.quota import Limits
from jobctl.domain.workers import DEFAULT_LEASE_TTL
from jobctl.errors import StoreError, StoreUnavailable
from jobctl.store import rows
from jobctl.store.pg.keepalive import connect_params
from jobctl.store.pg.lockorder import OutOfOrder
from jobctl.store.pg.migrate import migrate
from jobctl.store.pg.pipelined import NOTHING, Staged, Unreachable, commit_pipelined
from jobctl.store.pg.rawpipe import Pipe
from jobctl.store.queries import load

log = logging.getLogger("jobctl.store")
T = TypeVar("T")
PgConn = psycopg.Connection[dict[str, Any]]
Op = Callable[[PgConn], Any]

#: Bounds of every statement and of an idle open transaction, per session (seconds).
STATEMENT_TIMEOUT = 10.0
IDLE_IN_TRANSACTION_TIMEOUT = 30.0
#: Seconds to open a connection (a network that drops packets: no hang till TCP gives up).
CONNECT_TIMEOUT = 3
#: Seconds a caller waits for a pooled connection before it is told 503.
POOL_TIMEOUT = 3.0
#: Seconds a failing reconnection is retried before the next caller starts afresh.
RECONNECT_TIMEOUT = 2.0
#: Writes one commit carries at most.
BATCH_MAX = 512
#: Seconds an idle group commit lets its rider's records wait for a write to carry them
#: before it commits them alone (the audit records of the last requests before a lull).
RIDE_EVERY = 0.1
#: Connections of the leases' own pool (heartbeats).
LEASE_POOL = 2
#: A transaction whose connection the server had closed before the commit is run again
#: this many times at most (connections in use elsewhere at the time come back dead too).
LOST_RETRIES = 3
#: A serialization failure or a deadlock is retried this many times.
RETRIES = 5


def _queries() -> dict[str, str]:
    return load("sql/postgres/queries.sql", "%s")


class PgDb:
    """One PostgreSQL database (or one schema of it, for tests and side-by-side set-ups)."""

    def __init__(
        self,
        dsn: str,
        clock: Clock,
        rng: random.Random | None = None,
        *,
        schema: str | None = None,
        pool_size: int = 8,
        committers: int = 2,
        lease_ttl: float = DEFAULT_LEASE_TTL,
    ) -> None:
        self.dsn = dsn
        #: libpq parameters of every connection beside the DSN (keepalives): the pools'
        #: and the listener's.
        self.connect_params = connect_params(dsn, lease_ttl)
        self.clock = clock
        self.rng = rng or random.Random()
        self.schema = schema
        #: The LISTEN/NOTIFY channel of this database (and schema: side by side, apart).
        self.channel = "jobctl_wake" + ("" if schema is None else "_" + schema)
        self.fairness = Fairness()
        self.fairness_lock = threading.Lock()
        self.quota: Callable[[int], Limits] | None = None
        self._queries = _queries()
        self.pool = self._pool(dsn, pool_size, "jobctl")
        #: Leases' own small pool: heartbeats are never starved by a busy main pool (a
        #: lease that cannot be renewed in time is lost, and its command stopped).
        self.lease_pool = self._pool(dsn, LEASE_POOL, "jobctl-leases")
        #: One connection per committer thread: a daemon's group commits write at most
        #: ``committers`` counter stripes (see the module docstring).
        self.commit_pools = [self._pool(dsn, 1, f"jobctl-commit-{i}") for i in range(committers)]
        pools = [self.pool, self.lease_pool, *self.commit_pools]
        try:
            for pool in pools:
                pool.open(wait=True, timeout=10)
            with self.pool.connection() as conn:
                migrate(conn)
        except BaseException:
            for pool in pools:
                pool.close()
            raise
        self.commits = GroupCommit(self, self.commit_pools)
        #: The event loop's own connection (:mod:`jobctl.store.pg.loopcommit`), opened on
        #: first use only: a store that no event loop drives holds no such connection.
        self.loop_pool: ConnectionPool[PgConn] | None = None
        #: The connection of this thread's :meth:`together`, if it is inside one.
        self._held = threading.local()

    def _pool(self, dsn: str, size: int, name: str) -> ConnectionPool[PgConn]:
        return ConnectionPool(
            dsn,
            min_size=1,
            max_size=size,
            kwargs={
                "row_factory": dict_row,
                "autocommit": False,
                "connect_timeout": CONNECT_TIMEOUT,
                **self.connect_params,
            },
            configure=self._configure,
            timeout=POOL_TIMEOUT,
            # give up a failing reconnection soon: the next caller starts a fresh one at
            # once, instead of the pool's backoff (1, 2, 4, 8 s…) delaying the recovery
            reconnect_timeout=RECONNECT_TIMEOUT,
            open=False,
            name=name,
        )

    def _configure(self, conn: PgConn) -> None:
        conn.autocommit = True
        if self.schema is not None:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
        conn.execute(f"SET statement_timeout = {int(STATEMENT_TIMEOUT * 1000)}")
        timeout = int(IDLE_IN_TRANSACTION_TIMEOUT * 1000)
        conn.execute(f"SET idle_in_transaction_session_timeout = {timeout}")
        conn.execute("SET synchronous_commit = on")
        conn.autocommit = False

    def open_loop_pool(self) -> ConnectionPool[PgConn]:
        """:attr:`loop_pool`, opening it in the background if it is not yet: never waits
        for the server (the event loop calls it; its first lends find no connection)."""
        if self.loop_pool is None:
            self.loop_pool = self._pool(self.dsn, 1, "jobctl-loop")
            self.loop_pool.open(wait=False)
        return self.loop_pool

    def q(self, name: str) -> str:
        """The SQL text of query ``name`` of ``sql/postgres/queries.sql``."""
        return self._queries[name]

    def now_ms(self) -> int:
        return rows.to_ms(self.clock.now())

    def write(self, fn: Callable[[PgConn], T]) -> T:
        """Run ``fn`` in the next group commit; its answer once that is committed."""
        return self.submit(fn).result()

    def submit(self, fn: Callable[[PgConn], T]) -> Future[T]:
        return self.commits.submit(fn)

    def read(self, fn: Callable[[PgConn], T]) -> T:
        """Run ``fn`` in a transaction of its own (see :meth:`transaction`), or in the
        transaction of :meth:`together` when this thread is inside one."""
        held: PgConn | None = getattr(self._held, "conn", None)
        return fn(held) if held is not None else self.transaction(fn)

    def together(self, fn: Callable[[], T]) -> T:
        """``fn()``, whose :meth:`read` calls on this thread all run in one transaction
        on one connection: a BEGIN, a COMMIT and a pool checkout for all of them, not
        each (``status`` makes a dozen reads; on a loaded host every trip to the server
        waits for it to be scheduled). Retried whole as :meth:`transaction` is."""

        def run(conn: PgConn) -> T:
            self._held.conn = conn
            try:
                return fn()
            finally:
                self._held.conn = None

        if getattr(self._held, "conn", None) is not None:
            return fn()  # already inside one
        return self.transaction(run)

    def lease_write(self, fn: Callable[[PgConn], T]) -> T:
        """``fn`` in its own transaction on the leases' pool, outside the group commit."""
        return self.transaction(fn, self.lease_pool)

    def transaction(
        self, fn: Callable[[PgConn], T], pool: ConnectionPool[PgConn] | None = None
    ) -> T:
        """``fn`` in one transaction on a pooled connection, retried whole on a
        serialization failure or deadlock, and (up to :data:`LOST_RETRIES` times) on a
        connection the server had closed
        before the commit was sent (nothing of it was committed: safe to repeat; the
        pool's other idle connections are checked first, as they were likely closed too).
        A database that cannot be reached is :class:`StoreUnavailable` (503)."""
        pool = pool or self.pool
        lost = 0
        for attempt in range(RETRIES):
            conn: PgConn | None = None
            committing = False
            try:
                with pool.connection() as conn:
                    with conn.transaction():
                        out = fn(conn)
                        committing = True
                    return out
            except (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected) as exc:
                # logged: a deadlock here costs deadlock_timeout (1 s), and the lock order
                # (lockorder) means there should be none on queue locks (tests count them)
                log.warning("event=pg_retry attempt=%d error=%s", attempt + 1, type(exc).__name__)
                if attempt == RETRIES - 1:
                    raise
            except psycopg.OperationalError as exc:
                if lost == LOST_RETRIES or committing or conn is None or not conn.broken:
                    raise unavailable(exc) from exc
                lost += 1
                pool.check()
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.commits.close()
        self.pool.close()
        self.lease_pool.close()
        for pool in self.commit_pools:
            pool.close()
        if self.loop_pool is not None:
            self.loop_pool.close()


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


__all__ = ["GroupCommit", "PgConn", "PgDb", "Rider", "unavailable"]
