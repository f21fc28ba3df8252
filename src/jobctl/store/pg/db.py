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
import random
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from jobctl.domain.clock import Clock
from jobctl.domain.dispatch import Fairness
from jobctl.domain.quota import Limits
from jobctl.domain.workers import DEFAULT_LEASE_TTL
from jobctl.store import rows
from jobctl.store.pg.groupcommit import GroupCommit, Op, PgConn, Rider, unavailable
from jobctl.store.pg.keepalive import connect_params
from jobctl.store.pg.migrate import migrate
from jobctl.store.queries import load

log = logging.getLogger("jobctl.store")
T = TypeVar("T")

#: Bounds of every statement and of an idle open transaction, per session (seconds).
STATEMENT_TIMEOUT = 10.0
IDLE_IN_TRANSACTION_TIMEOUT = 30.0
#: Seconds to open a connection (a network that drops packets: no hang till TCP gives up).
CONNECT_TIMEOUT = 3
#: Seconds a caller waits for a pooled connection before it is told 503.
POOL_TIMEOUT = 3.0
#: Seconds a failing reconnection is retried before the next caller starts afresh.
RECONNECT_TIMEOUT = 2.0
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


__all__ = ["GroupCommit", "Op", "PgConn", "PgDb", "Rider", "unavailable"]
