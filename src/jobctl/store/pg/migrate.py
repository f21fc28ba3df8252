"""Numbered migrations of the PostgreSQL backend (``sql/postgres/migrations``).

Each file runs in its own transaction with its row in ``schema_migrations``. Daemons that
start together on one database take a transaction-scoped advisory lock first, so exactly
one applies each migration and the others find it done. A schema newer than this code is
refused, as on SQLite.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import tuple_row

from jobctl.errors import StoreError
from jobctl.store.migrate import migrations

PATH = "sql/postgres/migrations"
#: pg_advisory_xact_lock key of migrations ("jobctl" in ASCII).
LOCK_KEY = 0x6A6F6263746C


def migrate(conn: psycopg.Connection[Any]) -> int:
    """Bring the schema (of the session's search_path) up to date; the resulting version."""
    known = migrations(PATH)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY,"
            " name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())"
        )
        cur = conn.cursor(row_factory=tuple_row)
        row = cur.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()
        version = 0 if row is None else int(row[0])
        if version > len(known):
            raise StoreError(
                f"database schema version {version} is newer than this jobctl "
                f"({len(known)}); upgrade jobctl"
            )
        for mig in known[version:]:
            with conn.transaction():
                conn.execute(mig.sql.encode())
                conn.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                    (mig.version, mig.name),
                )
    return len(known)


__all__ = ["migrate"]
