"""Numbered schema migrations.

``sql/migrations/NNNN_name.sql`` files are applied in order, each in its own
transaction together with its row in ``schema_migrations``, so a crash between two
migrations leaves a consistent, resumable schema. Foreign keys are off while they run,
as SQLite's procedure for rebuilding a table asks (dropping a parent table would
otherwise cascade to its children), and checked before each commit. A database newer
than this code is refused rather than written with assumptions that no longer hold.
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
    if version == len(known):
        return version
    enforced = conn.execute("PRAGMA foreign_keys").fetchone()[0]
    conn.execute("PRAGMA foreign_keys=OFF")  # a no-op inside a transaction: none is open
    try:
        for mig in known[version:]:
            _apply(conn, mig)
    finally:
        conn.execute(f"PRAGMA foreign_keys={'ON' if enforced else 'OFF'}")
    return len(known)


def _apply(conn: sqlite3.Connection, mig: Migration) -> None:
    statements = [s for s in _split_statements(mig.sql) if s.strip()]
    conn.execute("BEGIN IMMEDIATE")
    try:
        for stmt in statements:
            conn.execute(stmt)
        broken = conn.execute("PRAGMA foreign_key_check").fetchall()
        if broken:
            shown = [tuple(r) for r in broken[:3]]
            raise StoreError(f"migration {mig.version:04d}_{mig.name} breaks foreign keys: {shown}")
        conn.execute(
            "INSERT INTO schema_migrations VALUES (?, ?, datetime('now'))",
            (mig.version, mig.name),
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


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
