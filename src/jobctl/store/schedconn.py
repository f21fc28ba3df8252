"""What the schedule part of the store needs of a backend's open transaction.

The schedule logic (:mod:`jobctl.store.schedules`, :mod:`jobctl.store.materialize`,
:mod:`jobctl.store.schedule_edit`) is written once, against :class:`SchedConn`: named
statements run by name (each backend's query file holds the same names with its own
placeholders and locking clauses), a savepoint, and the two job inserts a schedule makes
(a batch of occurrence rows, a manual occurrence). :class:`SqliteSchedConn` is SQLite's;
PostgreSQL's is :class:`jobctl.store.pg.schedconn.PgSchedConn`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

from jobctl.domain.models import JobSpec
from jobctl.store.base import Inserted
from jobctl.store.inserts import ITEM_ERRORS, NewJob, Prepared, insert_fresh
from jobctl.store.queries import q
from jobctl.store.rows import RowLike
from jobctl.store.sqltx import savepoint

T = TypeVar("T")


class SchedConn(Protocol):
    """One open write (or read) transaction of a backend, as the schedule logic uses it."""

    #: Errors one row brings on itself (a CHECK, a unique name): the item fails alone.
    item_errors: tuple[type[Exception], ...]
    #: A constraint violation (a name or id taken by a concurrent insert).
    integrity_error: type[Exception]

    def rows(self, name: str, params: Mapping[str, Any]) -> list[RowLike]:
        """Every row of statement ``name``, each readable by column name."""
        ...

    def one(self, name: str, params: Mapping[str, Any] | None = None) -> RowLike | None:
        """The first row of statement ``name``, or None."""
        ...

    def run(self, name: str, params: Mapping[str, Any]) -> int:
        """Run a write; the number of rows it changed."""
        ...

    def many(self, name: str, params: Sequence[Any]) -> int:
        """Run a write once per parameter set; the rows changed in all."""
        ...

    def tuples(self, name: str, params: Mapping[str, Any]) -> list[Any]:
        """Every row of statement ``name`` as a plain tuple (the materializer's lean rows)."""
        ...

    def savepoint(self, name: str) -> AbstractContextManager[None]:
        """A nested unit of work: its failure undoes it alone."""
        ...

    def insert_fresh(self, items: Sequence[Prepared], now_ms: int) -> list[NewJob]:
        """Insert prepared job rows whose keys are all but certainly new (occurrences);
        a key that exists after all answers its job, as a checked insert would."""
        ...

    def insert_specs(self, specs: Sequence[JobSpec]) -> list[Inserted]:
        """Insert jobs as ``Store.insert`` does (a manual occurrence)."""
        ...

    def lock_queues(self, kinds: Iterable[tuple[str, bool]]) -> None:
        """Hold the queues of these jobs (queue, is a payload job) until the transaction
        ends: what keeps a queue to one kind of job when several writers check and write
        it at once (:func:`jobctl.store.workerq.lock`). One writer needs none."""
        ...

    def lock_queue_rows(self, names: Iterable[str]) -> None:
        """Hold the ``queues`` rows of ``names`` (whose queue locks this transaction holds
        exclusive) until the transaction ends, in name order: PostgreSQL's lock order
        (:mod:`jobctl.store.pg.lockorder`). One writer needs none."""
        ...


class ScheduleDb(Protocol):
    """What the schedule part needs of a backend's database object."""

    def read(self, fn: Callable[[Any], T]) -> T: ...

    def write(self, fn: Callable[[Any], T]) -> T: ...


class SqliteSchedConn:
    """:class:`SchedConn` over one SQLite connection (inside the writer or a reader)."""

    item_errors: tuple[type[Exception], ...] = ITEM_ERRORS
    integrity_error: type[Exception] = sqlite3.IntegrityError

    def __init__(
        self,
        conn: sqlite3.Connection,
        insert_specs: Callable[[sqlite3.Connection, Sequence[JobSpec]], list[Inserted]],
    ) -> None:
        self.conn = conn
        self._insert_specs = insert_specs

    def rows(self, name: str, params: Mapping[str, Any]) -> list[RowLike]:
        return list(self.conn.execute(q(name), params))

    def one(self, name: str, params: Mapping[str, Any] | None = None) -> RowLike | None:
        row: RowLike | None = self.conn.execute(q(name), params or {}).fetchone()
        return row

    def run(self, name: str, params: Mapping[str, Any]) -> int:
        return self.conn.execute(q(name), params).rowcount

    def many(self, name: str, params: Sequence[Any]) -> int:
        return self.conn.executemany(q(name), params).rowcount

    def tuples(self, name: str, params: Mapping[str, Any]) -> list[Any]:
        cur = self.conn.cursor()
        cur.row_factory = None  # plain tuples: only a few columns matter here
        return cur.execute(q(name), params).fetchall()

    def savepoint(self, name: str) -> AbstractContextManager[None]:
        return savepoint(self.conn, name)

    def insert_fresh(self, items: Sequence[Prepared], now_ms: int) -> list[NewJob]:
        return insert_fresh(self.conn, items, now_ms)

    def insert_specs(self, specs: Sequence[JobSpec]) -> list[Inserted]:
        return self._insert_specs(self.conn, specs)

    def lock_queues(self, kinds: Iterable[tuple[str, bool]]) -> None:
        """Nothing to do: SQLite's writes are one at a time (``BEGIN IMMEDIATE``), so a
        check and the write after it see no other writer in between."""

    def lock_queue_rows(self, names: Iterable[str]) -> None:
        """Nothing to do: one writer never waits for another's lock while holding one."""


__all__ = ["SchedConn", "ScheduleDb", "SqliteSchedConn"]
