"""Raw SQL on either backend's store, for tests that set up a state no API call makes
(a broken mark, a poisoned template). Write the statement with SQLite's ``?``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jobctl.store.base import Store
from jobctl.store.sqlite import SqliteStore


def raw_write(store: Store, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Run ``sql`` in a write transaction of ``store``; the rows it returned."""
    if isinstance(store, SqliteStore):
        return store.db.writer.call(lambda c: [tuple(r) for r in c.execute(sql, params)])
    from jobctl.store.pg.store import PostgresStore

    assert isinstance(store, PostgresStore), type(store)

    def tx(conn: Any) -> list[tuple[Any, ...]]:
        cur = conn.execute(sql.replace("?", "%s"), params)
        return [tuple(r.values()) for r in cur] if cur.description else []

    return store.db.write(tx)
