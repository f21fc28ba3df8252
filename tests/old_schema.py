"""A database left at an old schema version, for tests of the migrations after it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from jobctl.store.migrate import migrations
from jobctl.store.sqlite import connect


def connect_at(path: Path, version: int) -> sqlite3.Connection:
    """A connection to a new database at ``path`` migrated up to ``version`` only, as an
    older jobctl left it (schema_migrations recorded as :func:`migrate` records it)."""
    conn = connect(str(path))
    conn.execute(
        "CREATE TABLE schema_migrations ("
        " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
    )
    for m in migrations()[:version]:
        conn.executescript(m.sql)
        conn.execute("INSERT INTO schema_migrations VALUES (?, ?, 'x')", (m.version, m.name))
    return conn
