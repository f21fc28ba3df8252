"""A corrupt SQLite file: refused at start-up, a degraded store when found while running.

SQLite reports damage as :class:`sqlite3.DatabaseError` with the primary result code
``SQLITE_CORRUPT`` ("database disk image is malformed") or ``SQLITE_NOTADB`` ("file is
not a database"), from whichever statement first touches a bad page. :func:`is_corruption`
recognises both. At start-up the store turns them into :class:`StoreCorrupt` (one line,
its own exit code); while running, :class:`Health` turns the first one into a *degraded*
store: one log line, every later write refused at once with :class:`StoreCorrupt` (HTTP
503) instead of writing into a damaged file, reads still tried. Nothing clears the state
but a restart on a repaired file (docs/operations.md#a-corrupt-database).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading

from jobctl.errors import StoreCorrupt
from jobctl.logfmt import logval

log = logging.getLogger("jobctl.store")

#: SQLite's primary result codes for a damaged file and for a file that is no database.
SQLITE_CORRUPT = 11
SQLITE_NOTADB = 26
_WORDS = ("malformed", "not a database", "database corruption")
RECOVERY = "see 'A corrupt database' in docs/operations.md"


def is_corruption(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite reporting a damaged database file."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF in (SQLITE_CORRUPT, SQLITE_NOTADB):
        return True
    text = str(exc).lower()
    return any(word in text for word in _WORDS)


def refused_at_start(path: str, why: object) -> StoreCorrupt:
    """The start-up refusal: one line naming the file, the damage and where to read on."""
    return StoreCorrupt(
        f"database {path} is corrupt ({why}); not starting on it: {RECOVERY}", path=path
    )


class Health:
    """The store's corruption state; shared by its writer thread and its readers."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._message: str | None = None
        self._lock = threading.Lock()

    @property
    def degraded(self) -> str | None:
        """Why the store refuses writes (corruption found while running), else None."""
        return self._message

    def refusal(self) -> StoreCorrupt | None:
        """The error every write gets once the store is degraded (None while healthy)."""
        message = self._message
        return None if message is None else StoreCorrupt(message, path=self.path)

    def translate(self, exc: BaseException) -> BaseException:
        """``exc`` unchanged, or the :class:`StoreCorrupt` it means (the first trips the store)."""
        if isinstance(exc, StoreCorrupt) or not is_corruption(exc):
            return exc
        with self._lock:
            if self._message is None:
                self._message = (
                    f"database {self.path} is corrupt ({exc}); the daemon is degraded and "
                    f"refuses writes until it is stopped and the database recovered: {RECOVERY}"
                )
                log.error(
                    "event=store_corrupt db=%s error=%s state=degraded",
                    logval(self.path),
                    logval(str(exc)),
                )
        return StoreCorrupt(self._message, path=self.path)


#: Files up to this size get ``PRAGMA quick_check`` at start (measured: 1.4-1.7 s for a
#: 285 MB store of 1M jobs, docs/reliability.md); larger ones the cheap check only.
QUICK_CHECK_MAX_BYTES = 64 * 1024 * 1024


def check_at_start(conn: sqlite3.Connection, path: str) -> None:
    """Refuse a damaged file before anything is written to it.

    Every file: its header and schema are read (a file that is no database, or whose
    first page is damaged, fails here) and, when no write-ahead log holds newer pages,
    its length is checked against the page count in its header (a truncated file).
    Files up to :data:`QUICK_CHECK_MAX_BYTES` are also read whole by ``PRAGMA
    quick_check`` (every page of every table and index; ``integrity_check`` would also
    cross-check indexes, at about four times the cost). Damage the start-up check did
    not read is found at run time: :class:`Health`.
    """
    try:
        problem = _cheap_check(conn, path)
        if problem is None and os.path.getsize(path) <= QUICK_CHECK_MAX_BYTES:
            first = conn.execute("PRAGMA quick_check(1)").fetchone()
            problem = None if first is not None and first[0] == "ok" else str(first and first[0])
    except sqlite3.DatabaseError as exc:
        if is_corruption(exc):
            raise refused_at_start(path, exc) from None
        raise
    if problem is not None:
        raise refused_at_start(path, problem)


def _cheap_check(conn: sqlite3.Connection, path: str) -> str | None:
    conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    try:
        wal = os.path.getsize(path + "-wal")
    except FileNotFoundError:
        wal = 0
    have = os.path.getsize(path)
    if wal == 0 and have < pages * size:
        return f"the file has {have} bytes, its header says {pages} pages of {size} bytes"
    return None


__all__ = ["Health", "check_at_start", "is_corruption", "refused_at_start"]
