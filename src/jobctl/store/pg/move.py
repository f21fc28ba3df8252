"""Moving a single host's SQLite store into a PostgreSQL database (``jobctl store migrate``).

Why it is safe to switch over:

* **Nothing fires twice.** Jobs keep their ids, keys and occurrence keys
  (``<schedule-id>@<nominal>``), schedules their ids and cursors (``next_run_at``,
  ``waiting``, ``last_job_id``). The first materializer on PostgreSQL starts where the
  SQLite one stopped, and an occurrence already fired meets its job's key.
* **No id is reused.** ``jobs_id_seq`` is set past both the highest job id in the file
  and SQLite's ``job_id_high`` (the highest id ever given, pruned jobs included); the
  audit, skip and edit sequences past their highest ids.
* **All or nothing.** Every row goes in one PostgreSQL transaction, with the tables
  locked: a failure (a row PostgreSQL refuses, the connection lost, Ctrl-C) leaves the
  target as it was. Rows go in with ``COPY`` (one stream per table), so a million jobs
  move in minutes, not hours.
* **One writer.** The SQLite file is locked as a daemon locks it (:mod:`jobctl.store.dblock`):
  a daemon running on it refuses the move, and no daemon can start on it meanwhile. A
  target with rows is refused unless ``force`` (which empties it first, in the same
  transaction), and so is a target some daemon is live on, forced or not.

Counters (``job_counts``, ``log_usage``, ``schedule_counts``) are recomputed from the moved
rows rather than copied. Not moved: ``job_id_high`` (it becomes ``jobs_id_seq``) and
``schema_migrations`` (each backend has its own).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from jobctl.config import shown_db
from jobctl.errors import Conflict, InvalidInput, NotFound, StoreError
from jobctl.store import migrate as sqlite_migrate
from jobctl.store.dblock import DbLock
from jobctl.store.pg.migrate import migrate as pg_migrate

#: The tables moved, parents before children, each with the order its rows are read in.
TABLES: tuple[tuple[str, str], ...] = (
    ("queues", "name"),
    ("webhook_secrets", "owner_uid, name"),
    ("schedule_defs", "id"),
    ("schedule_cursors", "id"),
    ("jobs", "id"),
    ("attempts", "job_id, number"),
    ("schedule_skips", "id"),
    ("schedule_edits", "id"),
    ("audit", "id"),
)
#: Kept by triggers from the rows: recomputed on the target, never copied.
RECOMPUTED = ("job_counts", "log_usage", "schedule_counts")
#: SQLite tables with no PostgreSQL counterpart (see the module docstring).
NOT_MOVED = ("job_id_high", "schema_migrations")
#: Tables a target must have no row in (unless forced): what a store holds.
_CONTENT = tuple(t for t, _ in TABLES)
#: Tables holding serial ids: their sequences are set past the highest id moved.
_SERIALS = ("audit", "schedule_skips", "schedule_edits")
#: A progress line every this many rows of a table.
PROGRESS_EVERY = 50_000

Progress = Callable[[str], None]


@dataclass
class Moved:
    """What one move carried: rows per table, and how long it took."""

    rows: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    next_job_id: int = 1

    @property
    def jobs(self) -> int:
        return self.rows.get("jobs", 0)


def sqlite_path(source: str) -> Path:
    """The file of ``--from``: ``sqlite:///abs/path`` (``sqlite://`` and then the path,
    like a ``file://`` URL) or a plain path."""
    if source.startswith("sqlite://"):
        path = source[len("sqlite://") :]
        if not path:
            raise InvalidInput(f"--from {source!r} names no file: give sqlite:///path/jobctl.db")
        return Path(path)
    if "://" in source:
        scheme = source.split("://", 1)[0]
        raise InvalidInput(
            f"--from must be a SQLite file (sqlite:///path or a path), not {scheme}://"
        )
    if not source:
        raise InvalidInput("--from is empty: give sqlite:///path/jobctl.db")
    return Path(source)


def check_url(url: str) -> str:
    """``url`` if it is a well-formed PostgreSQL URL; :class:`InvalidInput` otherwise."""
    from psycopg.conninfo import conninfo_to_dict

    from jobctl.config import PG_SCHEMES

    if not url.startswith(PG_SCHEMES):
        raise InvalidInput(f"--to must be a postgresql:// URL, not {shown_url(url)!r}")
    try:
        conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        why = _first_line(exc).replace(url, shown_url(url))  # libpq quotes the URL
        raise InvalidInput(f"bad PostgreSQL URL {shown_url(url)}: {why}") from None
    return url


def shown_url(url: str) -> str:
    """``url`` as messages show it: its password masked."""
    try:
        return shown_db(url)
    except ValueError:  # not even a URL urllib can split: show only its scheme
        return url.split("://", 1)[0] + "://…"


def move(source: Path, url: str, *, force: bool = False, progress: Progress = print) -> Moved:
    """Copy the SQLite store at ``source`` into the PostgreSQL database at ``url``."""
    if not source.is_file():
        raise NotFound(f"no database at {source}", path=str(source))
    check_url(url)
    lock = DbLock(str(source))  # refuses while a daemon holds the file
    try:
        src = _open_source(source)
        try:
            return _move(src, url, force, progress)
        finally:
            src.close()  # before the lock's descriptor (see jobctl.store.dblock)
    finally:
        lock.release()


def _open_source(source: Path) -> sqlite3.Connection:
    """The SQLite file, brought to this jobctl's schema (as a daemon start would)."""
    try:
        conn = sqlite3.connect(source, isolation_level=None, timeout=10)
        sqlite_migrate.migrate(conn)
        conn.execute("BEGIN")  # one read transaction: one consistent instant of the file
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"cannot read {source}: {exc}") from None
    return conn


def _move(src: sqlite3.Connection, url: str, force: bool, progress: Progress) -> Moved:
    started = time.monotonic()
    try:
        dst = psycopg.connect(url, connect_timeout=10)
    except psycopg.OperationalError as exc:
        why = _first_line(exc).replace(url, shown_url(url))
        raise StoreError(f"cannot connect to {shown_url(url)}: {why}") from None
    at = "the schema"  # what was being written when PostgreSQL refused, for the message
    try:
        pg_migrate(dst)  # the schema, committed on its own (an empty schema is harmless)
        with dst.transaction():
            _prepare_target(dst, url, force)
            moved = Moved()
            for table, order in TABLES:
                at = f"the {table} rows"
                moved.rows[table] = _copy_table(src, dst, table, order, progress)
            at = "the counters and sequences"
            _recompute(dst)
            moved.next_job_id = _set_sequences(src, dst)
            _check_counts(dst, moved)
            progress(f"committing {sum(moved.rows.values())} rows")
    except psycopg.Error as exc:
        raise StoreError(
            f"moving into {shown_url(url)} failed at {at}, nothing was kept: {_first_line(exc)}"
        ) from None
    finally:
        dst.close()
    moved.seconds = time.monotonic() - started
    return moved


def _prepare_target(dst: psycopg.Connection[Any], url: str, force: bool) -> None:
    """Lock the target's tables; refuse live daemons, and rows unless ``force``."""
    names = sql.SQL(", ").join(sql.Identifier(t) for t in (*_CONTENT, *RECOMPUTED))
    dst.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(names))
    live = dst.execute(
        "SELECT owner FROM daemons WHERE stopped_at IS NULL AND last_seen >="
        " (extract(epoch FROM clock_timestamp()) * 1000)::bigint - 3 * lease_ttl_ms"
        " ORDER BY owner"
    ).fetchall()
    if live:
        owners = ", ".join(str(r[0]) for r in live)
        raise Conflict(
            f"{shown_url(url)} has live daemons ({owners}); stop them before moving a store in"
        )
    filled = [t for t in _CONTENT if dst.execute(_exists(t)).fetchone() is not None]
    if filled and not force:
        raise Conflict(
            f"{shown_url(url)} is not empty (rows in {', '.join(filled)}); give --force to "
            "replace what it holds"
        )
    if filled:
        dst.execute(sql.SQL("TRUNCATE {}").format(names))


def _exists(table: str) -> sql.Composed:
    return sql.SQL("SELECT 1 FROM {} LIMIT 1").format(sql.Identifier(table))


def _columns(src: sqlite3.Connection, dst: psycopg.Connection[Any], table: str) -> list[str]:
    """The columns of ``table``; every SQLite column must have its PostgreSQL place."""
    ours = [str(r[1]) for r in src.execute(f"PRAGMA table_info({table})")]
    theirs = {
        str(r[0])
        for r in dst.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = %s",
            (table,),
        )
    }
    missing = [c for c in ours if c not in theirs]
    if missing:
        raise StoreError(
            f"the PostgreSQL {table} table has no column {', '.join(missing)}: "
            "is the target's jobctl older than this one?"
        )
    return ours


def _copy_table(
    src: sqlite3.Connection,
    dst: psycopg.Connection[Any],
    table: str,
    order: str,
    progress: Progress,
) -> int:
    """COPY every row of ``table`` into the target; how many."""
    cols = _columns(src, dst, table)
    total = int(src.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    progress(f"{table}: {total} rows")
    stmt = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(table), sql.SQL(", ").join(sql.Identifier(c) for c in cols)
    )
    n = 0
    with dst.cursor() as cur, cur.copy(stmt) as copy:
        for row in _rows(src, table, cols, order):
            copy.write_row(row)
            n += 1
            if n % PROGRESS_EVERY == 0:
                progress(f"{table}: {n}/{total}")
    return n


def _rows(src: sqlite3.Connection, table: str, cols: list[str], order: str) -> Iterator[Any]:
    listed = ", ".join(f'"{c}"' for c in cols)
    cur = src.execute(f"SELECT {listed} FROM {table} ORDER BY {order}")
    while batch := cur.fetchmany(5000):
        yield from batch


def _recompute(dst: psycopg.Connection[Any]) -> None:
    """The counters, from the rows now in the target (the triggers' sums, done once)."""
    for statement in _RECOMPUTE:
        dst.execute(statement)


_RECOMPUTE: tuple[bytes, ...] = (
    b"DELETE FROM job_counts",
    b"INSERT INTO job_counts (queue, owner_uid, bucket, n)"
    b" SELECT queue, owner_uid, CASE WHEN due = 1 THEN 'due' ELSE status END, count(*)"
    b" FROM jobs GROUP BY 1, 2, 3",
    b"DELETE FROM log_usage",
    b"INSERT INTO log_usage (owner_uid, bytes) SELECT j.owner_uid, sum(a.log_bytes)"
    b" FROM attempts a JOIN jobs j ON j.id = a.job_id GROUP BY 1",
    b"DELETE FROM schedule_counts",
    b"INSERT INTO schedule_counts (owner_uid, live, paused, broken, misfire_skips,"
    b" overlap_skips, pause_skips)"
    b" SELECT d.owner_uid, count(*), sum(c.paused),"
    b" sum(CASE WHEN c.paused = 0 AND c.broken_at IS NOT NULL THEN 1 ELSE 0 END),"
    b" sum(d.misfire_skips), sum(d.overlap_skips), sum(d.pause_skips)"
    b" FROM schedule_defs d JOIN schedule_cursors c ON c.id = d.id"
    b" WHERE c.deleted_at IS NULL GROUP BY 1",
)


def _set_sequences(src: sqlite3.Connection, dst: psycopg.Connection[Any]) -> int:
    """Every sequence past the highest id moved (never backwards); the next job id."""
    high = src.execute("SELECT max(seq) FROM job_id_high").fetchone()[0] or 0
    top = src.execute("SELECT max(id) FROM jobs").fetchone()[0] or 0
    _advance(dst, "jobs_id_seq", max(int(high), int(top)))
    for table in _SERIALS:
        seq = dst.execute("SELECT pg_get_serial_sequence(%s, 'id')", (table,)).fetchone()
        moved_max = src.execute(f"SELECT max(id) FROM {table}").fetchone()[0] or 0
        if seq is not None and seq[0] is not None:
            _advance(dst, str(seq[0]), int(moved_max))
    row = dst.execute(
        "SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM jobs_id_seq"
    ).fetchone()
    return int(row[0]) if row else 1


def _advance(dst: psycopg.Connection[Any], seq: str, at_least: int) -> None:
    """Set ``seq`` so its next value is above ``at_least``, unless it already is (a
    sequence never goes back: ids the target already gave stay given)."""
    row = dst.execute(
        sql.SQL(
            "SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM {}"
        ).format(
            sql.SQL(seq)  # a name PostgreSQL gave (pg_get_serial_sequence) or our own
        )
    ).fetchone()
    if row is not None and at_least > int(row[0]):
        dst.execute("SELECT setval(%s::regclass, %s, true)", (seq, at_least))


def _check_counts(dst: psycopg.Connection[Any], moved: Moved) -> None:
    """Every row that was read is in the target (else the transaction rolls back)."""
    for table, n in moved.rows.items():
        row = dst.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table)))
        found = row.fetchone()
        if found is None or int(found[0]) != n:
            raise StoreError(f"{table}: {n} rows read but {found} in the target; nothing kept")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


__all__ = ["NOT_MOVED", "RECOMPUTED", "TABLES", "Moved", "check_url", "move", "sqlite_path"]
