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
from jobctl.store.pg.db import PgConn, PgDb
from jobctl.store.pg.inserts import ITEM_ERRORS, insert_prepared, insert_tx
from jobctl.store.rows import RowLike


class PgSchedConn:
    """:class:`jobctl.store.schedconn.SchedConn` on PostgreSQL."""

    item_errors: tuple[type[Exception], ...] = ITEM_ERRORS
    integrity_error: type[Exception] = psycopg.errors.IntegrityError

    def __init__(self, db: PgDb, conn: PgConn) -> None:
        self.db = db
        self.conn = conn

    def rows(self, name: str, params: Mapping[str, Any]) -> list[RowLike]:
        return list(self.conn.execute(self.db.q(name), params))

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
        transaction that held a conflicting lock before it as committed."""
        from jobctl.store.workerq import lock_modes  # it imports the protocol module

        modes = lock_modes(kinds)
        if modes:
            params = {"names": [n for n, _ in modes], "exclusive": [x for _, x in modes]}
            self.conn.execute(self.db.q("lock_queues"), params)


@contextmanager
def _savepoint(conn: PgConn) -> Iterator[None]:
    with conn.transaction():
        yield


__all__ = ["PgSchedConn"]
