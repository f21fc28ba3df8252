"""Numbered schema migrations.

``sql/migrations/NNNN_name.sql`` files are applied in order, each in its own
transaction together with its row in ``schema_migrations``, so a crash between two
migrations leaves a consistent, resumable schema. A database newer than this code is
refused rather than written with assumptions that no longer hold.

A migration that rebuilds a table other tables reference (SQLite cannot drop a column
constraint any other way) says ``-- jobctl: foreign_keys=off``: foreign keys are off
while it runs (else dropping the old table would cascade into the referencing rows), and
``PRAGMA foreign_key_check`` must find nothing before it commits.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources

from jobctl.errors import StoreError

_FILE = re.compile(r"^(\d{4})_(\w+)\.sql$")
_FK_OFF = "-- jobctl: foreign_keys=off"


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations(path: str = "sql/migrations") -> list[Migration]:
    """The migrations of one backend (``path`` under ``jobctl.store``), checked 1..N."""
    folder = resources.files("jobctl.store").joinpath(path)
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
    pending = known[version:]
    for i, mig in enumerate(pending):
        with _synced(conn, last=i == len(pending) - 1):
            if _FK_OFF in mig.sql.splitlines():
                fk = conn.execute("PRAGMA foreign_keys").fetchone()[0]
                conn.execute("PRAGMA foreign_keys=OFF")  # a no-op inside a transaction
                try:
                    _apply(conn, mig, check_keys=True)
                finally:
                    conn.execute(f"PRAGMA foreign_keys={int(fk)}")
            else:
                _apply(conn, mig)
    return len(known)


@contextlib.contextmanager
def _synced(conn: sqlite3.Connection, *, last: bool) -> Iterator[None]:
    """Only the last migration of a run waits for the disk: in WAL mode the others commit
    with ``synchronous=NORMAL`` (atomic, not yet flushed), and the last one's flush of the
    WAL makes them all durable at once: one fsync where a fresh database took one per
    migration (a daemon's and every test store's start). A crash before it loses only
    whole migrations, which the next start applies again (each has its own row)."""
    sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    wal = conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    if last or not wal or sync < 2:  # rollback journals stay as they are (NORMAL is not safe)
        yield
        return
    conn.execute("PRAGMA synchronous=NORMAL")
    try:
        yield
    finally:
        conn.execute(f"PRAGMA synchronous={int(sync)}")


def _apply(conn: sqlite3.Connection, mig: Migration, *, check_keys: bool = False) -> None:
    """One migration and its ``schema_migrations`` row in one transaction."""
    statements = [s for s in _split_statements(mig.sql) if s.strip()]
    conn.execute("BEGIN IMMEDIATE")
    try:
        for stmt in statements:
            conn.execute(stmt)
        if check_keys and conn.execute("PRAGMA foreign_key_check").fetchone() is not None:
            raise StoreError(f"migration {mig.version} ({mig.name}) broke a foreign key")
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
