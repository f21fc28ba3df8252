"""Numbered schema migrations.

``sql/migrations/NNNN_name.sql`` files are applied in order, each in its own
transaction together with its row in ``schema_migrations``, so a crash between two
migrations leaves a consistent, resumable schema. A database newer than this code is
refused rather than written with assumptions that no longer hold.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from importlib import resources

from jobctl.errors import StoreError

_FILE = re.compile(r"^(\d{4})_(\w+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations() -> list[Migration]:
    folder = resources.files("jobctl.store").joinpath("sql/migrations")
    found = []
    for entry in folder.iterdir():
        m = _FILE.match(entry.name)
        if m:
            found.append(Migration(int(m.group(1)), m.group(2), entry.read_text()))
    found.sort(key=lambda mig: mig.version)
    if [mig.version for mig in found] != list(range(1, len(found) + 1)):
        raise StoreError("migration files are not numbered 1..N without gaps")
    return found


def current_version(conn: sqlite3.Connection) -> int:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
    )
    row = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()
    return int(row[0] or 0)


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the schema up to date; return the resulting version."""
    version = current_version(conn)
    known = migrations()
    if version > len(known):
        raise StoreError(
            f"database schema version {version} is newer than this jobctl knows "
            f"({len(known)}); upgrade jobctl"
        )
    for mig in known[version:]:
        statements = [s for s in _split_statements(mig.sql) if s.strip()]
        conn.execute("BEGIN IMMEDIATE")
        try:
            for stmt in statements:
                conn.execute(stmt)
            conn.execute(
                "INSERT INTO schema_migrations VALUES (?, ?, datetime('now'))",
                (mig.version, mig.name),
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return len(known)


def _split_statements(sql: str) -> list[str]:
    """Split a script into complete statements (triggers contain ``;`` themselves)."""
    out, buf = [], ""
    for line in sql.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf)
            buf = ""
    if buf.strip():
        out.append(buf)
    return out
