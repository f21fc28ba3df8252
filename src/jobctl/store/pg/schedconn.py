"""The schedule part on PostgreSQL: :class:`jobctl.store.schedconn.SchedConn` over one
psycopg connection in an open transaction (a group commit's, or a read's).

The schedule logic itself is :mod:`jobctl.store.schedules`, shared with SQLite; what
differs lives in the query file (``sql/postgres/queries.sql``): the materializer locks the
cursors it takes ``FOR UPDATE OF c SKIP LOCKED``, so materializers on several daemons take
disjoint batches, and the cursor compare-and-set and the unique occurrence key stay behind
the lock. A savepoint is ``conn.transaction()`` nested, this backend's one helper.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from jobctl.domain.models import JobSpec
from jobctl.store.base import Inserted
from jobctl.store.inserts import NewJob, Prepared
from jobctl.store.pg import lockorder
from jobctl.store.pg.db import PgConn, PgDb
from jobctl.store.pg.inserts import ITEM_ERRORS, insert_prepared, insert_tx
from jobctl.store.rows import RowLike

#: The keyset pages of schedules (``GET /v1/schedules``): each must walk an index in its
#: order and stop after ``limit`` rows, whatever the table holds.
KEYSET_PAGES = frozenset(
    ("list_schedules", "list_schedules_after", "list_schedules_of", "list_schedules_of_after")
)
#: Planner settings for those reads, for their transaction only. Without statistics (a
#: table never analyzed: autovacuum off, or a bulk import it has not caught up with) the
#: planner guesses a few hundred rows and sorts every schedule of the owner instead of
#: reading the index in order: 0.3-1.1 s a page at 100,000 schedules, 3 ms with these. A
#: parallel plan is refused too: starting workers costs more than a page takes.
_PAGE_PLAN = (
    b"SELECT set_config('enable_sort', 'off', true),"
    b" set_config('max_parallel_workers_per_gather', '0', true)"
)


class PgSchedConn:
    """:class:`jobctl.store.schedconn.SchedConn` on PostgreSQL."""

    item_errors: tuple[type[Exception], ...] = ITEM_ERRORS
    integrity_error: type[Exception] = psycopg.errors.IntegrityError

    def __init__(self, db: PgDb, conn: PgConn) -> None:
        self.db = db
        self.conn = conn

    def rows(self, name: str, params: Mapping[str, Any]) -> list[RowLike]:
        self.plan_for(name)
        return list(self.conn.execute(self.db.q(name), params))

    def plan_for(self, name: str) -> None:
        """The planner settings query ``name`` runs under, in this transaction."""
        if name in KEYSET_PAGES:
            self.conn.execute(_PAGE_PLAN)

    def one(self, name: str, params: Mapping[str, Any] | None = None) -> RowLike | None:
        row: RowLike | None = self.conn.execute(self.db.q(name), params or {}).fetchone()
        return row

    def run(self, name: str, params: Mapping[str, Any]) -> int:
        return self.conn.execute(self.db.q(name), params).rowcount

    def many(self, name: str, params: Sequence[Any]) -> int:
        """A statement written over ``unnest(%s::type[], …)`` runs once, each position's
        values as one array (one round trip: the materializer's cursor advance took 40%
        of its time as a pipelined ``executemany``); any other runs once per set."""
        sql = self.db.q(name)
        if "unnest(" in sql and params and not isinstance(params[0], Mapping):
            return self.conn.execute(sql, [list(col) for col in zip(*params, strict=True)]).rowcount
        with self.conn.cursor() as cur:
            cur.executemany(sql, params)  # rowcount: the sum over the set
            return cur.rowcount

    def tuples(self, name: str, params: Mapping[str, Any]) -> list[Any]:
        with self.conn.cursor(row_factory=tuple_row) as cur:
            return cur.execute(self.db.q(name), params).fetchall()

    def savepoint(self, name: str) -> AbstractContextManager[None]:
        return _savepoint(self.conn)

    def insert_fresh(self, items: Sequence[Prepared], now_ms: int) -> list[NewJob]:
        """The checked insert (one key lookup for the batch); a key another transaction
        inserted after the lookup meets the unique index, and the batch is redone: the
        lookup then finds that job, as SQLite's ``insert_fresh`` falls back."""
        try:
            with self.conn.transaction():
                return insert_prepared(self.db, self.conn, items, now_ms)
        except psycopg.errors.UniqueViolation:
            return insert_prepared(self.db, self.conn, items, now_ms)

    def insert_specs(self, specs: Sequence[JobSpec]) -> list[Inserted]:
        return insert_tx(self.db, self.conn, specs)

    def lock_queues(self, kinds: Iterable[tuple[str, bool]]) -> None:
        """Advisory locks (``lock_queues``), one round trip; READ COMMITTED reads a new
        snapshot at the next statement, so what the caller reads after this sees every
        transaction that held a conflicting lock before it as committed. By the one lock
        order (:mod:`jobctl.store.pg.lockorder`): :class:`OutOfOrder` for a lock it
        could only try and another transaction holds."""
        from jobctl.store.workerq import lock_modes  # it imports the protocol module

        modes = lock_modes(kinds)
        if modes:
            lockorder.check(lockorder.advisory(self.db, self.conn, modes))

    def lock_queue_rows(self, names: Iterable[str]) -> None:
        """The ``queues`` rows of ``names``, in the one lock order (:mod:`.lockorder`)."""
        lockorder.rows(self.db, self.conn, names)


@contextmanager
def _savepoint(conn: PgConn) -> Iterator[None]:
    with conn.transaction():
        yield


__all__ = ["PgSchedConn"]
