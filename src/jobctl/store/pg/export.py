"""``jobctl export`` from a PostgreSQL database: the same rows, columns and order as from
a SQLite file (:mod:`jobctl.store.export`), read in one read-only transaction.

Who may export what: whoever the database lets read the tables (its roles and grants are
the rule here, as the file's permissions are on SQLite). Rows stream through a
server-side cursor, so an export of a million jobs does not sit in memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from jobctl.errors import InvalidInput, StoreError
from jobctl.store.export import TABLES, readable
from jobctl.store.pg.move import shown_url

#: The order rows are read in, as on SQLite.
_ORDER = {"jobs": "id", "attempts": "job_id, number", "schedules": "id"}
#: Rows fetched from the server at a time.
_BATCH = 2000

PgConn = psycopg.Connection[dict[str, Any]]


def open_readonly(url: str) -> PgConn:
    """A read-only session on the database at ``url``."""
    try:
        conn = psycopg.connect(url, connect_timeout=10, row_factory=dict_row)
    except psycopg.Error as exc:
        why = str(exc).strip().splitlines()[0].replace(url, shown_url(url))
        raise StoreError(f"cannot connect to {shown_url(url)}: {why}") from None
    conn.read_only = True
    return conn


def export(url: str, what: str, owner: int | None) -> tuple[list[str], Iterator[dict[str, Any]]]:
    """The columns of an export and its rows; the session closes when the rows are read."""
    conn = open_readonly(url)
    try:
        cols = columns(conn, what)
    except BaseException:
        conn.close()
        raise
    return cols, _closing(conn, rows(conn, what, owner))


def _closing(conn: PgConn, it: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    try:
        yield from it
    finally:
        conn.close()


def columns(conn: PgConn, what: str) -> list[str]:
    """The column names of an export, in table order."""
    cur = conn.execute(sql.SQL("SELECT * FROM {} LIMIT 0").format(_table(conn, what)))
    return [c.name for c in cur.description or ()]


def rows(conn: PgConn, what: str, owner: int | None = None) -> Iterator[dict[str, Any]]:
    """The rows of ``what``, oldest first, as :func:`jobctl.store.export.rows` gives them."""
    where = sql.SQL("")
    if owner is not None and what == "attempts":  # attempts belong to the job's owner
        where = sql.SQL(" WHERE job_id IN (SELECT id FROM jobs WHERE owner_uid = %(owner)s)")
    elif owner is not None:
        where = sql.SQL(" WHERE owner_uid = %(owner)s")
    query = sql.SQL("SELECT * FROM {}{} ORDER BY {}").format(
        _table(conn, what), where, sql.SQL(_ORDER[what])
    )
    try:
        with conn.cursor(name="jobctl_export") as cur:
            cur.itersize = _BATCH
            cur.execute(query, {"owner": owner})
            for row in cur:
                yield readable(row)
    except psycopg.Error as exc:
        raise StoreError(f"cannot read {what}: {exc}") from None


def _table(conn: PgConn, what: str) -> sql.Identifier:
    if what not in TABLES:
        raise InvalidInput(f"cannot export {what!r}: choose from {', '.join(TABLES)}")
    found = conn.execute("SELECT to_regclass(%s) AS t", (TABLES[what],)).fetchone()
    if found is None or found["t"] is None:
        raise StoreError(f"the database has no {TABLES[what]} (is it a jobctl database?)")
    return sql.Identifier(TABLES[what])


__all__ = ["columns", "export", "open_readonly", "rows"]
