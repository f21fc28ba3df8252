"""The SQLite backend's one savepoint helper.

Every nested unit of work in the writer's transaction (an op of a group commit, an
insert group, a batch of occurrences, the audit rows riding along) runs in a savepoint,
so that its failure undoes it alone and the transaction goes on. Spelled once here,
instead of a ``SAVEPOINT`` / ``ROLLBACK TO`` / ``RELEASE`` triple at each place.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from types import TracebackType


class savepoint:
    """``with savepoint(conn, name):`` runs the block in ``SAVEPOINT name``.

    On an exception the block's changes are rolled back (the savepoint is released, the
    enclosing transaction stays open) and the exception propagates; the caller decides
    what it means. When the transaction itself is lost (SQLite ended it, say on a full
    disk; or ``lost(exc)`` says so), nothing is rolled back here: the enclosing
    transaction's owner rolls it all back, and the original error is what propagates.

    A class, not a generator context manager: it runs once per op of every commit.
    """

    __slots__ = ("_conn", "_lost", "_release", "_rollback", "_start")

    def __init__(
        self,
        conn: sqlite3.Connection,
        name: str,
        lost: Callable[[BaseException], object] | None = None,
    ) -> None:
        if not name.isidentifier():
            raise ValueError(f"savepoint name must be an identifier: {name!r}")
        self._conn = conn
        self._lost = lost
        self._start = "SAVEPOINT " + name
        self._rollback = "ROLLBACK TO " + name
        self._release = "RELEASE " + name

    def __enter__(self) -> None:
        self._conn.execute(self._start)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self._conn.execute(self._release)
            return
        if not isinstance(exc, Exception) or (self._lost is not None and self._lost(exc)):
            return  # the whole transaction is being abandoned: its owner rolls it back
        if not self._conn.in_transaction:
            return  # SQLite already rolled the transaction back
        try:
            self._conn.execute(self._rollback)
            self._conn.execute(self._release)
        except sqlite3.Error:
            return  # the transaction is beyond saving: ``exc`` says why, not this


__all__ = ["savepoint"]
